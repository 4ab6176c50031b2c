// Linear, RMSNorm and SwiGLU FFN (see layers.h).
#include "model/layers.h"

#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace fp8train::model {

Linear::Linear(ParameterSet& params, const std::string& name, int64_t in, int64_t out, DType dtype, int layer) {
  Parameter& p = params.add(name + ".weight", {out, in}, dtype, Init::Normal);
  weight_ = p.value;
  grad_ = p.grad;
  site_ = {name, layer};
}

Linear::Linear(const Tensor& weight, const Tensor& grad, const std::string& site_name, int layer)
    : weight_(weight), grad_(grad), site_{site_name, layer} {}

void Linear::forward(const StepContext& ctx, const Tensor& x, const Tensor& y) const {
  ctx.linear->fprop(site_, x, weight_, y);
}

Tensor Linear::forward(const StepContext& ctx, const Tensor& x) const {
  Tensor y = Tensor::empty({x.size(0), out_features()}, x.dtype(), MemCategory::Workspace, x.device());
  forward(ctx, x, y);
  return y;
}

void Linear::backward(const StepContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx,
                      bool accumulate) const {
  ctx.linear->wgrad(site_, dy, x, grad_);
  if (dx.defined()) ctx.linear->dgrad(site_, dy, weight_, dx, accumulate);
}

RMSNorm::RMSNorm(ParameterSet& params, const std::string& name, int64_t dim, double eps, DType dtype) : eps_(eps) {
  Parameter& p = params.add(name + ".weight", {dim}, dtype, Init::Ones);
  weight_ = p.value;
  grad_ = p.grad;
}

Tensor RMSNorm::forward(const StepContext& ctx, const Tensor& x, const std::string& site, State* state) const {
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), MemCategory::Workspace, x.device());
  forward(ctx, x, y, site, state, true);
  return y;
}

void RMSNorm::forward(const StepContext& ctx, const Tensor& x, const Tensor& y, const std::string& site,
                      State* state, bool keep_output) const {
  Tensor rstd = Tensor::empty({x.size(0)}, x.dtype(), MemCategory::Workspace, x.device());
  ops::rmsnorm_forward(ctx.exec, x, weight_, eps_, y, rstd);
  if (ctx.training && state) {
    state->x = ctx.cache->save(x, {site, CacheKind::NormInput});
    state->rstd = ctx.cache->save(rstd, {site, CacheKind::NormRstd});
    if (keep_output) state->y = ctx.cache->maybe_save(y, {site, CacheKind::NormOutput});
  }
}

Tensor RMSNorm::output(const StepContext& ctx, const State& state) const {
  Tensor y = ctx.cache->load(state.y);
  if (y.defined()) return y;
  const Tensor x = ctx.cache->load(state.x);
  y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), MemCategory::Workspace, x.device());
  ops::rmsnorm_forward(ctx.exec, x, weight_, eps_, y, Tensor());
  return y;
}

void RMSNorm::backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& dx,
                       bool accumulate) const {
  ops::rmsnorm_backward(ctx.exec, ctx.cache->load(state.x), weight_, ctx.cache->load(state.rstd), dy, dx, grad_,
                        accumulate);
}

SwigluFFN::SwigluFFN(ParameterSet& params, const std::string& name, int64_t hidden, int64_t ffn_dim, DType dtype,
                     int layer)
    : name_(name) {
  const Tensor w13 = Tensor::zeros({2 * ffn_dim, hidden}, dtype, MemCategory::Weights);
  const Tensor g13 = Tensor::zeros({2 * ffn_dim, hidden}, dtype, MemCategory::Gradients);
  params.add_view(name + ".w1.weight", w13.rows(0, ffn_dim), g13.rows(0, ffn_dim), Init::Normal);
  params.add_view(name + ".w3.weight", w13.rows(ffn_dim, 2 * ffn_dim), g13.rows(ffn_dim, 2 * ffn_dim), Init::Normal);
  w13_ = Linear(w13, g13, name + ".w13", layer);
  w2_ = Linear(params, name + ".w2", ffn_dim, hidden, dtype, layer);
}

Tensor SwigluFFN::forward(const StepContext& ctx, const Tensor& x, State* state) const {
  const Tensor gate_up = w13_.forward(ctx, x);  // [tokens, 2F]: W1·x | W3·x
  const Tensor act = Tensor::empty({x.size(0), ffn_dim()}, x.dtype(), MemCategory::Workspace, x.device());
  ops::swiglu_forward(ctx.exec, gate_up, act);  // silu(W1·x) ∘ (W3·x)
  if (ctx.training && state) {
    state->gate_up = ctx.cache->save(gate_up, {name_, CacheKind::SwigluInput});
    state->act = ctx.cache->maybe_save(act, {name_, CacheKind::SwigluOutput});
  }
  return w2_.forward(ctx, act);
}

void SwigluFFN::backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& x,
                         const Tensor& dx, bool accumulate) const {
  const Tensor gate_up = ctx.cache->load(state.gate_up);
  Tensor act = ctx.cache->load(state.act);
  if (!act.defined()) {  // recompute silu(gate)∘up from the kept gate|up
    act = Tensor::empty({x.size(0), ffn_dim()}, x.dtype(), MemCategory::Workspace, x.device());
    ops::swiglu_forward(ctx.exec, gate_up, act);
  }
  const Tensor dact = Tensor::empty({x.size(0), ffn_dim()}, x.dtype(), MemCategory::Workspace, x.device());
  w2_.backward(ctx, dy, act, dact, false);
  const Tensor dgate_up = Tensor::empty({x.size(0), 2 * ffn_dim()}, x.dtype(), MemCategory::Workspace, x.device());
  ops::swiglu_backward(ctx.exec, gate_up, dact, dgate_up);
  w13_.backward(ctx, dgate_up, x, dx, accumulate);
}

}  // namespace fp8train::model
