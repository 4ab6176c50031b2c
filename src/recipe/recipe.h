// Precision recipes: for every Linear GEMM (Fprop y = x·Wᵀ, Dgrad dx = dy·W, Wgrad dW = dyᵀ·x) and every
// activation cached for backward, which element format, scale granularity, scale policy, rounding and
// accumulation are used. A recipe is plain data (RecipeConfig); the model applies it: each Linear by its role
// (model/linear.h, linear_recipe() below), everything else kept for backward through model/activation_store.h.
//
// Recipes (names accepted by --recipe):
//   fp32            everything FP32 (the reference; OpenBLAS SGEMM)
//   bf16            BF16 activations and compute weights, FP32 accumulation and master weights
//   fp8-deepseek    DeepSeek-V3: E4M3 inputs for all three GEMMs, x and dy per 1×128 tile along the GEMM's K
//                   (so Wgrad re-tiles them 128×1 along tokens), W per 128×128 block, Hopper accumulation with
//                   promotion every 128 (bit-faithful CPU model), BF16 activations, FP8/E5M6 storage (below)
//   fp8-tensorwise  Transformer-Engine style: one scale per tensor from a delayed amax history (1024, max),
//                   E4M3 forward, E5M2 gradients, Hopper accumulation
//   int8-blockwise  symmetric INT8 with 1×128 / 128×128 scales, exact integer accumulation, stochastic
//                   rounding of activation gradients
//
// Spec strings: a recipe name, optionally followed by ":key=value" overrides, e.g.
//   fp8-deepseek:promote=never        fp8-deepseek:dgrad_block=on:pow2=on        fp8-deepseek:grad=e5m2
// Keys (see set_recipe_option): accum, promote, pow2, dgrad_block, grad, stochastic, amax_len, amax_algo,
// wgrad_x, attn_out_e5m6, swiglu_fp8, recompute_swiglu, dispatch_fp8, recompute_norm, recompute_mla_up, moments,
// seed.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "quant/quant.h"
#include "quant/ref_gemm.h"
#include "tensor/dtype.h"

namespace fp8train::recipe {

enum class RecipeKind : uint8_t { Fp32, Bf16, Fp8DeepSeek, Fp8Tensorwise, Int8Blockwise };

// The three GEMMs of a Linear layer.
enum class GemmKind : uint8_t { Fprop, Dgrad, Wgrad };
std::string_view gemm_kind_name(GemmKind k);  // "fprop", "dgrad", "wgrad"

// What a Linear layer is in the model, fixed at construction (never parsed from names). The recipe decides each
// role's numerics (linear_recipe below); roles that the DeepSeek-V3 recipe treats the same share a rule.
enum class LinearRole : uint8_t {
  AttnQDown,         // MLA W_DQ (wq_a)
  AttnQUp,           // MLA [W_UQ; W_QR] (wq_b)
  AttnKvDown,        // MLA [W_DKV; W_KR] (wkv_a)
  AttnKvUp,          // MLA [W_UK; W_UV] (wkv_b)
  AttnOut,           // MLA W_O (wo): its input is the attention output (E5M6 storage in fp8-deepseek)
  DenseUp,           // dense FFN W1|W3
  DenseDown,         // dense FFN W2
  SharedExpertUp,    // shared experts W1|W3
  SharedExpertDown,  // shared experts W2
  ExpertUp,          // routed experts W1|W3 (grouped): tokens arrive dispatched (FP8 in fp8-deepseek)
  ExpertDown,        // routed experts W2 (grouped): activation gradients arrive dispatched
  MtpProj,           // MTP module projection M_k (eh_proj)
};
std::string_view linear_role_name(LinearRole r);

// How a Linear keeps its input x for Wgrad (dW = dyᵀ·x).
enum class WgradInput : uint8_t {
  Plain,    // x itself, in the compute dtype (fp32 / bf16 recipes; Wgrad quantizes nothing)
  Colwise,  // the column-wise copy (128×1 tiles of x along tokens) written by the same quantizer call as Fprop's
            // row-wise operand, from the unrounded x — no dequantize / re-quantize
  Retile,   // Fprop's row-wise (1×128) operand, re-tiled into 128×1 tiles in backward (dequantize + quantize;
            // exact with power-of-two scales unless values fall below the subnormals, quant.h)
};
std::string_view wgrad_input_name(WgradInput w);
WgradInput parse_wgrad_input(std::string_view name);

struct RecipeConfig {
  RecipeKind kind = RecipeKind::Fp32;
  std::string spec = "fp32";  // the string this config was parsed from (canonical: name + overrides)

  // ---- GEMM numerics (fp8 / int8 recipes) ----
  quant::AccumMode accum = quant::AccumMode::Hopper;  // INT8 operands accumulate exactly in hopper/exact mode
  int promote_interval = 128;       // Hopper model: a multiple of 32, or num::kNeverPromote (0)
  bool pow2_scales = false;         // UE8M0 scales for activations, gradients and weights
  bool dgrad_block128 = false;      // quantize dy feeding Dgrad per 128×128 block (report App. B.2 ablation)
  quant::Format act_format = quant::Format::E4M3;   // x and W
  quant::Format grad_format = quant::Format::E4M3;  // dy
  bool stochastic_grads = false;    // INT8: stochastic rounding of dy
  int amax_history = 1024;          // fp8-tensorwise delayed scaling window
  quant::AmaxAlgorithm amax_algorithm = quant::AmaxAlgorithm::Max;
  uint64_t seed = 0;                // stochastic rounding streams

