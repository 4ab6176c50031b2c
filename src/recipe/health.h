// Numerics health of a recipe's GEMMs, observed on sampled steps only: what quantizing each operand did to it,
// and each GEMM's error against the same GEMM in FP32 on the operands before quantization. The model's Linears
// report to a HealthRecorder when the step context carries one (model/layers.h StepContext::health); on other
// steps nothing here runs.
//
// GEMM accuracy (every recipe, fp32 and bf16 included): on a sampled step each GEMM a Linear runs is also
// computed by the FP32 reference — ops::gemm in FP32 (FP32 inputs, FP32 accumulation: exactly what the fp32
// recipe runs) on the operands as this GEMM receives them, before any quantization or rounding it applies:
//   Fprop: x·Wᵀ with x as the Linear receives it and W the FP32 master weight
//   Dgrad: dy·W with dy as received (before the MoE dispatch's FP8 for a routed expert's down-projection)
//   Wgrad: dyᵀ·x with dy as received and x as backward holds it (the dequantized column-wise copy when the recipe
//          keeps x in FP8 — so the Wgrad figure carries dy's quantization, and Fprop's figure x's)
// For one call, with Y the recipe's product (before any accumulation into dx / dW) and R the reference:
//   error_sq = Σ (Y − R)²,  reference_sq = Σ R²   (double sums over every element)
// and the relative error of a (Linear, GEMM) over the calls of the sampled step is
//   rel_error = sqrt(Σ_calls error_sq / Σ_calls reference_sq) = ‖Y − R‖_F / ‖R‖_F,
// 0 exactly for the fp32 recipe (the same SGEMM on the same inputs). The Frobenius norm weighs each output row
// by its size, so damage confined to small rows (e.g. the tokens that share a 128×128 dy block with an outlier
// token, pushed into the FP8 subnormals) barely moves it; hence also, per output row r (Fprop / Dgrad: a token;
// Wgrad: an output feature) with ‖R_r‖ > 0,
//   row_rel_error = mean over the rows of the calls of ‖Y_r − R_r‖ / ‖R_r‖.
// The reference's own error (FP32 accumulation, ~1e-7 relative) is far below what the low-precision recipes
// show (1e-3 and more), so it does not limit the figure. train/metrics.h gemm_error_summary() aggregates the
// records per GEMM kind.
//
// Where the sample is computed: on the tensors' device, through two ops (ops/health_stats.h) — the per-row sums
// Σ(Y − R)², ΣR² (FP64, [rows, 2]) and each quantized operand's counts and scale range. Only those cross to the
// host (16 bytes per product row, 20 bytes per operand), where the rows' sums are added in row order. On the CPU the
// ops are the arithmetic this file has always run on the host, bit for bit. On a GPU the counts and the scale range
// equal the CPU's exactly and the row sums agree to the last bits (another summation order). The reductions read
// each tensor once at device bandwidth (milliseconds for an expert GEMM of ~10^8 values), so a sampled step costs
// mostly its FP32 reference GEMMs: ~0.3–0.4 s at the loss-parity study's size, where copying the tensors to the
// host cost ~70 s. (A payload dimension of 2^31 or more, which the CUDA counts do not take, is counted on the host.)
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "quant/qtensor.h"
#include "recipe/recipe.h"
#include "tensor/exec_ctx.h"
#include "tensor/tensor.h"

namespace fp8train::recipe {

// What quantizing one operand did to it. saturated: |x| / scale beyond fmax + ulp/2 (clamped to ±fmax; only
// delayed or stale scales can do this); underflow: x != 0 but its code decodes to zero.
struct OperandHealth {
  int64_t elements = 0;
  int64_t nonzero = 0;
  int64_t saturated = 0;
  int64_t underflow = 0;
  float scale_min = std::numeric_limits<float>::infinity();
  float scale_max = 0.0f;
  void merge(const OperandHealth& o);
};
// Measures x [rows, cols] (F32, BF16 or F64, as FP32 values) against its quantization q's row-wise payload (same
// orientation and shape; with `transposed`, q quantizes xᵀ: [cols, rows]), on q's device through ctx (or that
// device's own context when ctx is elsewhere). Waits for ctx's stream.
OperandHealth measure_health(const ExecCtx& ctx, const Tensor& x, const quant::QTensor& q, bool transposed = false);
// The same on the default context of q's device.
OperandHealth measure_health(const Tensor& x, const quant::QTensor& q, bool transposed = false);

// A recipe GEMM's product against its FP32 reference (see the top of this file).
struct GemmAccuracy {
  double error_sq = 0;      // Σ (Y − R)²
  double reference_sq = 0;  // Σ R²
  double row_rel_sum = 0;   // Σ over rows with R_r ≠ 0 of ‖Y_r − R_r‖ / ‖R_r‖
  int64_t rows = 0;         // the rows counted in row_rel_sum
  void merge(const GemmAccuracy& o) {
    error_sq += o.error_sq;
    reference_sq += o.reference_sq;
    row_rel_sum += o.row_rel_sum;
    rows += o.rows;
  }
  // ‖Y − R‖_F / ‖R‖_F (0 when both are zero; +inf when only the reference is).
  double relative_error() const;
  // The mean row-wise relative error (0 when no row has a non-zero reference).
  double row_relative_error() const { return rows > 0 ? row_rel_sum / static_cast<double>(rows) : 0.0; }
};
// Compares y [rows, cols] with y_ref [rows, cols] (both contiguous, row-major, on the host).
GemmAccuracy measure_accuracy(const float* y, const float* y_ref, int64_t rows, int64_t cols);
// The same on two [rows, cols] matrices (F32, BF16 or F64, each its own) on y's device, through ctx (or that
// device's own context when ctx is elsewhere). Waits for ctx's stream.
GemmAccuracy measure_accuracy(const ExecCtx& ctx, const Tensor& y, const Tensor& y_ref);
// The same on the default context of y's device.
GemmAccuracy measure_accuracy(const Tensor& y, const Tensor& y_ref);

struct GemmHealth {
  std::string linear;
  GemmKind kind = GemmKind::Fprop;
  int64_t calls = 0;
  bool quantized = false;  // a and b hold operand counters (fp8 / int8 recipes; fp32 / bf16 record accuracy only)
  OperandHealth a, b;      // the scaled GEMM's operands (recipe.h gemm_operands' orientation)
  GemmAccuracy accuracy;   // summed over the calls
};

// Collects the records of a sampled step (thread-safe).
class HealthRecorder {
 public:
  // One call of a quantized GEMM: its operands' counters and its accuracy.
  void record(const std::string& linear, GemmKind kind, const OperandHealth& a, const OperandHealth& b,
              const GemmAccuracy& accuracy);
  // One call of an fp32 / bf16 GEMM (no quantized operands): its accuracy only.
  void record(const std::string& linear, GemmKind kind, const GemmAccuracy& accuracy);
  // The records since the last call, sorted by linear name then GEMM kind; clears them.
  std::vector<GemmHealth> take();

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, GemmHealth> health_;
};

}  // namespace fp8train::recipe
