// Default LinearCompute (GEMMs through ops::gemm) and ActivationCache (keep the tensor, book its bytes).
#include "model/hooks.h"

#include <algorithm>
#include <exception>

#include <omp.h>

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
  ops::gemm(ExecCtx::on(x.device()), x, false, w, true, y, {.alpha = 1.0, .beta = 0.0, .round_inputs_bf16 = bf16_});
}

void GemmLinearCompute::dgrad(const LinearSite&, const Tensor& dy, const Tensor& w, const Tensor& dx,
                              bool accumulate) {
  ops::gemm(ExecCtx::on(dy.device()), dy, false, w, false, dx,
            {.alpha = 1.0, .beta = accumulate ? 1.0 : 0.0, .round_inputs_bf16 = bf16_});
}

void GemmLinearCompute::wgrad(const LinearSite&, const Tensor& dy, const Tensor& x, const Tensor& dw) {
  ops::gemm(ExecCtx::on(dy.device()), dy, true, x, false, dw, {.alpha = 1.0, .beta = 1.0, .round_inputs_bf16 = bf16_});
}

void LinearCompute::grouped_fprop(const std::vector<LinearGroupItem>& items) {
  for (const LinearGroupItem& it : items) fprop(*it.site, it.x, it.w, it.y);
}

void LinearCompute::grouped_backward(const std::vector<LinearGroupItem>& items) {
  for (const LinearGroupItem& it : items) {
    wgrad(*it.site, it.dy, it.x, it.dw);
    dgrad(*it.site, it.dy, it.w, it.dx, false);
  }
}

namespace {
// Item indices, largest row count first (a longest-processing-time order for the dynamic schedule).
std::vector<size_t> largest_first(const std::vector<LinearGroupItem>& items) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].x.size(0) > items[b].x.size(0); });
  return order;
}

// Runs body(item) for every item across the OpenMP threads; an exception (bad input) is carried out of the
// parallel region and rethrown on the calling thread.
template <class Body>
void for_each_item(const std::vector<LinearGroupItem>& items, Body&& body) {
  const std::vector<size_t> order = largest_first(items);
  const int64_t n = static_cast<int64_t>(order.size());
  double flops = 0;  // of one pass; below ~2 MFLOP in all, threads cost more than they save
  for (const LinearGroupItem& it : items)
    flops += 2.0 * static_cast<double>(it.x.size(0)) * static_cast<double>(it.w.numel());
  if (n <= 1 || flops < 2e6 || omp_in_parallel() || omp_get_max_threads() == 1) {
    for (size_t i : order) body(items[i]);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      body(items[order[i]]);
    } catch (...) {
#pragma omp critical(fp8t_grouped_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}
}  // namespace

void GemmLinearCompute::grouped_fprop(const std::vector<LinearGroupItem>& items) {
  for_each_item(items, [&](const LinearGroupItem& it) { fprop(*it.site, it.x, it.w, it.y); });
}

void GemmLinearCompute::grouped_backward(const std::vector<LinearGroupItem>& items) {
  for_each_item(items, [&](const LinearGroupItem& it) {
    wgrad(*it.site, it.dy, it.x, it.dw);
    dgrad(*it.site, it.dy, it.w, it.dx, false);
  });
}

std::shared_ptr<LinearCompute> make_fp32_linear_compute() { return std::make_shared<GemmLinearCompute>(false); }
std::shared_ptr<LinearCompute> make_bf16_linear_compute() { return std::make_shared<GemmLinearCompute>(true); }

}  // namespace fp8train::model
