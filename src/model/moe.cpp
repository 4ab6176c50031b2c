// DeepSeekMoE forward/backward and the auxiliary-loss-free bias update (formulas in moe.h).
#include "model/moe.h"

#include <algorithm>

#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/swiglu.h"

namespace fp8train::model {

MoE::MoE(ParameterSet& params, const std::string& name, const ModelConfig& c, DType dtype, int layer)
    : name_(name),
      n_experts_(c.n_routed_experts),
      ffn_(c.moe_intermediate_size),
      hidden_(c.hidden_size),
      router_{c.num_experts_per_tok, c.n_group, c.topk_group, c.routed_scaling_factor},
      alpha_(c.seq_aux_loss_alpha),
      load_(static_cast<size_t>(c.n_routed_experts), 0),
      last_load_(static_cast<size_t>(c.n_routed_experts), 0) {
  const int64_t E = n_experts_, F = ffn_, d = hidden_;
  Parameter& gate = params.add(name + ".gate.weight", {E, d}, dtype, Init::Normal);
  gate_weight_ = gate.value;
  gate_grad_ = gate.grad;
  bias_ = params.add_buffer(name + ".gate.bias", Tensor::zeros({E}, DType::F32, MemCategory::Weights)).value;
  if (c.n_shared_experts > 0) {
    has_shared_ = true;
    shared_ = SwigluFFN(params, name + ".shared_experts", d, c.n_shared_experts * F, dtype, layer);
  }
  w13_ = Tensor::zeros({E * 2 * F, d}, dtype, MemCategory::Weights);
  g13_ = Tensor::zeros({E * 2 * F, d}, dtype, MemCategory::Gradients);
  w2_ = Tensor::zeros({E * d, F}, dtype, MemCategory::Weights);
  g2_ = Tensor::zeros({E * d, F}, dtype, MemCategory::Gradients);
  for (int64_t e = 0; e < E; ++e) {
    const std::string en = name + ".experts." + std::to_string(e);
    const int64_t r = e * 2 * F;
    params.add_view(en + ".w1.weight", w13_.rows(r, r + F), g13_.rows(r, r + F), Init::Normal);
    params.add_view(en + ".w2.weight", w2_.rows(e * d, (e + 1) * d), g2_.rows(e * d, (e + 1) * d), Init::Normal);
    params.add_view(en + ".w3.weight", w13_.rows(r + F, r + 2 * F), g13_.rows(r + F, r + 2 * F), Init::Normal);
    expert_w13_.emplace_back(w13_.rows(r, r + 2 * F), g13_.rows(r, r + 2 * F), en + ".w13", layer);
    expert_w2_.emplace_back(w2_.rows(e * d, (e + 1) * d), g2_.rows(e * d, (e + 1) * d), en + ".w2", layer);
  }
}

namespace {
// The grouped-GEMM items of one expert Linear per expert with rows: row blocks [offsets[e], offsets[e+1]) of the
// expert-ordered matrices (any of x, y, dy, dx may be undefined when the call does not use it).
std::vector<LinearGroupItem> expert_items(const std::vector<Linear>& linears, const ops::MoePlan& plan,
                                          const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  std::vector<LinearGroupItem> items;
  auto block = [](const Tensor& t, int64_t b, int64_t e) { return t.defined() ? t.rows(b, e) : Tensor(); };
  const std::vector<int32_t> offsets = plan.expert_offsets.to_vector<int32_t>();
  for (size_t e = 0; e < linears.size(); ++e) {
    const int64_t b = offsets[e], end = offsets[e + 1];
    if (end == b) continue;  // no token chose this expert: nothing to compute, no gradient
    items.push_back({&linears[e].site(), linears[e].weight(), linears[e].grad(), block(x, b, end), block(y, b, end),
                     block(dy, b, end), block(dx, b, end)});
  }
  return items;
}
}  // namespace

Tensor MoE::forward(const StepContext& ctx, const Tensor& u, State* st, double* balance_loss) {
  const int64_t n = u.size(0), K = router_.top_k, F = ffn_;
  const DType dt = u.dtype();
  const Device dev = u.device();
  // router: s_i = sigmoid(u·e_i); top-K of s_i + b_i (group-limited); g_i = s_i/Σ s_sel × routed_scaling_factor
  const Tensor logits = ops::matmul(ctx.exec, u, false, gate_weight_, true);
  const ops::RouterOutputs r = ops::router_forward(ctx.exec, logits, bias_, router_);
  if (ctx.training) {
    const std::vector<int32_t> counts = r.expert_counts.to_vector<int32_t>();
    for (int64_t e = 0; e < n_experts_; ++e) {
      last_load_[e] = counts[e];
      load_[e] += counts[e];
    }
  }
  if (balance_loss && alpha_ > 0)
    *balance_loss += ops::seq_balance_loss(ctx.exec, r.scores, r.selected, ctx.batch, alpha_);
  // dispatch: every (token, choice) pair to its expert's rows — no token dropped
  ops::MoePlan plan = ops::moe_build_plan(ctx.exec, r.selected, n_experts_);
  const Tensor xp = Tensor::empty({n * K, hidden_}, dt, MemCategory::Workspace, dev);
  ops::moe_permute(ctx.exec, u, plan, xp);
  // routed experts: FFN_i(x) = W2_i·(silu(W1_i·x) ∘ (W3_i·x)) on each expert's rows
  const Tensor gate_up = Tensor::empty({n * K, 2 * F}, dt, MemCategory::Workspace, dev);
  ctx.linear->grouped_fprop(expert_items(expert_w13_, plan, xp, gate_up, Tensor(), Tensor()));
  const Tensor act = Tensor::empty({n * K, F}, dt, MemCategory::Workspace, dev);
  ops::swiglu_forward(ctx.exec, gate_up, act);
  const Tensor yp = Tensor::empty({n * K, hidden_}, dt, MemCategory::Workspace, dev);
  ctx.linear->grouped_fprop(expert_items(expert_w2_, plan, act, yp, Tensor(), Tensor()));
  // combine: h' = Σ shared FFN(u) + Σ_selected g_i·FFN_i(u)
  Tensor y;
  if (has_shared_) {
    y = shared_.forward(ctx, u, ctx.training && st ? &st->shared : nullptr);
  } else {
    y = Tensor::zeros({n, hidden_}, dt, MemCategory::Workspace, dev);
  }
  ops::moe_unpermute(ctx.exec, yp, plan, r.gates, y, true);
  if (ctx.training && st) {
    const CacheSite router_site{name_, CacheKind::RouterState};
    st->scores = ctx.cache->save(r.scores, router_site);
    st->selected = ctx.cache->save(r.selected, router_site);
    st->gates = ctx.cache->save(r.gates, router_site);
    st->plan_slots = ctx.cache->save(plan.slot_token, router_site);
    st->plan_choices = ctx.cache->save(plan.choice_slot, router_site);
    st->plan = std::move(plan);
    st->xp = ctx.cache->save(xp, {name_, CacheKind::ExpertIO});
    st->gate_up = ctx.cache->save(gate_up, {name_, CacheKind::SwigluInput});
    st->act = ctx.cache->maybe_save(act, {name_, CacheKind::SwigluOutput});
    st->yp = ctx.cache->save(yp, {name_, CacheKind::ExpertIO});
  }
  return y;
}

void MoE::backward(const StepContext& ctx, const State& st, const Tensor& dy, const Tensor& u, const Tensor& du,
                   bool accumulate) const {
  const int64_t n = u.size(0), K = router_.top_k, F = ffn_;
  const DType dt = u.dtype();
  const Device dev = u.device();
  const ops::MoePlan& plan = st.plan;
  const Tensor scores = ctx.cache->load(st.scores), selected = ctx.cache->load(st.selected);
  const Tensor gates = ctx.cache->load(st.gates);
  const Tensor xp = ctx.cache->load(st.xp), gate_up = ctx.cache->load(st.gate_up), yp = ctx.cache->load(st.yp);
  // shared experts
  if (has_shared_) {
    shared_.backward(ctx, st.shared, dy, u, du, accumulate);
  } else if (!accumulate) {
    ops::fill(ctx.exec, du, 0.0);
  }
  // combine: dyp = g·dy per (token, choice) row; dg = <dy, FFN_i(u)>
  const Tensor dyp = Tensor::empty({n * K, hidden_}, dt, MemCategory::Workspace, dev);
  const Tensor dgates = Tensor::empty({n, K}, dt, MemCategory::Workspace, dev);
  ops::moe_unpermute_backward(ctx.exec, dy, yp, plan, gates, dyp, dgates);
  // routed experts
  Tensor act = ctx.cache->load(st.act);
  if (!act.defined()) {
    act = Tensor::empty({n * K, F}, dt, MemCategory::Workspace, dev);
    ops::swiglu_forward(ctx.exec, gate_up, act);
  }
  const Tensor dact = Tensor::empty({n * K, F}, dt, MemCategory::Workspace, dev);
  ctx.linear->grouped_backward(expert_items(expert_w2_, plan, act, Tensor(), dyp, dact));
  const Tensor dgate_up = Tensor::empty({n * K, 2 * F}, dt, MemCategory::Workspace, dev);
  ops::swiglu_backward(ctx.exec, gate_up, dact, dgate_up);
  const Tensor dxp = Tensor::empty({n * K, hidden_}, dt, MemCategory::Workspace, dev);
  ctx.linear->grouped_backward(expert_items(expert_w13_, plan, xp, Tensor(), dgate_up, dxp));
  ops::moe_permute_backward(ctx.exec, dxp, plan, du, true);
  // router: gates and (through the balance loss) scores depend on the logits u·e_i
  Tensor dscores;
  if (alpha_ > 0) {
    dscores = Tensor::zeros({n, n_experts_}, dt, MemCategory::Workspace, dev);
    ops::seq_balance_loss_backward(ctx.exec, scores, selected, ctx.batch, alpha_, ctx.grad_scale, dscores);
  }
  const Tensor dlogits = Tensor::empty({n, n_experts_}, dt, MemCategory::Workspace, dev);
  ops::router_backward(ctx.exec, scores, selected, dgates, dscores, router_, dlogits);
  ops::gemm(ctx.exec, dlogits, true, u, false, gate_grad_, {.beta = 1.0});
  ops::gemm(ctx.exec, dlogits, false, gate_weight_, false, du, {.beta = 1.0});
}

void MoE::update_bias(double gamma) {
  int64_t total = 0;
  for (int64_t l : load_) total += l;
  if (gamma > 0 && total > 0) {
    // b_i += γ·sign(mean_load − load_i): overloaded experts become less attractive, underloaded more
    const double mean = static_cast<double>(total) / static_cast<double>(n_experts_);
    std::vector<float> b = bias_.to_vector<float>();
    for (int64_t e = 0; e < n_experts_; ++e) {
      const double diff = mean - static_cast<double>(load_[e]);
      const double sign = diff > 0 ? 1.0 : (diff < 0 ? -1.0 : 0.0);
      b[e] = static_cast<float>(static_cast<double>(b[e]) + gamma * sign);
    }
    bias_.copy_from(Tensor::from_vector(b, {n_experts_}, MemCategory::Workspace, bias_.device()));
  }
  clear_load();
}

}  // namespace fp8train::model
