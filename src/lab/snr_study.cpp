// The SNR study's configuration, grids and driver (see snr_study.h).
#include "lab/snr_study.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/error.h"

namespace fp8train::lab {

SnrStudyConfig SnrStudyConfig::defaults() { return SnrStudyConfig{}; }

SnrStudyConfig SnrStudyConfig::quick_preset() {
  SnrStudyConfig c;
  c.samples = 4;
  c.gemm_blocks = 2;
  c.gemm_m = 1024;  // a smaller GEMM: generating the default's 31M inputs alone would take seconds
  c.gemm_n = 1024;
  c.quick = true;
  return c;
}

void SnrStudyConfig::validate() const {
  FP8T_CHECK(samples >= 1 && samples <= 100000, "--samples must be between 1 and 100000, got {}", samples);
  FP8T_CHECK(pairs_per_sample >= 1 && pairs_per_sample <= 4096,
             "pairs per sample must be between 1 and 4096, got {}", pairs_per_sample);
  FP8T_CHECK(outlier_tokens >= 1 && outlier_k >= 128 && outlier_k % 128 == 0,
             "the outlier experiment needs >= 1 token and K a positive multiple of 128 (got {} tokens, K = {})",
             outlier_tokens, outlier_k);
  FP8T_CHECK(outlier_weight_rows >= 1 && outlier_channels >= 0 && outlier_channels <= outlier_k,
             "the outlier experiment needs >= 1 weight row and at most K outlier channels (got {}, {})",
             outlier_weight_rows, outlier_channels);
  FP8T_CHECK(gemm_m >= 1 && gemm_n >= 128 && gemm_k >= 128 && gemm_k % 128 == 0 && gemm_n % 128 == 0,
             "the GEMM shape must have N and K multiples of 128 (got M={}, N={}, K={})", gemm_m, gemm_n, gemm_k);
  FP8T_CHECK(gemm_blocks >= 1 && gemm_block_m >= 1 && gemm_block_m <= gemm_m && gemm_block_n >= 128 &&
                 gemm_block_n % 128 == 0 && gemm_block_n <= gemm_n,
             "GEMM sub-blocks must be >= 1, at most M rows of A, and a multiple of 128 rows of B (got {} blocks "
             "of {} x {})",
             gemm_blocks, gemm_block_m, gemm_block_n);
}

const std::vector<int64_t>& study_lengths() {
  static const std::vector<int64_t> v = {128, 1024, 4096, 16384};
  return v;
}
const std::vector<double>& study_sigmas() {
  static const std::vector<double> v = {1e-3, 1e-2, 1.0};
  return v;
}
const std::vector<std::string>& study_scalings() {
  static const std::vector<std::string> v = {"none", "tensor", "1x128", "1x32"};
  return v;
}
const std::vector<double>& study_correlations() {
  static const std::vector<double> v = {0.0, 0.1, 0.3, 0.5, 0.9, 0.99};
  return v;
}
const std::vector<int>& study_promote_intervals() {
  static const std::vector<int> v = {32, 64, 128, 256, 512, 1024, 0};
  return v;
}
const std::vector<double>& study_outlier_factors() {
  static const std::vector<double> v = {1.0, 100.0, 1000.0, 10000.0, 100000.0};
  return v;
}

std::vector<SnrRow> run_snr_study(const SnrStudyConfig& config, const std::vector<int>& experiments,
                                  const StudyLog& log) {
  config.validate();
  for (int e : experiments) FP8T_CHECK(e >= 1 && e <= 7, "experiments are numbered 1 to 7, got {}", e);
  using Runner = std::vector<SnrRow> (*)(const SnrStudyConfig&);
  static const Runner runners[7] = {run_length_experiment,  run_correlation_experiment, run_promotion_experiment,
                                    run_outlier_experiment, run_format_experiment,      run_gemm_experiment,
                                    run_method_checks};
  static const char* const names[7] = {"vector length x scaling x accumulation", "correlation",
                                       "promotion interval", "outlier channels", "formats",
                                       "DeepSeek-V3-shaped GEMM", "method checks"};
  std::vector<SnrRow> rows;
  for (int e = 1; e <= 7; ++e) {
    if (!experiments.empty() && std::find(experiments.begin(), experiments.end(), e) == experiments.end()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<SnrRow> part = runners[e - 1](config);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (log) log(fmt::format("experiment {} ({}): {} rows in {:.1f} s", e, names[e - 1], part.size(), dt));
    rows.insert(rows.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return rows;
}

}  // namespace fp8train::lab
