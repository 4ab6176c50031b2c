// The precision recipes (recipe/) plugged into the model's two hooks (model/hooks.h), without touching the
// layers: RecipeLinearCompute runs every Linear's Fprop / Dgrad / Wgrad through a recipe::LinearGemm per site,
// and RecipeActivationCache stores each cached tensor the way the recipe says, booked under
// MemCategory::ActivationCache (so the allocator's peak of that category is the measured activation memory).
//
// What fp8-deepseek does with each CacheKind (every choice is a recipe switch, recipe.h):
//   NormOutput      (R) recomputed from the kept norm input          recompute_norm
//   MlaUpProjection (R) recomputed from the kept latent               recompute_mla_up
//   AttentionOutput o: E5M6 with power-of-two 1×128 scales (input of W_O); lse stays FP32   attn_out_e5m6
//   SwigluInput     FP8 E4M3 1×128                                    swiglu_fp8
//   SwigluOutput    (R) recomputed from the FP8 SwiGLU input          swiglu_fp8
//   ExpertIO        the dispatched expert input: FP8 with power-of-two 1×128 scales; the expert outputs
//                   (combine) BF16                                     dispatch_fp8
//   LinearInput     FP8 E4M3 1×128                                    cache_linear
//   NormInput, AttentionInput (and kept NormOutput / up-projections): BF16; NormRstd, RouterState: as computed
// bf16 caches every float activation in BF16 (NormRstd, lse and router state excepted); fp32 keeps tensors
// as computed (the model's default cache).
// Routed experts ("<moe>.experts.<e>.w13" / ".w2") get recipe::LinearOptions dispatched_input / dispatched_grad.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

#include "model/hooks.h"
#include "recipe/linear_gemm.h"
#include "recipe/recipe.h"

namespace fp8train::model {

class DeepSeekV3Model;

class RecipeLinearCompute : public LinearCompute {
 public:
  explicit RecipeLinearCompute(std::shared_ptr<recipe::RecipeContext> context);
  std::string name() const override { return context_->config().spec; }
  void fprop(const LinearSite& site, const Tensor& x, const Tensor& w, const Tensor& y) override;
  void dgrad(const LinearSite& site, const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) override;
  void wgrad(const LinearSite& site, const Tensor& dy, const Tensor& x, const Tensor& dw) override;

  recipe::RecipeContext& context() { return *context_; }
  // Whether a storage was the input of a routed expert's up-projection (the dispatched tokens) since the last
  // call for it; the cache asks, to store the dispatched rows in FP8.
  // Storages are held weakly: one freed unsaved (an eval forward) can never match a later allocation.
  bool take_dispatched(const std::shared_ptr<Storage>& storage);
  // Σ over Linears of the low-precision weight operand bytes of their last forward.
  int64_t weight_operand_bytes() const;

 private:
  recipe::LinearGemm& gemm_for(const LinearSite& site);
  std::shared_ptr<recipe::RecipeContext> context_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<recipe::LinearGemm>> gemms_;
  std::vector<std::weak_ptr<Storage>> dispatched_;
};

class RecipeActivationCache : public ActivationCache {
 public:
  RecipeActivationCache(std::shared_ptr<recipe::RecipeContext> context, std::shared_ptr<RecipeLinearCompute> linear);
  bool keeps(const CacheSite& site) const override;
  SavedTensor save(const Tensor& t, const CacheSite& site) override;
  Tensor load(const SavedTensor& saved) const override;
  // The format a tensor of this kind is kept in (Fp32 = as computed); `dispatched` for the expert input rows.
  recipe::CacheFormat format_for(CacheKind kind, const Tensor& t, bool dispatched) const;

 private:
  std::shared_ptr<recipe::RecipeContext> context_;
  std::shared_ptr<RecipeLinearCompute> linear_;
};

// The recipe's hooks, installed on a model.
struct RecipeHooks {
  std::shared_ptr<recipe::RecipeContext> context;
  std::shared_ptr<RecipeLinearCompute> linear;
  std::shared_ptr<RecipeActivationCache> cache;
};
RecipeHooks install_recipe(DeepSeekV3Model& model, const recipe::RecipeConfig& config);

}  // namespace fp8train::model
