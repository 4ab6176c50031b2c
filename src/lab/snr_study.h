// The FP8/INT8 quantization-error study behind `fp8train numerics snr`: six experiments measuring the SNR of
// inner products (and of one DeepSeek-V3-shaped GEMM) under OCP formats, block scaling and the bit-faithful
// Hopper accumulator, plus a seventh that measures each flaw of the published simulation on its own.
// Results are one SnrRow per (experiment, configuration, sample).
//
// A sample is a batch of independent inner products drawn afresh: `pairs_per_sample` vector pairs in
// experiments 1, 2, 3 and 5; a [128 tokens × K] activation block against `outlier_weight_rows` weight rows
// in experiment 4; one output sub-block of the GEMM in experiment 6. Its SNR is
//   SNR = 10·log10(Σ ref² / Σ (ref − test)²) over the sample's outputs,
// with ref the FP64 product of the unquantized float32 inputs and test the quantized computation (and a
// second SNR, accum_snr_db, against the exact product of the quantized inputs: the accumulator's share). Every
// configuration of one experiment sees the same data for a given sample (paired comparisons).
//
// Determinism: each task's data come from a counter-based stream keyed by (seed, experiment, config,
// sample); tasks write to fixed slots, so the rows (and the CSV) are identical for a given seed and
// size whatever the number of threads.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace fp8train::lab {

struct SnrStudyConfig {
  uint64_t seed = 1;
  int samples = 40;              // samples per configuration in experiments 1–5 and 7
  int pairs_per_sample = 8;      // inner products per sample in experiments 1, 2, 3, 5
  int outlier_tokens = 128;      // experiment 4: activation rows per sample (one 128×128 block row)
  int64_t outlier_k = 2048;      // experiment 4: K
  int outlier_weight_rows = 4;   // experiment 4: weight rows per sample (x2: as drawn and zeroed)
  int outlier_channels = 4;      // experiment 4: outlier channels per sample
  int64_t gemm_m = 4096, gemm_n = 7168, gemm_k = 2048;  // experiment 6: the GEMM shape
  int gemm_blocks = 8;           // experiment 6: output sub-blocks evaluated (its "samples")
  int64_t gemm_block_m = 32;     // experiment 6: sub-block rows of A (tokens)
  int64_t gemm_block_n = 128;    // experiment 6: sub-block rows of B (one 128-row weight block)
  bool quick = false;            // recorded in the report; the preset below sets the sizes

  static SnrStudyConfig defaults();
  static SnrStudyConfig quick_preset();  // < 10 s: fewer samples, a 1024 × 1024 × 2048 GEMM, the same grid
  void validate() const;                 // throws fp8train::Error naming the bad field
};

inline constexpr double kNotApplicable = std::numeric_limits<double>::quiet_NaN();

struct SnrRow {
  int experiment = 0;            // 1..7
  int sample = 0;
  std::string data;              // gaussian, student-t3, gradient-like, activations, fprop, dgrad
  double sigma = kNotApplicable; // experiment 1: the inputs' standard deviation
  double rho = kNotApplicable;   // target Pearson correlation of the pair
  double measured_rho = kNotApplicable;  // the sample's own Pearson correlation (all its pairs pooled)
  double outlier_factor = kNotApplicable;  // experiment 4: magnitude of the outlier channels (1 = none)
  int64_t length = 0;            // K
  std::string format;            // e4m3, e5m2, int8, bf16, e5m2xe4m3 (A format x B format)
  std::string scaling;           // none, tensor, 1x128, 1x32, 128x128 (experiment 6: A|B granularities)
  std::string rounding;          // rne, stochastic (experiment 7 also: ties-away, truncate)
  std::string accumulation;      // hopper, fp32, int32, exact (experiment 7 also: fp8-sum)
  int promote_interval = -1;     // hopper: N_C, 0 = never; -1 = not applicable
  std::string recipe;            // experiment 6: the recipe; experiment 7: the variant
  double snr_db = 0.0;
  double calc_diff = 0.0;        // DeepGEMM's 1 − 2Σxy/Σ(x²+y²) over the sample's outputs
  // SNR against the exact (FP64) product of the quantized inputs themselves: the accumulation's own error,
  // with the quantization error taken out.
  double accum_snr_db = kNotApplicable;
};

// Progress lines ("experiment 3: 2.1 s"); may be empty.
using StudyLog = std::function<void(const std::string&)>;

// Runs the experiments whose numbers are listed (1..7; empty = all) and returns their rows in a fixed order.
std::vector<SnrRow> run_snr_study(const SnrStudyConfig& config, const std::vector<int>& experiments = {},
                                  const StudyLog& log = {});

// The individual experiments (exposed for tests).
std::vector<SnrRow> run_length_experiment(const SnrStudyConfig& config);       // 1
std::vector<SnrRow> run_correlation_experiment(const SnrStudyConfig& config);  // 2
std::vector<SnrRow> run_promotion_experiment(const SnrStudyConfig& config);    // 3
std::vector<SnrRow> run_outlier_experiment(const SnrStudyConfig& config);      // 4
std::vector<SnrRow> run_format_experiment(const SnrStudyConfig& config);       // 5
std::vector<SnrRow> run_gemm_experiment(const SnrStudyConfig& config);         // 6
// 7: the method checks — each flaw of the published simulation changed alone (quantizer and accumulator).
std::vector<SnrRow> run_method_checks(const SnrStudyConfig& config);

// The grids (shared by the experiments and the report).
const std::vector<int64_t>& study_lengths();         // 128, 1024, 4096, 16384
const std::vector<double>& study_sigmas();           // 1e-3, 1e-2, 1
const std::vector<std::string>& study_scalings();    // none, tensor, 1x128, 1x32
const std::vector<double>& study_correlations();     // 0, 0.1, 0.3, 0.5, 0.9, 0.99
const std::vector<int>& study_promote_intervals();   // 32 .. 1024, then 0 (never)
const std::vector<double>& study_outlier_factors();  // 1, 100, 1000, 10^4, 10^5

}  // namespace fp8train::lab
