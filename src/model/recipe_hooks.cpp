// RecipeLinearCompute / RecipeActivationCache (recipe_hooks.h): the recipe layer behind the model's hooks.
#include "model/recipe_hooks.h"

#include <algorithm>

#include "common/error.h"
#include "model/model.h"

namespace fp8train::model {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
// "<moe>.experts.<e>.w13": a routed expert (not "<moe>.shared_experts.w13").
bool routed_expert(const std::string& name) { return name.find(".experts.") != std::string::npos; }

// What the recipe cache keeps for a save(): the stored form and the tensor's shape (3-D tensors are stored as
// [rows, last dim] matrices).
struct RecipeSaved {
  recipe::CachedActivation cached;
  Shape shape;
};
}  // namespace

// ---- LinearCompute -------------------------------------------------------------------------------------------
RecipeLinearCompute::RecipeLinearCompute(std::shared_ptr<recipe::RecipeContext> context)
    : context_(std::move(context)) {
  FP8T_CHECK(context_ != nullptr, "RecipeLinearCompute: null recipe context");
}

recipe::LinearGemm& RecipeLinearCompute::gemm_for(const LinearSite& site) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = gemms_.find(site.name);
  if (it == gemms_.end()) {
    recipe::LinearOptions o;
    o.input_role = ends_with(site.name, ".wo") ? recipe::CacheRole::AttnOutProjInput : recipe::CacheRole::LinearInput;
    o.dispatched_input = routed_expert(site.name) && ends_with(site.name, ".w13");
    o.dispatched_grad = routed_expert(site.name) && ends_with(site.name, ".w2");
    it = gemms_.emplace(site.name, std::make_unique<recipe::LinearGemm>(*context_, site.name, o)).first;
  }
  return *it->second;
}

void RecipeLinearCompute::fprop(const LinearSite& site, const Tensor& x, const Tensor& w, const Tensor& y) {
  recipe::LinearGemm& g = gemm_for(site);
  if (g.options().dispatched_input) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(dispatched_, [](const std::weak_ptr<Storage>& w) { return w.expired(); });
    const Storage* target = x.storage_ptr().get();
    if (std::none_of(dispatched_.begin(), dispatched_.end(),
                     [&](const std::weak_ptr<Storage>& w) { return w.lock().get() == target; }))
      dispatched_.push_back(x.storage_ptr());
  }
  g.forward(x, w, y, /*cache_input=*/false);
}

void RecipeLinearCompute::dgrad(const LinearSite& site, const Tensor& dy, const Tensor& w, const Tensor& dx,
                                bool accumulate) {
  gemm_for(site).dgrad(dy, w, dx, accumulate);
}

void RecipeLinearCompute::wgrad(const LinearSite& site, const Tensor& dy, const Tensor& x, const Tensor& dw) {
  gemm_for(site).wgrad(dy, x, dw, /*accumulate=*/true);  // the hook's contract: dW += dyᵀ·x
}

bool RecipeLinearCompute::take_dispatched(const std::shared_ptr<Storage>& storage) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = std::find_if(dispatched_.begin(), dispatched_.end(),
                               [&](const std::weak_ptr<Storage>& w) { return w.lock() == storage; });
  if (it == dispatched_.end()) return false;
  dispatched_.erase(it);
  return true;
}

int64_t RecipeLinearCompute::weight_operand_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (const auto& [name, g] : gemms_) total += static_cast<int64_t>(g->weight_operand_bytes());
  return total;
}

// ---- ActivationCache -------------------------------------------------------------------------------------------
RecipeActivationCache::RecipeActivationCache(std::shared_ptr<recipe::RecipeContext> context,
                                             std::shared_ptr<RecipeLinearCompute> linear)
    : context_(std::move(context)), linear_(std::move(linear)) {
  FP8T_CHECK(context_ != nullptr && linear_ != nullptr, "RecipeActivationCache: null context or linear compute");
}

bool RecipeActivationCache::keeps(const CacheSite& site) const {
  const recipe::RecipeConfig& c = context_->config();
  switch (site.kind) {
    case CacheKind::NormOutput: return !c.recompute_norm;
    case CacheKind::MlaUpProjection: return !c.recompute_mla_up;
    case CacheKind::SwigluOutput: return !c.swiglu_fp8;
    default: return true;
  }
}

recipe::CacheFormat RecipeActivationCache::format_for(CacheKind kind, const Tensor& t, bool dispatched) const {
  using recipe::CacheFormat;
  using recipe::CacheRole;
  const recipe::RecipeConfig& c = context_->config();
  if (c.kind == recipe::RecipeKind::Fp32 || t.dtype() != DType::F32 || t.dim() < 2) return CacheFormat::Fp32;
  switch (kind) {
    case CacheKind::NormRstd:
    case CacheKind::RouterState: return CacheFormat::Fp32;
    case CacheKind::AttentionOutput:  // o [tokens, heads·v_dim] (W_O's input); lse [batch, heads, seq] stays
      return t.dim() == 2 ? c.cache_format(CacheRole::AttnOutProjInput) : CacheFormat::Fp32;
    case CacheKind::NormOutput:
    case CacheKind::LinearInput:
    case CacheKind::SwigluOutput: return c.cache_format(CacheRole::LinearInput);
    case CacheKind::SwigluInput: return c.cache_format(CacheRole::SwigluInput);
    case CacheKind::ExpertIO:
      if (!dispatched) return c.cache_format(CacheRole::Other);  // expert outputs: the BF16 combine
      return c.moe_dispatch_fp8 ? CacheFormat::Fp8Pow2 : c.cache_format(CacheRole::LinearInput);
    case CacheKind::NormInput:
    case CacheKind::MlaUpProjection:
    case CacheKind::AttentionInput: return c.cache_format(CacheRole::Other);
  }
  return CacheFormat::Fp32;
}

SavedTensor RecipeActivationCache::save(const Tensor& t, const CacheSite& site) {
  FP8T_CHECK(t.defined(), "activation cache: {} at {} is undefined", cache_kind_name(site.kind), site.layer);
  const bool dispatched = site.kind == CacheKind::ExpertIO && linear_->take_dispatched(t.storage_ptr());
  const recipe::CacheFormat format = format_for(site.kind, t, dispatched);
  if (format == recipe::CacheFormat::Fp32) return ActivationCache::save(t, site);
  Tensor m = t;
  if (t.dim() != 2) {
    const Tensor c = t.is_contiguous() ? t : t.clone();
    m = c.view({-1, t.size(-1)});
  }
  SavedTensor s;
  s.kind = site.kind;
  s.kept = true;
  s.state = std::make_shared<RecipeSaved>(RecipeSaved{recipe::CachedActivation::store(m, format), t.shape()});
  return s;
}

Tensor RecipeActivationCache::load(const SavedTensor& saved) const {
  if (const auto* p = std::any_cast<std::shared_ptr<RecipeSaved>>(&saved.state)) {
    const RecipeSaved& r = **p;
    return r.cached.to_tensor().view(r.shape);
  }
  return ActivationCache::load(saved);
}

RecipeHooks install_recipe(DeepSeekV3Model& model, const recipe::RecipeConfig& config) {
  RecipeHooks h;
  h.context = std::make_shared<recipe::RecipeContext>(config);
  h.linear = std::make_shared<RecipeLinearCompute>(h.context);
  h.cache = std::make_shared<RecipeActivationCache>(h.context, h.linear);
  model.set_linear_compute(h.linear);
  model.set_activation_cache(h.cache);
  return h;
}

}  // namespace fp8train::model