  // ---- activation storage (activations are kept in the compute dtype unless said otherwise) ----
  WgradInput wgrad_input = WgradInput::Plain;  // how a Linear keeps x for Wgrad (quantized recipes: not Plain)
  bool attn_out_e5m6 = false;     // W_O's input kept as E5M6 with power-of-two 1×128 scales (re-quantized into
                                  // its 128×1 FP8 tiles in backward)
  bool swiglu_fp8 = false;        // the MoE SwiGLU input (the experts' W1|W3 output) kept in FP8 E4M3 1×128
  bool recompute_swiglu = false;  // SwiGLU outputs recomputed in backward from the kept input, not kept
  bool moe_dispatch_fp8 = false;  // tokens dispatched to experts as FP8 with power-of-two 1×128 scales (and dy
                                  // before the down-projection in backward); combine stays in the compute dtype
  bool recompute_norm = false;    // RMSNorm outputs recomputed in backward instead of kept
  bool recompute_mla_up = false;  // MLA up-projections (q/k/v from the latent) recomputed, not kept

  // ---- optimizer ----
  std::string moment_dtype = "fp32";  // AdamW moments: "fp32" or "bf16" (train/config.h resolved_moment_dtype)
  bool moment_dtype_set = false;      // the spec gave ":moments=" (an explicit optim.moment_dtype must agree)

  bool quantized_gemms() const { return kind != RecipeKind::Fp32 && kind != RecipeKind::Bf16; }
  bool per_tensor() const { return kind == RecipeKind::Fp8Tensorwise; }
  bool int8() const { return kind == RecipeKind::Int8Blockwise; }
  // The model's precision policy: master weights and weight gradients FP32 (F64 in gradient-check models); the
  // compute dtype — activations, activation gradients and the per-step compute copies of the weights that the
  // GEMMs read — F32 for the fp32 recipe, BF16 for every other.
  DType compute_dtype() const { return kind == RecipeKind::Fp32 ? DType::F32 : DType::BF16; }
};

// The defaults of a named recipe (no overrides). Throws fp8train::Error naming the known recipes.
RecipeConfig make_recipe(std::string_view name);
// A spec string "name[:key=value]..." (see the top of this file). Throws naming the bad key or value.
RecipeConfig parse_recipe(std::string_view spec);
// Applies one override; throws fp8train::Error naming the key and the accepted values.
void set_recipe_option(RecipeConfig& config, std::string_view key, std::string_view value);
std::vector<std::string> recipe_names();  // fp32, bf16, fp8-deepseek, fp8-tensorwise, int8-blockwise
std::string_view recipe_kind_name(RecipeKind k);

// The quantization of each GEMM operand, as the executor applies it. `a` and `b` follow ref_gemm's
// D[M, N] = A[M, K]·B[N, K]ᵀ orientation:
//   Fprop: a = x [T, in] (1×128),  b = W [out, in] (128×128)
//   Dgrad: a = dy [T, out] (1×128, or 128×128 with dgrad_block128), b = Wᵀ [in, out] (128×128)
//   Wgrad: a = dyᵀ [out, T] (1×128 along tokens), b = xᵀ [in, T] (1×128 along tokens)
// Per-tensor recipes use Granularity::tensor() everywhere.
struct GemmOperands {
  quant::QuantSpec a, b;
  quant::GemmConfig gemm;
};
GemmOperands gemm_operands(const RecipeConfig& config, GemmKind kind);

// What a recipe does with one Linear role (see the enums above). `quantized` recipes run the three GEMMs through
// the scaled GEMM ops with the operands of gemm_operands(); the others through plain GEMMs in the compute dtype.
struct LinearRecipe {
  bool quantized = false;
  GemmOperands fprop, dgrad, wgrad;  // quantized only
  WgradInput wgrad_input = WgradInput::Plain;
  // A separate storage of x for Wgrad (W_O's input in E5M6): kept row-wise in this spec, dequantized and
  // re-quantized into 128×1 tiles in backward. Unset: wgrad_input decides.
  bool has_input_storage = false;
  quant::QuantSpec input_storage;
  bool dispatched_input = false;  // x arrives as the dispatched FP8 tensor (power-of-two 1×128): Fprop uses it as is
  bool dispatched_grad = false;   // dy is quantized as it would be dispatched (power-of-two 1×128) for Dgrad
};
LinearRecipe linear_recipe(const RecipeConfig& config, LinearRole role);

// The format of the MoE SwiGLU input when swiglu_fp8: E4M3, 1×128, the recipe's scale mode.
quant::QuantSpec swiglu_storage_spec(const RecipeConfig& config);

// A multi-line human description (one line per GEMM and per storage choice), for logs and reports.
std::string describe_recipe(const RecipeConfig& config);

}  // namespace fp8train::recipe
