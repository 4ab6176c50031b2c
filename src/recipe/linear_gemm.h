// The quantized Linear GEMM executor: runs a Linear layer's three GEMMs the way a recipe says.
//   forward:  y [T, out] = x [T, in] · W [out, in]ᵀ          (Fprop)
//   backward: dx [T, in] (+)= dy [T, out] · W                (Dgrad)
//             dW [out, in] (+)= dyᵀ · x                      (Wgrad; x as cached by forward)
// All tensors are f32 matrix views on the CPU (row stride may exceed the column count); dx and dW may
// accumulate (gradient accumulation stays FP32).
//
// fp32 / bf16 recipes go through ops::gemm (OpenBLAS; bf16 rounds the inputs to BF16 exactly). The fp8 and
// int8 recipes quantize each operand with quant::quantize (recipe.h gemm_operands) and multiply with
// quant::ref_gemm — in the Hopper mode that is the bit-faithful model of the H200's FP8 tensor cores
// (FP22 truncating chains, promotion to FP32 every N_C elements, scales applied at promotion):
//   Fprop: x 1×128 (along in) × W 128×128
//   Dgrad: dy 1×128 (along out; 128×128 with dgrad_block) × Wᵀ 128×128 (W's blocks transposed, exact)
//   Wgrad: dy 128×1 and x 128×1 (along tokens), each transposed to the 1×128 form ref_gemm takes; x comes
//          from the cache, re-tiled from its 1×128 forward quantization (exact with power-of-two scales)
// fp8-tensorwise keeps one AmaxHistory per operand (x, W, dy) of each Linear: delayed scaling, TE-style.
//
// RecipeContext is shared by all Linears of a model: the recipe, the training step (seeds the stochastic
// rounding streams), and the numerics-health counters, sampled only on steps the trainer asks for.
//
// GEMM accuracy (part of the health sample, every recipe, fp32 and bf16 included): on a sampled step each GEMM
// a Linear runs is also computed by the FP32 reference — ops::gemm (OpenBLAS SGEMM, FP32 inputs and FP32
// accumulation: exactly what the fp32 recipe runs) on the operands as this GEMM receives them, before any
// quantization or rounding it applies:
//   Fprop: x·Wᵀ with x and W as given        Dgrad: dy·W with dy and W as given (dy before MoE dispatch FP8)
//   Wgrad: dyᵀ·x with dy as given and x as backward hands it in (the float values of the activation cache
//          when the model cached x — the cache's own rounding of x is not in the Wgrad figure; Fprop's is the
//          same 1×128 quantization and shows there)
// For one call, with Y the recipe's product (before any accumulation into dx / dW) and R the reference:
//   error_sq = Σ (Y − R)²,  reference_sq = Σ R²   (double sums over every element)
// and the relative error of a (Linear, GEMM) over the calls of the sampled step is
//   rel_error = sqrt(Σ_calls error_sq / Σ_calls reference_sq) = ‖Y − R‖_F / ‖R‖_F,
// 0 exactly for the fp32 recipe (the same SGEMM on the same inputs). The Frobenius norm weighs each output row
// by its size, so damage confined to small rows (e.g. the tokens that share a 128×128 dy block with an outlier
// token, pushed into the FP8 subnormals) barely moves it; hence also, per output row r (Fprop / Dgrad: a token;
// Wgrad: an output feature) with ‖R_r‖ > 0,
//   row_rel_error = mean over the rows of the calls of ‖Y_r − R_r‖ / ‖R_r‖. The reference's own error (FP32
// accumulation, ~1e-7 relative) is far below what the low-precision recipes show (1e-3 and more), so it
// does not limit the figure. Cost: one SGEMM per recipe GEMM and two passes over its output, sampled steps only.
// train/metrics.h gemm_error_summary() aggregates the records per GEMM kind.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "recipe/cached_activation.h"
#include "recipe/recipe.h"
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
// Measures x [rows, cols] against its quantization q (same orientation and shape).
OperandHealth measure_health(const float* x, const quant::QTensor& q);

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
// Compares y [rows, cols] with y_ref [rows, cols] (both contiguous, row-major).
GemmAccuracy measure_accuracy(const float* y, const float* y_ref, int64_t rows, int64_t cols);

struct GemmHealth {
  std::string linear;
  GemmKind kind = GemmKind::Fprop;
  int64_t calls = 0;
  bool quantized = false;  // a and b hold operand counters (fp8 / int8 recipes; fp32 / bf16 record accuracy only)
  OperandHealth a, b;      // ref_gemm's operands (see recipe.h gemm_operands)
  GemmAccuracy accuracy;   // summed over the calls
};

class RecipeContext {
 public:
  explicit RecipeContext(RecipeConfig config) : config_(std::move(config)) {}
  const RecipeConfig& config() const { return config_; }

