// Multi-head Latent Attention forward and backward (formulas in mla.h).
#include "model/mla.h"

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/rope.h"

namespace fp8train::model {

MLA::MLA(ParameterSet& params, const std::string& name, const ModelConfig& c, DType dtype, int layer)
    : name_(name),
      heads_(c.n_heads),
      nope_(c.qk_nope_head_dim),
      rope_(c.qk_rope_head_dim),
      vdim_(c.v_head_dim),
      q_rank_(c.q_lora_rank),
      kv_rank_(c.kv_lora_rank),
      scale_(c.softmax_scale()),
      theta_(c.rope_theta) {
  const int64_t d = c.hidden_size;
  wq_a_ = Linear(params, name + ".wq_a", d, q_rank_, dtype, layer);                          // W_DQ
  q_norm_ = RMSNorm(params, name + ".q_norm", q_rank_, c.rms_norm_eps, dtype);
  wq_b_ = Linear(params, name + ".wq_b", q_rank_, heads_ * (nope_ + rope_), dtype, layer);   // [W_UQ; W_QR]
  wkv_a_ = Linear(params, name + ".wkv_a", d, kv_rank_ + rope_, dtype, layer);               // [W_DKV; W_KR]
  kv_norm_ = RMSNorm(params, name + ".kv_norm", kv_rank_, c.rms_norm_eps, dtype);
  wkv_b_ = Linear(params, name + ".wkv_b", kv_rank_, heads_ * (nope_ + vdim_), dtype, layer); // [W_UK; W_UV]
  wo_ = Linear(params, name + ".wo", heads_ * vdim_, d, dtype, layer);                        // W_O
}

Tensor MLA::up_project_q(const StepContext& ctx, const Tensor& c_q_normed) const {
  const int64_t n = c_q_normed.size(0), dqk = nope_ + rope_;
  Tensor q = wq_b_.forward(ctx, c_q_normed).view({n, heads_, dqk});  // q^C_i | W_QR_i·c_Q per head
  ops::rope_(ctx.exec, q.narrow(2, nope_, rope_), ctx.seq, theta_, false);  // q^R = RoPE(W_QR·c_Q)
  return q;
}

Tensor MLA::assemble_k(const StepContext& ctx, const Tensor& kv, const Tensor& k_rope) const {
  const int64_t n = kv.size(0), dqk = nope_ + rope_, dkv = nope_ + vdim_;
  Tensor k = Tensor::empty({n, heads_, dqk}, kv.dtype(), MemCategory::Workspace, kv.device());
  // k^C_i: the first d_nope of each head's k|v, seen as [tokens·heads, d_nope] matrices
  ops::copy(ctx.exec, kv.as_strided({n * heads_, nope_}, {dkv, 1}), k.as_strided({n * heads_, nope_}, {dqk, 1}));
  // k^R: the same rotated key for every head
  for (int64_t h = 0; h < heads_; ++h)
    ops::copy(ctx.exec, k_rope, k.as_strided({n, rope_}, {heads_ * dqk, 1}, h * dqk + nope_));
  return k;
}

Tensor MLA::value_view(const Tensor& kv) const {
  const int64_t n = kv.size(0), dkv = nope_ + vdim_;
  return kv.as_strided({n, heads_, vdim_}, {heads_ * dkv, dkv, 1}, nope_);
}

Tensor MLA::forward(const StepContext& ctx, const Tensor& h, State* st) const {
  const int64_t n = h.size(0);
  const bool keep = ctx.training && st;
  // query path: c_Q = RMSNorm(W_DQ·h); q = [W_UQ·c_Q ; RoPE(W_QR·c_Q)]
  const Tensor c_q = wq_a_.forward(ctx, h);
  const Tensor c_q_normed = q_norm_.forward(ctx, c_q, name_ + ".q_norm", keep ? &st->q_norm : nullptr);
  const Tensor q = up_project_q(ctx, c_q_normed);
  // key/value path: [c_KV pre-norm | W_KR·h] = wkv_a·h; c_KV = RMSNorm(W_DKV·h); k^R = RoPE(W_KR·h)
  const Tensor kva = wkv_a_.forward(ctx, h);
  const Tensor c_kv_normed = kv_norm_.forward(ctx, kva.cols(0, kv_rank_), name_ + ".kv_norm",
                                              keep ? &st->kv_norm : nullptr);
  const Tensor k_rope = kva.cols(kv_rank_, kv_rank_ + rope_);
  ops::rope_(ctx.exec, kva.as_strided({n, 1, rope_}, {kv_rank_ + rope_, rope_, 1}, kv_rank_), ctx.seq, theta_, false);
  const Tensor kv = wkv_b_.forward(ctx, c_kv_normed);  // [k^C_i | v_i] per head = [W_UK; W_UV]·c_KV
  const Tensor k = assemble_k(ctx, kv, k_rope);
  // causal attention with scale 1/sqrt(d_nope + d_rope)
  const Tensor o = Tensor::empty({n, heads_, vdim_}, h.dtype(), MemCategory::Workspace, h.device());
  const Tensor lse = Tensor::empty({ctx.batch, heads_, ctx.seq}, h.dtype(), MemCategory::Workspace, h.device());
  ops::attention_forward(ctx.exec, q, k, value_view(kv), o, lse, ctx.batch, scale_);
  const Tensor o2 = o.view({n, heads_ * vdim_});
  if (keep) {
    st->q = ctx.cache->maybe_save(q, {name_, CacheKind::MlaUpProjection});
    st->kv = ctx.cache->maybe_save(kv, {name_, CacheKind::MlaUpProjection});
    st->k = ctx.cache->maybe_save(k, {name_, CacheKind::MlaUpProjection});
    st->k_rope = ctx.cache->save(k_rope, {name_, CacheKind::AttentionInput});
    st->o = ctx.cache->save(o2, {name_, CacheKind::AttentionOutput});
    st->lse = ctx.cache->save(lse, {name_, CacheKind::AttentionOutput});
  }
  return wo_.forward(ctx, o2);  // u = W_O·[o_1; ...; o_nh]
}

void MLA::backward(const StepContext& ctx, const State& st, const Tensor& dy, const Tensor& h, const Tensor& dh,
                   bool accumulate) const {
  const int64_t n = h.size(0), dqk = nope_ + rope_, kv_width = nope_ + vdim_;
  const DType dt = h.dtype();
  const Device dev = h.device();
  const Tensor o2 = ctx.cache->load(st.o);
  const Tensor lse = ctx.cache->load(st.lse);
  const Tensor k_rope = ctx.cache->load(st.k_rope);
  // u = W_O·o
  const Tensor d_o = Tensor::empty({n, heads_ * vdim_}, dt, MemCategory::Workspace, dev);
  wo_.backward(ctx, dy, o2, d_o, false);
  // recompute the up-projections the cache did not keep
  Tensor c_q_normed, c_kv_normed;
  Tensor q = ctx.cache->load(st.q);
  if (!q.defined()) {
    c_q_normed = q_norm_.output(ctx, st.q_norm);
    q = up_project_q(ctx, c_q_normed);
  }
  Tensor kv = ctx.cache->load(st.kv);
  if (!kv.defined()) {
    c_kv_normed = kv_norm_.output(ctx, st.kv_norm);
    kv = wkv_b_.forward(ctx, c_kv_normed);
  }
  Tensor k = ctx.cache->load(st.k);
  if (!k.defined()) k = assemble_k(ctx, kv, k_rope);
  // attention core
  const Tensor dq = Tensor::empty({n, heads_, dqk}, dt, MemCategory::Workspace, dev);
  const Tensor dk = Tensor::empty({n, heads_, dqk}, dt, MemCategory::Workspace, dev);
  const Tensor dkv = Tensor::empty({n, heads_ * kv_width}, dt, MemCategory::Workspace, dev);
  ops::attention_backward(ctx.exec, q, k, value_view(kv), o2.view({n, heads_, vdim_}), lse,
                          d_o.view({n, heads_, vdim_}), dq, dk, value_view(dkv), ctx.batch, scale_);
  // k_i = [k^C_i; k^R]: dk^C_i goes to the W_UK rows of dkv, dk^R = Σ_i dk^R_i
  ops::copy(ctx.exec, dk.as_strided({n * heads_, nope_}, {dqk, 1}), dkv.as_strided({n * heads_, nope_}, {kv_width, 1}));
  const Tensor dkva = Tensor::empty({n, kv_rank_ + rope_}, dt, MemCategory::Workspace, dev);
  const Tensor dk_rope = dkva.cols(kv_rank_, kv_rank_ + rope_);
  ops::copy(ctx.exec, dk.as_strided({n, rope_}, {heads_ * dqk, 1}, nope_), dk_rope);
  for (int64_t i = 1; i < heads_; ++i)
    ops::axpy(ctx.exec, 1.0, dk.as_strided({n, rope_}, {heads_ * dqk, 1}, i * dqk + nope_), dk_rope);
  ops::rope_(ctx.exec, dkva.as_strided({n, 1, rope_}, {kv_rank_ + rope_, rope_, 1}, kv_rank_), ctx.seq, theta_, true);
  ops::rope_(ctx.exec, dq.narrow(2, nope_, rope_), ctx.seq, theta_, true);
  // kv = [W_UK; W_UV]·c_KV;  c_KV = RMSNorm(c_KV pre-norm)
  if (!c_kv_normed.defined()) c_kv_normed = kv_norm_.output(ctx, st.kv_norm);
  const Tensor dc_kv = Tensor::empty({n, kv_rank_}, dt, MemCategory::Workspace, dev);
  wkv_b_.backward(ctx, dkv, c_kv_normed, dc_kv, false);
  kv_norm_.backward(ctx, st.kv_norm, dc_kv, dkva.cols(0, kv_rank_), false);
  // q = [W_UQ; W_QR]·c_Q;  c_Q = RMSNorm(W_DQ·h)
  if (!c_q_normed.defined()) c_q_normed = q_norm_.output(ctx, st.q_norm);
  const Tensor dc_q_normed = Tensor::empty({n, q_rank_}, dt, MemCategory::Workspace, dev);
  wq_b_.backward(ctx, dq.view({n, heads_ * dqk}), c_q_normed, dc_q_normed, false);
  const Tensor dc_q = Tensor::empty({n, q_rank_}, dt, MemCategory::Workspace, dev);
  q_norm_.backward(ctx, st.q_norm, dc_q_normed, dc_q, false);
  // h feeds W_DQ and [W_DKV; W_KR]
  wq_a_.backward(ctx, dc_q, h, dh, accumulate);
  wkv_a_.backward(ctx, dkva, h, dh, true);
}

}  // namespace fp8train::model
