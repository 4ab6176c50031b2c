// RMSNorm and SwiGLU FFN (see layers.h).
#include "model/layers.h"

#include "ops/quantize.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace fp8train::model {

RMSNorm::RMSNorm(ParameterSet& params, const std::string& name, int64_t dim, double eps, DType dtype) : eps_(eps) {
  Parameter& p = params.add(name + ".weight", {dim}, dtype, Init::Ones);
  weight_ = p.value;
  grad_ = p.grad;
}

Tensor RMSNorm::forward(const StepContext& ctx, const Tensor& x, State* state, bool keep_output) const {
  Tensor y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), MemCategory::Workspace, ctx.exec.device);
  forward(ctx, x, y, state, keep_output);
  return y;
}

void RMSNorm::forward(const StepContext& ctx, const Tensor& x, const Tensor& y, State* state, bool keep_output) const {
  Tensor rstd = Tensor::empty({x.size(0)}, compute_dtype(x.dtype()), MemCategory::Workspace, ctx.exec.device);
  ops::rmsnorm_forward(ctx.exec, x, weight_, eps_, y, rstd);
  if (ctx.training && state) {
    state->x = ctx.store->save(ctx.exec, x, CacheKind::NormInput);
    state->rstd = ctx.store->save(ctx.exec, rstd, CacheKind::NormRstd);
    if (keep_output) state->y = ctx.store->maybe_save(ctx.exec, y, CacheKind::NormOutput);
  }
}

Tensor RMSNorm::output(const StepContext& ctx, const State& state) const {
  Tensor y = ctx.store->load(ctx.exec, state.y);
  if (y.defined()) return y;
  const Tensor x = ctx.store->load(ctx.exec, state.x);
  y = Tensor::empty({x.size(0), x.size(1)}, x.dtype(), MemCategory::Workspace, ctx.exec.device);
  ops::rmsnorm_forward(ctx.exec, x, weight_, eps_, y, Tensor());
  return y;
}

void RMSNorm::backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& dx,
                       bool accumulate) const {
  ops::rmsnorm_backward(ctx.exec, ctx.store->load(ctx.exec, state.x), weight_, ctx.store->load(ctx.exec, state.rstd),
                        dy, dx, grad_, accumulate);
}

SwigluFFN::SwigluFFN(ParameterSet& params, const std::string& name, int64_t hidden, int64_t ffn_dim, DType dtype,
                     int layer, recipe::LinearRole up, recipe::LinearRole down) {
  const Tensor w13 = Tensor::zeros({2 * ffn_dim, hidden}, dtype, MemCategory::Weights);
  const Tensor g13 = Tensor::zeros({2 * ffn_dim, hidden}, dtype, MemCategory::Gradients);
  params.add_view(name + ".w1.weight", w13.rows(0, ffn_dim), g13.rows(0, ffn_dim), Init::Normal);
  params.add_view(name + ".w3.weight", w13.rows(ffn_dim, 2 * ffn_dim), g13.rows(ffn_dim, 2 * ffn_dim), Init::Normal);
  w13_ = Linear(params, w13, g13, name + ".w13", up, layer);
  w2_ = Linear(params, name + ".w2", ffn_dim, hidden, down, dtype, layer);
}

void SwigluFFN::collect_linears(std::vector<const Linear*>& out) const {
  out.push_back(&w13_);
  out.push_back(&w2_);
}

Tensor SwigluFFN::forward(const StepContext& ctx, const Tensor& x, State* state, bool keep_input) const {
  const bool keep = ctx.training && state;
  const LinearInput x13 = w13_.prepare(ctx, x, keep && keep_input);
  const Tensor gate_up = w13_.new_output(ctx, x.size(0));  // [tokens, 2F]: W1·x | W3·x
  w13_.forward(ctx, x13, gate_up);
  const bool keep_act = keep && ctx.store->keeps(CacheKind::SwigluOutput);
  SwigluForward sw = swiglu_ffn_forward(ctx, gate_up, w2_, keep, keep_act);  // silu(W1·x) ∘ (W3·x)
  Tensor y = w2_.new_output(ctx, x.size(0));
  w2_.forward(ctx, sw.x2, y);
  if (keep) {
    if (keep_input) state->x13 = w13_.kept(ctx, x13);
    state->gate_up = std::move(sw.gate_up);
    if (keep_act) state->x2 = w2_.kept(ctx, sw.x2);
  }
  return y;
}

