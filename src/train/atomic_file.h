// Crash-safe file writes: the bytes go to "<path>.tmp-<pid>" in the same directory, are fsync'ed, and the
// temporary is renamed over <path> (rename is atomic on POSIX filesystems), then the directory is fsync'ed
// so the rename itself is durable. A reader sees the old file or the new one, never a partial one.
#pragma once
#include <string>
#include <string_view>

namespace fp8train::train {

void write_file_atomic(const std::string& path, std::string_view bytes);

// fsync of a directory (makes renames/creations inside it durable). Throws Error on failure.
void fsync_directory(const std::string& dir);

// Reads a whole file; throws Error naming the path when it cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace fp8train::train
