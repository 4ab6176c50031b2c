// `fp8train numerics ...`: the numerics core from the command line.
//   check-vectors DIR   recompute every captured Hopper FP8 GEMM (*.bin) with the accumulator model
//   codec --format e4m3|e5m2 [--saturation satfinite|nonsat] [--nan nvidia|ml_dtypes]
//         (--in X.f32 | --bits-from B --count N) --out Y.u8    encode float32 values (raw little-endian, or the
//                                                              float32s of bit patterns B..B+N-1) to FP8 codes
//         --decode --out Y.f32                                 the float32 value of each of the 256 codes
//       fp8train's codecs (numerics/formats.h) for outside oracles (tests/python/test_fp8_codecs.py: ml_dtypes).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "common/error.h"
#include "numerics/accum_vectors.h"
#include "numerics/formats.h"
#include "train/atomic_file.h"

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

struct CodecArgs {
  std::string format = "e4m3", saturation = "satfinite", nan = "nvidia", in, out;
  int64_t bits_from = -1, count = 0;
  bool decode = false;
};

void run_codec(const CodecArgs& a) {
  FP8T_CHECK(a.format == "e4m3" || a.format == "e5m2", "codec: --format must be e4m3 or e5m2, got '{}'", a.format);
  FP8T_CHECK(a.saturation == "satfinite" || a.saturation == "nonsat",
             "codec: --saturation must be satfinite or nonsat, got '{}'", a.saturation);
  FP8T_CHECK(a.nan == "nvidia" || a.nan == "ml_dtypes", "codec: --nan must be nvidia or ml_dtypes, got '{}'", a.nan);
  const num::Fp8Format f = a.format == "e4m3" ? num::Fp8Format::E4M3 : num::Fp8Format::E5M2;
  if (a.decode) {
    std::vector<float> values(256);
    for (int c = 0; c < 256; ++c) values[static_cast<size_t>(c)] = num::fp8_decode(f, static_cast<uint8_t>(c));
    train::write_file_atomic(a.out, std::string_view(reinterpret_cast<const char*>(values.data()), 256 * 4));
    return;
  }
  const num::Saturation sat = a.saturation == "satfinite" ? num::Saturation::SatFinite : num::Saturation::NonSat;
  const num::NanMode nan = a.nan == "nvidia" ? num::NanMode::Nvidia : num::NanMode::MlDtypes;
  std::string codes;
  if (!a.in.empty()) {
    FP8T_CHECK(a.bits_from < 0, "codec: give --in or --bits-from, not both");
    const std::string bytes = train::read_file(a.in);
    FP8T_CHECK(bytes.size() % 4 == 0, "codec: '{}' has {} bytes, not a whole number of float32s", a.in, bytes.size());
    codes.resize(bytes.size() / 4);
    for (size_t i = 0; i < codes.size(); ++i) {
      float x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      codes[i] = static_cast<char>(num::fp8_encode(f, x, sat, nan));
    }
  } else {
    FP8T_CHECK(a.bits_from >= 0 && a.count >= 0 && a.bits_from + a.count <= (int64_t{1} << 32),
               "codec: --bits-from B --count N must stay within the 2^32 float32 bit patterns");
    codes.resize(static_cast<size_t>(a.count));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < a.count; ++i)
      codes[static_cast<size_t>(i)] =
          static_cast<char>(num::fp8_encode(f, num::bits_float(static_cast<uint32_t>(a.bits_from + i)), sat, nan));
  }
  train::write_file_atomic(a.out, codes);
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

  static CodecArgs codec;
  auto* cd = numerics->add_subcommand("codec", "Encode float32s to E4M3/E5M2 codes, or decode every code (raw files)");
  cd->option_defaults()->always_capture_default();
  cd->add_option("--format", codec.format, "e4m3 or e5m2");
  cd->add_option("--saturation", codec.saturation, "satfinite (clamp to ±max) or nonsat (E4M3 NaN, E5M2 Inf)");
  cd->add_option("--nan", codec.nan, "NaN code: nvidia (canonical 0x7F) or ml_dtypes (sign kept)");
  cd->add_option("--in", codec.in, "raw little-endian float32 values to encode");
  cd->add_option("--bits-from", codec.bits_from, "encode the float32s of the bit patterns B, B+1, ... instead");
  cd->add_option("--count", codec.count, "how many bit patterns from --bits-from");
  cd->add_flag("--decode", codec.decode, "write the float32 value of each of the 256 codes instead");
  cd->add_option("--out", codec.out, "output file: one byte per code, or 256 float32s with --decode")->required();
  cd->callback([] { run_codec(codec); });
}

const bool registered = register_command("numerics", 20, &add_numerics);

}  // namespace
}  // namespace fp8train::cli
