// Default LinearCompute (GEMMs through ops::gemm) and ActivationCache (keep the tensor, book its bytes).
#include "model/hooks.h"

#include "ops/gemm.h"

namespace fp8train::model {

std::string_view cache_kind_name(CacheKind kind) {
  switch (kind) {
    case CacheKind::NormInput: return "norm_input";
    case CacheKind::NormRstd: return "norm_rstd";
    case CacheKind::NormOutput: return "norm_output";
    case CacheKind::MlaUpProjection: return "mla_up_projection";
    case CacheKind::AttentionInput: return "attention_input";
    case CacheKind::AttentionOutput: return "attention_output";
    case CacheKind::LinearInput: return "linear_input";
    case CacheKind::SwigluInput: return "swiglu_input";
    case CacheKind::SwigluOutput: return "swiglu_output";
    case CacheKind::RouterState: return "router_state";
    case CacheKind::ExpertIO: return "expert_io";
  }
  return "?";
}

bool is_recomputable(CacheKind kind) {
  return kind == CacheKind::NormOutput || kind == CacheKind::MlaUpProjection || kind == CacheKind::SwigluOutput;
}

bool ActivationCache::keeps(const CacheSite&) const { return true; }

SavedTensor ActivationCache::save(const Tensor& t, const CacheSite& site) {
  FP8T_CHECK(t.defined(), "activation cache: {} at {} is undefined", cache_kind_name(site.kind), site.layer);
  t.storage().set_category(MemCategory::ActivationCache);
  SavedTensor s;
  s.value = t;
  s.kind = site.kind;
  s.kept = true;
  return s;
}

Tensor ActivationCache::load(const SavedTensor& saved) const { return saved.kept ? saved.value : Tensor(); }

SavedTensor ActivationCache::maybe_save(const Tensor& t, const CacheSite& site) {
  if (is_recomputable(site.kind) && !keeps(site)) {
    SavedTensor s;
    s.kind = site.kind;
    return s;
  }
  return save(t, site);
}

void GemmLinearCompute::fprop(const LinearSite&, const Tensor& x, const Tensor& w, const Tensor& y) {
  ops::gemm(x, false, w, true, y, {.alpha = 1.0, .beta = 0.0, .round_inputs_bf16 = bf16_});
}

void GemmLinearCompute::dgrad(const LinearSite&, const Tensor& dy, const Tensor& w, const Tensor& dx,
                              bool accumulate) {
  ops::gemm(dy, false, w, false, dx, {.alpha = 1.0, .beta = accumulate ? 1.0 : 0.0, .round_inputs_bf16 = bf16_});
}

void GemmLinearCompute::wgrad(const LinearSite&, const Tensor& dy, const Tensor& x, const Tensor& dw) {
  ops::gemm(dy, true, x, false, dw, {.alpha = 1.0, .beta = 1.0, .round_inputs_bf16 = bf16_});
}

std::shared_ptr<LinearCompute> make_fp32_linear_compute() { return std::make_shared<GemmLinearCompute>(false); }
std::shared_ptr<LinearCompute> make_bf16_linear_compute() { return std::make_shared<GemmLinearCompute>(true); }

}  // namespace fp8train::model
