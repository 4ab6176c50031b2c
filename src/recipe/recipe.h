// Precision recipes: for every Linear GEMM (Fprop y = x·Wᵀ, Dgrad dx = dy·W, Wgrad dW = dyᵀ·x) and every
// activation cached for backward, which element format, scale granularity, scale policy, rounding and
// accumulation are used. A recipe is plain data (RecipeConfig); the executors that apply it live in
// recipe/linear_gemm.h (GEMMs) and recipe/cached_activation.h (storage).
//
// Recipes (names accepted by --recipe):
//   fp32            everything FP32 (the reference; OpenBLAS SGEMM)
//   bf16            GEMM inputs rounded to BF16, FP32 accumulation; activations cached in BF16
//   fp8-deepseek    DeepSeek-V3: E4M3 inputs for all three GEMMs, x and dy per 1×128 tile along the GEMM's K
//                   (so Wgrad re-tiles them 128×1 along tokens), W per 128×128 block, Hopper accumulation with
//                   promotion every 128 (bit-faithful CPU model), FP8/E5M6 activation storage (below)
//   fp8-tensorwise  Transformer-Engine style: one scale per tensor from a delayed amax history (1024, max),
//                   E4M3 forward, E5M2 gradients, Hopper accumulation
//   int8-blockwise  symmetric INT8 with 1×128 / 128×128 scales, exact integer accumulation, stochastic
//                   rounding of activation gradients
//
// Spec strings: a recipe name, optionally followed by ":key=value" overrides, e.g.
//   fp8-deepseek:promote=never        fp8-deepseek:dgrad_block=on:pow2=on        fp8-deepseek:grad=e5m2
// Keys (see set_recipe_option): accum, promote, pow2, dgrad_block, grad, stochastic, amax_len, amax_algo,
// cache_linear, attn_out_e5m6, swiglu_fp8, dispatch_fp8, recompute_norm, recompute_mla_up, moments, seed.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "quant/quant.h"
#include "quant/ref_gemm.h"

namespace fp8train::recipe {

enum class RecipeKind : uint8_t { Fp32, Bf16, Fp8DeepSeek, Fp8Tensorwise, Int8Blockwise };

// The three GEMMs of a Linear layer.
enum class GemmKind : uint8_t { Fprop, Dgrad, Wgrad };
std::string_view gemm_kind_name(GemmKind k);  // "fprop", "dgrad", "wgrad"

// How a tensor cached between forward and backward is stored.
enum class CacheFormat : uint8_t {
  Fp32,       // float32 as computed
  Bf16,       // BF16 codes (round to nearest even)
  Fp8,        // E4M3 codes + FP32 scales per 1×128 tile
  Fp8Pow2,    // E4M3 codes + power-of-two (UE8M0) scales per 1×128 tile
  E5M6Pow2,   // E5M6 codes (12 bits, packed) + power-of-two scales per 1×128 tile
  Int8,       // INT8 codes + FP32 scales per 1×128 tile
  Fp8Tensor,  // E4M3 codes + one scale for the tensor (delayed scaling is not used for storage: online amax)
};
std::string_view cache_format_name(CacheFormat f);
CacheFormat parse_cache_format(std::string_view name);

// What the model caches for backward, by role. The model names the role; the recipe picks the format.
enum class CacheRole : uint8_t {
  LinearInput,      // the input x of a Linear (Wgrad needs it)
  AttnOutProjInput, // the input of the Linear after attention (concat of the heads' outputs)
  SwigluInput,      // the [tokens, 2F] input of SwiGLU in a (shared or routed) expert
  Other,            // anything else a layer keeps (norm inputs, attention q/k/v, ...)
};
std::string_view cache_role_name(CacheRole r);

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

  // ---- activation storage ----
  CacheFormat cache_linear_input = CacheFormat::Fp32;
  bool attn_out_e5m6 = false;       // AttnOutProjInput cached as E5M6 with power-of-two scales
  bool swiglu_fp8 = false;          // SwiGLU input cached in FP8; the SwiGLU output is recomputed in backward
  bool moe_dispatch_fp8 = false;    // tokens dispatched to experts as FP8 with power-of-two scales (and dy
                                    // before the down-projection in backward); combine stays BF16
  bool recompute_norm = false;      // RMSNorm outputs recomputed in backward instead of cached
  bool recompute_mla_up = false;    // MLA up-projections (q/k/v from the latent) recomputed, not cached

  // ---- optimizer ----
  std::string moment_dtype = "fp32";  // AdamW moments: "fp32" or "bf16" (train/config.h resolved_moment_dtype)
  bool moment_dtype_set = false;      // the spec gave ":moments=" (an explicit optim.moment_dtype must agree)

  bool quantized_gemms() const { return kind != RecipeKind::Fp32 && kind != RecipeKind::Bf16; }
  bool per_tensor() const { return kind == RecipeKind::Fp8Tensorwise; }
  bool int8() const { return kind == RecipeKind::Int8Blockwise; }
  // The cache format used for a role under this recipe.
  CacheFormat cache_format(CacheRole role) const;
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
  quant::QuantConfig a, b;
  quant::GemmConfig gemm;
};
GemmOperands gemm_operands(const RecipeConfig& config, GemmKind kind);

// A multi-line human description (one line per GEMM and per storage choice), for logs and reports.
std::string describe_recipe(const RecipeConfig& config);

}  // namespace fp8train::recipe