SwigluForward swiglu_ffn_forward(const StepContext& ctx, const Tensor& gate_up, const Linear& w2, bool keep,
                                 bool keep_act) {
  SwigluForward out;
  const std::optional<Linear::QuantForm> form = keep_act ? std::nullopt : w2.input_form(ctx);
  const auto cache = keep ? ctx.store->quantized_form(ctx.exec, CacheKind::SwigluInput) : std::nullopt;
  if (form && (!keep || cache)) {
    const ops::SwigluGateUpQuantized q = ops::quantize_swiglu_gate_up(
        ctx.exec, gate_up, cache ? &cache->first : nullptr, cache ? cache->second : quant::ScaleLayout::RowMajor,
        MemCategory::ActivationCache, form->spec, form->layout);
    out.x2 = w2.prepared(ctx, q.act);
    if (keep) out.gate_up = ctx.store->save_quantized(q.cache, gate_up.dtype(), CacheKind::SwigluInput);
    return out;
  }
  const Tensor act =
      Tensor::empty({gate_up.size(0), gate_up.size(1) / 2}, ctx.dtype, MemCategory::Workspace, ctx.exec.device);
  ops::swiglu_forward(ctx.exec, gate_up, act);
  out.x2 = w2.prepare(ctx, act, keep_act);
  if (keep) out.gate_up = ctx.store->save(ctx.exec, gate_up, CacheKind::SwigluInput);
  return out;
}

void SwigluFFN::backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& x,
                         const Tensor& dx, bool accumulate) const {
  swiglu_ffn_backward(
      ctx, state.gate_up, state.x2, w2_, w13_, dy,
      [&] { return state.x13.defined() ? state.x13 : w13_.recomputed(ctx, x); }, dx, accumulate);
}

void swiglu_ffn_backward(const StepContext& ctx, const SavedTensor& gate_up, LinearInput x2, const Linear& w2,
                         const Linear& w13, Tensor dy, const std::function<LinearInput()>& x13, const Tensor& dx,
                         bool accumulate, const Tensor& offsets) {
  const Device dev = ctx.exec.device;
  const quant::QTensor& gq = gate_up.q;
  const std::optional<Linear::QuantForm> x2_form = x2.defined() ? std::nullopt : w2.recompute_form(ctx);
  const std::optional<Linear::QuantForm> dy_form = w13.dy_form(ctx);
  const bool fused = gq.defined() && dy_form.has_value() && (x2.defined() || x2_form.has_value());
  Tensor g;  // gate|up in the compute dtype (the unfused path)
  if (!fused) g = ctx.store->load(ctx.exec, gate_up);
  const int64_t rows = fused ? gq.rows : g.size(0), F = (fused ? gq.cols : g.size(1)) / 2;
  if (!x2.defined()) {  // recompute silu(gate)∘up from the kept gate|up
    if (fused) {
      x2 = w2.recomputed(ctx, ops::quantize_swiglu_forward(ctx.exec, gq, gate_up.dtype, x2_form->spec, x2_form->outputs,
                                                           x2_form->layout));
    } else {
      const Tensor act = Tensor::empty({rows, F}, ctx.dtype, MemCategory::Workspace, dev);
      ops::swiglu_forward(ctx.exec, g, act);
      x2 = w2.recomputed(ctx, act);
    }
  }
  Tensor dact = Tensor::empty({rows, F}, ctx.dtype, MemCategory::Workspace, dev);
  w2.backward(ctx, dy, x2, dact, false, offsets);
  // Released in stream order: the allocator hands the memory out again only to work queued after these readers.
  dy = Tensor();
  x2 = LinearInput();
  if (fused) {
    const quant::QTensor dq =
        ops::quantize_swiglu_backward(ctx.exec, gq, dact, dy_form->spec, dy_form->outputs, dy_form->layout);
    dact = Tensor();
    w13.backward(ctx, dq, x13(), dx, accumulate, offsets);
    return;
  }
  const Tensor dgate_up = Tensor::empty({rows, 2 * F}, ctx.dtype, MemCategory::Workspace, dev);
  ops::swiglu_backward(ctx.exec, g, dact, dgate_up);
  dact = Tensor();
  w13.backward(ctx, dgate_up, x13(), dx, accumulate, offsets);
}

}  // namespace fp8train::model
