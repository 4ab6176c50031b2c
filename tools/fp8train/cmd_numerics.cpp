// `fp8train numerics ...`: the numerics core from the command line.
//   check-vectors DIR   recompute every captured Hopper FP8 GEMM (*.bin) with the accumulator model
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "common/error.h"
#include "numerics/accum_vectors.h"

namespace fp8train::cli {
namespace {

int check_vectors(const std::string& dir) {
  namespace fs = std::filesystem;
  FP8T_CHECK(fs::is_directory(dir), "check-vectors: '{}' is not a directory", dir);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".bin") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  FP8T_CHECK(!files.empty(), "check-vectors: no .bin files in '{}'", dir);
  int passed = 0, failed = 0;
  for (const auto& f : files) {
    const std::string name = f.filename().string();
    try {
      const num::AccumVector v = num::read_accum_vector(f.string());
      const num::AccumCheck c = num::check_accum_vector(v);
      std::printf("%s exact %llu/%llu\n", name.c_str(), static_cast<unsigned long long>(c.matched),
                  static_cast<unsigned long long>(c.total));
      (c.matched == c.total ? passed : failed)++;
    } catch (const std::exception& e) {  // fp8train::Error for bad files; anything else still only fails this file
      std::printf("%s failed: %s\n", name.c_str(), e.what());
      ++failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

void add_numerics(CLI::App& root) {
  auto* numerics = root.add_subcommand("numerics", "FP8 numerics: formats, the Hopper accumulator, quantization studies");
  numerics->require_subcommand(1);

  auto* cv = numerics->add_subcommand("check-vectors", "Check the Hopper accumulator model against captured H200 GEMMs");
  static std::string dir;
  cv->add_option("dir", dir, "Folder of .bin vectors (format: tests/data/hopper-fp8-accum/README.md)")->required();
  cv->callback([] {
    const int rc = check_vectors(dir);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

const bool registered = register_command("numerics", 20, &add_numerics);

}  // namespace
}  // namespace fp8train::cli
