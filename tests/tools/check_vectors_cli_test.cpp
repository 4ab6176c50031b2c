// `fp8train numerics check-vectors DIR` end to end: runs the built CLI (FP8TRAIN_CLI) through the shell with
// stdout and stderr captured to a temporary file, then checks the report line by line and the exit status:
//   - on tests/data/hopper-fp8-accum: one `<file> exact X/X` line per .bin file, last line
//     `<files> passed, 0 failed`, exit 0;
//   - on a temporary folder holding a good copy, a truncated copy, a garbage file and a copy with one wrong
//     output: the bad ones reported as failed by name, the good one still checked, exit 1 (not a crash);
//   - on a missing or empty folder: a clear error and a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct RunResult {
  bool exited = false;  // false: killed by a signal (a crash)
  int exit_code = -1;
  std::vector<std::string> lines;  // stdout and stderr, in order
};

class CheckVectorsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(work_); }

  RunResult run(const std::string& args) {
    const fs::path out = work_ / "output.txt";
    const std::string cmd = std::string("'") + FP8TRAIN_CLI + "' " + args + " > '" + out.string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    RunResult r;
    r.exited = status != -1 && WIFEXITED(status);
    r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) r.lines.push_back(line);
    return r;
  }

  static std::vector<char> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  static std::string joined(const RunResult& r) {
    std::string s;
    for (const auto& l : r.lines) {
      s += l;
      s += '\n';
    }
    return s;
  }

  // The one line that starts with `name` followed by a space.
  static std::string line_for(const RunResult& r, const std::string& name) {
    std::string found;
    int count = 0;
    for (const auto& l : r.lines) {
      if (l.rfind(name + " ", 0) == 0) {
        found = l;
        ++count;
      }
    }
    EXPECT_EQ(count, 1) << "lines for " << name << " in:\n" << joined(r);
    return found;
  }

  fs::path work_;
};

const std::string kDataDir = std::string(FP8TRAIN_TEST_DATA) + "/hopper-fp8-accum";

}  // namespace

TEST_F(CheckVectorsCli, AllSharedVectorsExact) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDataDir))
    if (e.path().extension() == ".bin") names.push_back(e.path().filename().string());
  ASSERT_GE(names.size(), 15u);
  const RunResult r = run("numerics check-vectors '" + kDataDir + "'");
  ASSERT_TRUE(r.exited) << joined(r);
  EXPECT_EQ(r.exit_code, 0) << joined(r);
  ASSERT_EQ(r.lines.size(), names.size() + 1) << joined(r);
  for (const auto& name : names) {
    const std::string line = line_for(r, name);
    // "<file> exact X/X" with X > 0.
    std::istringstream fields(line);
    std::string file, word, counts;
    fields >> file >> word >> counts;
    EXPECT_EQ(file, name);
    EXPECT_EQ(word, "exact") << line;
    const auto slash = counts.find('/');
    ASSERT_NE(slash, std::string::npos) << line;
    EXPECT_EQ(counts.substr(0, slash), counts.substr(slash + 1)) << line;
    EXPECT_GT(std::stoll(counts.substr(slash + 1)), 0) << line;
  }
  EXPECT_EQ(r.lines.back(), std::to_string(names.size()) + " passed, 0 failed");
  EXPECT_EQ(r.lines.back(), "15 passed, 0 failed");  // the shared set as delivered
}

TEST_F(CheckVectorsCli, BadFilesFailByNameOthersStillChecked) {
  const fs::path dir = work_ / "vectors";
  fs::create_directories(dir);
  const std::vector<char> good = read_bytes(fs::path(kDataDir) / "probe_e4m3_m16_n16_k32_default.bin");
  ASSERT_EQ(good.size(), 24u + 16 * 32 + 16 * 32 + 16 * 16 * 4);
  write_bytes(dir / "a_good.bin", good);
  write_bytes(dir / "b_truncated.bin", std::vector<char>(good.begin(), good.end() - 100));
  std::vector<char> garbage(700);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
  write_bytes(dir / "c_garbage.bin", garbage);
  std::vector<char> wrong = good;
  wrong[wrong.size() - 4] ^= 1;  // one output off by one unit in the last place
  write_bytes(dir / "d_wrong_output.bin", wrong);
  write_bytes(dir / "e_good_again.bin", good);  // checked after the failures
  write_bytes(dir / "notes.txt", {'h', 'i'});    // not a .bin: ignored

  const RunResult r = run("numerics check-vectors '" + dir.string() + "'");
  ASSERT_TRUE(r.exited) << "the CLI crashed:\n" << joined(r);
  EXPECT_EQ(r.exit_code, 1) << joined(r);
  ASSERT_EQ(r.lines.size(), 6u) << joined(r);
  EXPECT_EQ(line_for(r, "a_good.bin"), "a_good.bin exact 256/256");
  const std::string truncated = line_for(r, "b_truncated.bin");
  EXPECT_EQ(truncated.rfind("b_truncated.bin failed:", 0), 0u) << truncated;
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  const std::string garbage_line = line_for(r, "c_garbage.bin");
  EXPECT_EQ(garbage_line.rfind("c_garbage.bin failed:", 0), 0u) << garbage_line;
  EXPECT_NE(garbage_line.find("bad magic"), std::string::npos) << garbage_line;
  EXPECT_EQ(line_for(r, "d_wrong_output.bin"), "d_wrong_output.bin exact 255/256");
  EXPECT_EQ(line_for(r, "e_good_again.bin"), "e_good_again.bin exact 256/256");
  EXPECT_EQ(r.lines.back(), "2 passed, 3 failed");
  for (const auto& l : r.lines) EXPECT_EQ(l.find("notes.txt"), std::string::npos) << l;
}

TEST_F(CheckVectorsCli, MissingOrEmptyFolderIsAnError) {
  const RunResult missing = run("numerics check-vectors '" + (work_ / "no_such_dir").string() + "'");
  ASSERT_TRUE(missing.exited) << joined(missing);
  EXPECT_NE(missing.exit_code, 0) << joined(missing);
  EXPECT_NE(joined(missing).find("is not a directory"), std::string::npos) << joined(missing);

  fs::create_directories(work_ / "empty");
  const RunResult empty = run("numerics check-vectors '" + (work_ / "empty").string() + "'");
  ASSERT_TRUE(empty.exited) << joined(empty);
  EXPECT_NE(empty.exit_code, 0) << joined(empty);
  EXPECT_NE(joined(empty).find("no .bin files"), std::string::npos) << joined(empty);
}
