// Experiment 6 of the SNR study: a DeepSeek-V3-shaped GEMM D[M, N] = A[M, K] · B[N, K]ᵀ (default
// 4096 × 7168 × 2048) under each precision recipe, scored with DeepGEMM's calc_diff and the SNR against the
// FP64 product of the unquantized inputs.
//   fprop: A = activations N(0, 1) with 4 outlier channels ×100, B = weights N(0, 0.02²)
//   dgrad: A = gradient-like (see sample_random.h),                B = the same weights
// Whole tensors are generated (per-tensor scales need the whole tensor's amax); the products are computed by
// fp8train's reference block-scaled GEMM (quant::ref_gemm: bit-faithful Hopper mode, FP32 mode, exact INT8)
// on `gemm_blocks` random output sub-blocks of gemm_block_m rows of A × gemm_block_n rows of B (whole
// 128-row weight blocks), each sub-block being one sample. Only the rows a sub-block needs are quantized,
// with the whole tensor's amax for per-tensor scales, which gives exactly the codes and scales that
// quantizing the whole tensor would. The accumulation-only SNR uses the exact product of the same quantized
// operands (detail::dequantized_dots).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "lab/sample_random.h"
#include "lab/snr_internal.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "quant/ref_gemm.h"

namespace fp8train::lab {
namespace {

struct Recipe {
  std::string name;
  quant::Format a_format, b_format;
  std::string a_scaling, b_scaling;
  detail::Accumulation acc;
  bool bf16 = false;  // the unquantized baseline: BF16 inputs, FP32 accumulation
  quant::ScaleMode scale_mode = quant::ScaleMode::Amax;
};

const std::vector<Recipe>& recipes() {
  using F = quant::Format;
  static const std::vector<Recipe> r = {
      {"BF16, FP32 accumulation", F::BF16, F::BF16, "none", "none", {"fp32", -1}, true},
      {"DeepSeek-V3: E4M3 1x128 / 128x128, N_C=128", F::E4M3, F::E4M3, "1x128", "128x128", {"hopper", 128}},
      {"DeepSeek-V3, UE8M0 scales: E4M3 1x128 / 128x128, N_C=128", F::E4M3, F::E4M3, "1x128", "128x128",
       {"hopper", 128}, false, quant::ScaleMode::PowerOfTwo},
      {"per-tensor E4M3, N_C=128", F::E4M3, F::E4M3, "tensor", "tensor", {"hopper", 128}},
      {"per-tensor E4M3, no promotion", F::E4M3, F::E4M3, "tensor", "tensor", {"hopper", num::kNeverPromote}},
      {"per-tensor E5M2 (A) / E4M3 (B), N_C=128", F::E5M2, F::E4M3, "tensor", "tensor", {"hopper", 128}},
      {"INT8 1x128 / 128x128, int32", F::INT8, F::INT8, "1x128", "128x128", {"int32", -1}},
  };
  return r;
}

// Rows generated independently (one stream per row) so generation can run in parallel and stay
// deterministic.
std::vector<float> generate(const std::string& kind, uint64_t key, int64_t rows, int64_t cols,
                            const std::vector<int64_t>& outlier_channels) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    CounterRng rng(stream_key(key, {static_cast<uint64_t>(r)}));
    float* row = x.data() + r * cols;
    if (kind == "gradient") {
      const std::vector<float> g = gradient_like(rng, 1, cols);
      std::copy(g.begin(), g.end(), row);
    } else if (kind == "weights") {
      for (int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(0.02 * rng.normal());
    } else {  // activations
      for (int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(rng.normal());
      for (int64_t c : outlier_channels) row[c] *= 100.0f;
    }
  }
  return x;
}

// Quantizes a slice of rows exactly as quantizing the whole tensor would: "tensor" with the whole tensor's
// amax, tiles and 128x128 blocks row-local (B slices start on a 128-row boundary).
quant::QTensor quantize_rows(const std::vector<float>& slice, int64_t rows, int64_t cols, quant::Format format,
                                 const std::string& scaling, quant::ScaleMode mode, float tensor_amax) {
  if (format == quant::Format::BF16)
    return quant::quantize(slice, rows, cols, {format, quant::Granularity::tensor(), mode});
  if (scaling == "tensor")
    return quant::quantize_with_scale(slice.data(), rows, cols, format, quant::block_scale(tensor_amax, format, mode));
  return quant::quantize(slice, rows, cols, {format, quant::parse_granularity(scaling), mode});
}

}  // namespace

std::vector<SnrRow> run_gemm_experiment(const SnrStudyConfig& c) {
  c.validate();
  const int64_t m = c.gemm_m, n = c.gemm_n, k = c.gemm_k, bm = c.gemm_block_m, bn = c.gemm_block_n;
  const std::vector<std::string> gemms = {"fprop", "dgrad"};
  const std::vector<float> w = generate("weights", stream_key(c.seed, {6, 0}), n, k, {});
  const float w_amax = quant::amax_of(w.data(), n * k);
  // Sub-block positions: the same for both GEMMs and every recipe (paired samples).
  std::vector<std::pair<int64_t, int64_t>> origins;
  {
    CounterRng rng(stream_key(c.seed, {6, 1}));
    for (int b = 0; b < c.gemm_blocks; ++b) {
      const int64_t i0 = static_cast<int64_t>(rng.below(static_cast<uint64_t>(m - bm + 1)));
      const int64_t j0 = 128 * static_cast<int64_t>(rng.below(static_cast<uint64_t>((n - bn) / 128 + 1)));
      origins.emplace_back(i0, j0);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> pairs;  // output (i, j) of the sub-block, row-major
  for (int64_t i = 0; i < bm; ++i)
    for (int64_t j = 0; j < bn; ++j) pairs.emplace_back(i, j);
  std::vector<SnrRow> rows;
  for (size_t gi = 0; gi < gemms.size(); ++gi) {
    std::vector<int64_t> channels;
    if (gemms[gi] == "fprop") {
      CounterRng rng(stream_key(c.seed, {6, 2}));
      while (channels.size() < 4) {
        const auto ch = static_cast<int64_t>(rng.below(static_cast<uint64_t>(k)));
        if (std::find(channels.begin(), channels.end(), ch) == channels.end()) channels.push_back(ch);
      }
    }
    const std::vector<float> a = generate(gemms[gi] == "fprop" ? "activations" : "gradient",
                                          stream_key(c.seed, {6, 3, gi}), m, k, channels);
    const float a_amax = quant::amax_of(a.data(), m * k);
    std::vector<std::vector<SnrRow>> by_recipe(recipes().size());
    for (int b = 0; b < c.gemm_blocks; ++b) {
      const auto [i0, j0] = origins[b];
      const std::vector<float> as(a.begin() + i0 * k, a.begin() + (i0 + bm) * k);
      const std::vector<float> ws(w.begin() + j0 * k, w.begin() + (j0 + bn) * k);
      const std::vector<double> ref = detail::exact_dots(as, ws, k, pairs);
      for (size_t ri = 0; ri < recipes().size(); ++ri) {
        const Recipe& recipe = recipes()[ri];
        const quant::QTensor qa = quantize_rows(as, bm, k, recipe.a_format, recipe.a_scaling, recipe.scale_mode, a_amax);
        const quant::QTensor qb = quantize_rows(ws, bn, k, recipe.b_format, recipe.b_scaling, recipe.scale_mode, w_amax);
        quant::GemmConfig g;
        g.mode = recipe.acc.name == "fp32" ? quant::AccumMode::Fp32 : quant::AccumMode::Hopper;
        g.promote_interval = recipe.acc.promote_interval < 0 ? 128 : recipe.acc.promote_interval;
        const std::vector<float> test = quant::ref_gemm(qa, qb, g);  // multi-threaded
        // The exact product of the quantized operands, summed in a fixed order (thread-count independent).
        std::vector<double> exact;
        if (recipe.bf16) {
          const std::vector<float> av = quant::dequantize(qa), bv = quant::dequantize(qb);  // BF16 values, exact
          exact = detail::exact_dots(av, bv, k, pairs);
        } else {
          exact = detail::dequantized_dots(detail::lab_operand(qa), detail::lab_operand(qb), pairs);
        }
        SnrRow r;
        r.experiment = 6;
        r.sample = b;
        r.data = gemms[gi];
        r.length = k;
        r.format = recipe.bf16 ? "bf16" : std::string(quant::format_name(recipe.a_format)) + "x" +
                                             std::string(quant::format_name(recipe.b_format));
        r.scaling = recipe.a_scaling + "|" + recipe.b_scaling;
        r.rounding = "rne";
        r.accumulation = recipe.acc.name;
        r.promote_interval = recipe.acc.promote_interval;
        r.recipe = recipe.name;
        detail::score(r, ref, test, &exact);
        by_recipe[ri].push_back(std::move(r));
      }
    }
    for (auto& part : by_recipe) rows.insert(rows.end(), part.begin(), part.end());  // recipe, then sub-block
  }
  return rows;
}

}  // namespace fp8train::lab