  // Called by the trainer before each step's forward: the step seeds stochastic rounding; health counters
  // are collected only when sample_health is true (they cost a pass over every operand).
  void begin_step(int64_t step, bool sample_health) {
    step_ = step;
    sample_health_ = sample_health;
  }
  int64_t step() const { return step_; }
  bool sampling_health() const { return sample_health_; }
  // The seed of one stochastic quantization: a function of the recipe seed, the step, the layer and the call
  // number within the step for that layer (deterministic whatever the thread schedule).
  uint64_t seed_for(uint64_t layer_hash, uint64_t call) const;

  // One call of a quantized GEMM: its operands' counters and its accuracy.
  void record(const std::string& linear, GemmKind kind, const OperandHealth& a, const OperandHealth& b,
              const GemmAccuracy& accuracy);
  // One call of an fp32 / bf16 GEMM (no quantized operands): its accuracy only.
  void record(const std::string& linear, GemmKind kind, const GemmAccuracy& accuracy);
  // The counters collected since the last call, sorted by linear name then GEMM kind; clears them.
  std::vector<GemmHealth> take_health();

 private:
  RecipeConfig config_;
  int64_t step_ = 0;
  bool sample_health_ = false;
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, GemmHealth> health_;
};

// Per-Linear options. A routed expert's up-projection (W1|W3) takes tokens dispatched in FP8 with
// power-of-two 1×128 scales, and its down-projection (W2) receives activation gradients dispatched the same way
// (RecipeConfig::moe_dispatch_fp8): with those flags the Fprop x (resp. the Dgrad dy) is quantized with
// power-of-two scales — the dispatched FP8 tensor itself, since both are per-token 1×128 tiles — and Wgrad sees
// the dequantized dispatched values.
struct LinearOptions {
  CacheRole input_role = CacheRole::LinearInput;
  bool dispatched_input = false;
  bool dispatched_grad = false;
};

class LinearGemm {
 public:
  // `name` identifies the layer in health counters ("layers.1.attn.wo").
  LinearGemm(RecipeContext& context, std::string name, LinearOptions options = {});
  LinearGemm(RecipeContext& context, std::string name, CacheRole input_role)
      : LinearGemm(context, std::move(name), LinearOptions{input_role, false, false}) {}

  const std::string& name() const { return name_; }
  const LinearOptions& options() const { return options_; }

  // y = x·Wᵀ. Returns x as the recipe caches it for Wgrad (undefined when cache_input is false: the caller
  // keeps x some other way and passes its values to wgrad).
  CachedActivation forward(const Tensor& x, const Tensor& w, const Tensor& y, bool cache_input = true);
  // dx (+)= dy·W.
  void dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate);
  // dW (+)= dyᵀ·x, x from the cache (its quantized form is re-tiled) or as plain values.
  void wgrad(const Tensor& dy, const CachedActivation& x, const Tensor& dw, bool accumulate);
  void wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw, bool accumulate);
  // Dgrad and Wgrad together; dx / dw may be undefined to skip that GEMM.
  void backward(const Tensor& dy, const Tensor& w, const CachedActivation& x, const Tensor& dx, const Tensor& dw,
                bool accumulate_dx = false, bool accumulate_dw = false);

  // Bytes of the low-precision weight operand the last forward made (what a GPU run keeps as the compute
  // copy of W: FP8 codes + scales, BF16 codes, or the FP32 weights themselves).
  size_t weight_operand_bytes() const { return weight_operand_bytes_; }

 private:
  // x as [tokens, in] values (xv) or a quantized cache (xc); exactly one is given.
  void wgrad_impl(const Tensor& dy, const float* xv, const CachedActivation* xc, int64_t in, const Tensor& dw,
                  bool accumulate);
  // fp8-tensorwise: dy quantized once per backward (one amax per step) and shared by Dgrad and Wgrad, which the
  // model calls one after the other with the same dy.
  const quant::QTensor& tensorwise_dy(const Tensor& dy, const float* dyh);
  // Values of dy as the GEMMs see them (the dispatched FP8 values for a dispatched gradient).
  RecipeContext* context_;
  std::string name_;
  LinearOptions options_;
  // fp8-tensorwise delayed scaling: one history per operand; the weight scale used by forward is reused by
  // Dgrad (TE casts the weight once per step).
  quant::AmaxHistory history_x_, history_w_, history_dy_;
  quant::BlockScale weight_scale_{1.0f, 1.0f};
  bool have_weight_scale_ = false;
  quant::QTensor dy_q_;
  const void* dy_ptr_ = nullptr;
  int dy_uses_left_ = 0;
  size_t weight_operand_bytes_ = 0;
  uint64_t name_hash_ = 0;
  int64_t seed_step_ = -1;   // step of the last stochastic quantization
  uint64_t seed_calls_ = 0;  // stochastic quantizations in that step
  uint64_t next_seed();
};

}  // namespace fp8train::recipe
