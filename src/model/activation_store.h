// ActivationStore: everything a layer keeps from forward for backward, other than a Linear's own input (which
// the Linear keeps in the recipe's form, model/linear.h), goes through save()/load() here, tagged with a
// CacheKind. Activations are kept in the compute dtype as they are (BF16 in the quantized recipes), and booked
// under MemCategory::ActivationCache, so the allocator's peak of that category is the measured peak of kept
// activation bytes. The recipe decides two things (recipe/recipe.h):
//   - which recomputable kinds are not kept (keeps() == false): the layer then recomputes them in backward from
//     what it did keep (recompute_norm, recompute_mla_up, recompute_swiglu);
//   - the MoE SwiGLU input is kept in FP8 (swiglu_fp8: E4M3 1×128), dequantized by load().
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "quant/qtensor.h"
#include "recipe/recipe.h"
#include "tensor/exec_ctx.h"

namespace fp8train::model {

// What a kept tensor is. (R) marks kinds a layer can recompute when the store does not keep them.
enum class CacheKind : uint8_t {
  NormInput,        // input of an RMSNorm (residual stream, MLA latent before its norm), needed by its backward
  NormRstd,         // the per-row 1/rms of an RMSNorm
  NormOutput,       // (R) output of an RMSNorm, the input of the Linear(s) after it
  MlaUpProjection,  // (R) MLA up-projected q (after RoPE) and k|v (W_UQ/W_QR and W_UK/W_UV outputs)
  AttentionInput,   // attention-core inputs that cannot be recomputed from kept tensors (MLA's shared k^R)
  AttentionOutput,  // the attention core's output o and its log-sum-exp lse (the attention backward reads both)
  SwigluInput,      // the fused gate|up [rows, 2F] (FP8 in the FP8 recipe's MoE)
  SwigluOutput,     // (R) silu(gate)∘up, the input of W2
  RouterState,      // scores, selection, gates and the dispatch plan (high precision, never quantized)
  ExpertIO,         // MoE expert outputs (the combine's inputs, for the gate gradients)
};
std::string_view cache_kind_name(CacheKind kind);
bool is_recomputable(CacheKind kind);

// What save() returned: the tensor itself (`value`) or its quantized form (`q`, restored to `dtype` by load()).
struct SavedTensor {
  Tensor value;
  quant::QTensor q;
  DType dtype = DType::F32;
  CacheKind kind = CacheKind::NormInput;
  bool kept = false;  // false: nothing was kept (a recomputable kind the store declined)
};

class ActivationStore {
 public:
  explicit ActivationStore(const recipe::RecipeConfig& recipe) : recipe_(&recipe) {}
  // Whether a recomputable kind is kept; layers recompute what is not.
  bool keeps(CacheKind kind) const;
  SavedTensor save(const ExecCtx& ctx, const Tensor& t, CacheKind kind) const;
  // keeps() for recomputable kinds, then save().
  SavedTensor maybe_save(const ExecCtx& ctx, const Tensor& t, CacheKind kind) const;
  // The kept tensor (undefined when nothing was kept).
  Tensor load(const ExecCtx& ctx, const SavedTensor& saved) const;
  // The spec and scale layout save() quantizes `kind` in on ctx's device, or nullopt when it keeps it as it is.
  std::optional<std::pair<quant::QuantSpec, quant::ScaleLayout>> quantized_form(const ExecCtx& ctx,
                                                                                CacheKind kind) const;
  // save() for a tensor its producer already quantized in quantized_form (payloads booked as ActivationCache);
  // `dtype` is the one load() restores.
  SavedTensor save_quantized(const quant::QTensor& q, DType dtype, CacheKind kind) const;

 private:
  const recipe::RecipeConfig* recipe_;
};

}  // namespace fp8train::model
