// ActivationStore (see activation_store.h).
#include "model/activation_store.h"

#include "common/error.h"
#include "ops/quantize.h"

namespace fp8train::model {

std::string_view cache_kind_name(CacheKind kind) {
  switch (kind) {
    case CacheKind::NormInput:
      return "norm_input";
    case CacheKind::NormRstd:
      return "norm_rstd";
    case CacheKind::NormOutput:
      return "norm_output";
    case CacheKind::MlaUpProjection:
      return "mla_up_projection";
    case CacheKind::AttentionInput:
      return "attention_input";
    case CacheKind::AttentionOutput:
      return "attention_output";
    case CacheKind::SwigluInput:
      return "swiglu_input";
    case CacheKind::SwigluOutput:
      return "swiglu_output";
    case CacheKind::RouterState:
      return "router_state";
    case CacheKind::ExpertIO:
      return "expert_io";
  }
  return "?";
}

bool is_recomputable(CacheKind kind) {
  return kind == CacheKind::NormOutput || kind == CacheKind::MlaUpProjection || kind == CacheKind::SwigluOutput;
}

bool ActivationStore::keeps(CacheKind kind) const {
  switch (kind) {
    case CacheKind::NormOutput:
      return !recipe_->recompute_norm;
    case CacheKind::MlaUpProjection:
      return !recipe_->recompute_mla_up;
    case CacheKind::SwigluOutput:
      return !recipe_->recompute_swiglu;
    default:
      return true;
  }
}

std::optional<std::pair<quant::QuantSpec, quant::ScaleLayout>> ActivationStore::quantized_form(const ExecCtx& ctx,
                                                                                               CacheKind kind) const {
  if (kind != CacheKind::SwigluInput || !recipe_->swiglu_fp8) return std::nullopt;
  return std::pair{recipe::swiglu_storage_spec(*recipe_),
                   ctx.device.is_cpu() ? quant::ScaleLayout::RowMajor : quant::ScaleLayout::GemmNative};
}

SavedTensor ActivationStore::save_quantized(const quant::QTensor& q, DType dtype, CacheKind kind) const {
  FP8T_CHECK(q.rowwise.defined() && quantized_form(ExecCtx::on(q.device()), kind).has_value(),
             "activation store: {} is not kept quantized by this recipe", cache_kind_name(kind));
  SavedTensor s;
  s.kind = kind;
  s.kept = true;
  s.dtype = dtype;
  s.q = q.rowwise_only();
  s.q.set_category(MemCategory::ActivationCache);
  return s;
}

SavedTensor ActivationStore::save(const ExecCtx& ctx, const Tensor& t, CacheKind kind) const {
  FP8T_CHECK(t.defined(), "activation store: the {} to keep is undefined", cache_kind_name(kind));
  SavedTensor s;
  s.kind = kind;
  s.kept = true;
  s.dtype = t.dtype();
  if (const auto form = quantized_form(ctx, kind); form && t.dim() == 2 && t.dtype() != DType::F64) {
    s.q = ops::quantize(ctx, t, form->first, ops::QuantizeOutputs::Rowwise, form->second, /*groups=*/1,
                        MemCategory::ActivationCache);
    return s;
  }
  t.storage().set_category(MemCategory::ActivationCache);
  s.value = t;
  return s;
}

SavedTensor ActivationStore::maybe_save(const ExecCtx& ctx, const Tensor& t, CacheKind kind) const {
  if (is_recomputable(kind) && !keeps(kind)) {
    SavedTensor s;
    s.kind = kind;
    return s;
  }
  return save(ctx, t, kind);
}

Tensor ActivationStore::load(const ExecCtx& ctx, const SavedTensor& saved) const {
  if (!saved.kept) return Tensor();
  if (saved.q.defined()) return ops::dequantize(ctx, saved.q, saved.dtype);
  return saved.value;
}

}  // namespace fp8train::model
