// write_file_atomic / fsync_directory / read_file (see atomic_file.h), on POSIX file descriptors because
// iostreams cannot fsync.
#include "train/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace fp8train::train {

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  FP8T_CHECK(fd >= 0, "cannot open directory '{}' to sync it: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  FP8T_CHECK(rc == 0, "cannot sync directory '{}': {}", dir, std::strerror(err));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FP8T_CHECK(fd >= 0, "cannot create '{}': {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      FP8T_FAIL("cannot write '{}': {}", tmp, std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    FP8T_FAIL("cannot flush '{}' to disk: {}", tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    FP8T_FAIL("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err));
  }
  fsync_directory(std::filesystem::path(path).parent_path().string());
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  FP8T_CHECK(std::filesystem::exists(path, ec), "file '{}' does not exist", path);
  FP8T_CHECK(!std::filesystem::is_directory(path, ec), "'{}' is a directory, expected a file", path);
  std::ifstream in(path, std::ios::binary);
  FP8T_CHECK(in.good(), "cannot open '{}' for reading", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  FP8T_CHECK(!in.bad(), "cannot read '{}'", path);
  return std::move(ss).str();
}

}  // namespace fp8train::train
