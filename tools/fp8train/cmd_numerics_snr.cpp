// `fp8train numerics snr [--out DIR] [--seed S] [--samples N] [--quick]`: the FP8/INT8 quantization-error
// study of the numerics lab (src/lab/snr_study.h). Writes DIR/report.html (one self-contained page with
// inline SVG figures) and DIR/results.csv (one row per sample and configuration); the same seed and sizes
// give the same CSV byte for byte.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "common/error.h"
#include "lab/snr_report.h"
#include "lab/snr_study.h"

namespace fp8train::cli {
namespace {

struct SnrOptions {
  std::string out = "snr-report";
  uint64_t seed = 1;
  int samples = 0;  // 0: the preset's
  bool quick = false;
};

void run_snr(const SnrOptions& o) {
  lab::SnrStudyConfig config = o.quick ? lab::SnrStudyConfig::quick_preset() : lab::SnrStudyConfig::defaults();
  config.seed = o.seed;
  if (o.samples != 0) config.samples = o.samples;
  config.validate();
  lab::prepare_output_dir(o.out);  // fail before the study runs, not after
  std::printf("numerics snr: seed %llu, %d samples per configuration%s -> %s\n",
              static_cast<unsigned long long>(config.seed), config.samples, config.quick ? " (quick)" : "",
              o.out.c_str());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const auto rows = lab::run_snr_study(config, {}, [](const std::string& line) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  });
  lab::write_snr_outputs(o.out, rows, config);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s/report.html and %s/results.csv (%zu rows) in %.1f s\n", o.out.c_str(), o.out.c_str(),
              rows.size(), dt);
}

void add_numerics_snr(CLI::App& root) {
  auto* numerics = root.get_subcommand("numerics");
  auto* cmd = numerics->add_subcommand(
      "snr", "FP8/INT8 quantization-error study: SNR of inner products and a DeepSeek-V3-shaped GEMM -> HTML report + CSV");
  static SnrOptions options;
  cmd->add_option("--out", options.out, "Output directory (created if missing)")->capture_default_str();
  cmd->add_option("--seed", options.seed, "Random seed (same seed -> same results.csv, byte for byte)")
      ->capture_default_str()
      ->check(CLI::Validator(  // a uint64 option would otherwise wrap "-1" around to 2^64 - 1
          [](std::string& text) {
            return !text.empty() && text[0] == '-' ? std::string("the seed must be a non-negative integer")
                                                   : std::string();
          },
          "UINT", "non-negative"));
  cmd->add_option("--samples", options.samples,
                  fmt::format("Samples per configuration (default {}; {} with --quick)",
                              lab::SnrStudyConfig::defaults().samples, lab::SnrStudyConfig::quick_preset().samples))
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--quick", options.quick, "Small preset (a few seconds): fewer samples and GEMM sub-blocks");
  cmd->callback([] { run_snr(options); });
}

const bool registered = register_command("numerics-snr", 22, &add_numerics_snr);

}  // namespace
}  // namespace fp8train::cli
