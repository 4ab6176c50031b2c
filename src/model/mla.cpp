// Multi-head Latent Attention forward and backward (formulas in mla.h).
#include "model/mla.h"

#include "ops/attention.h"
#include "ops/attention_cached.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/heads.h"
#include "ops/quantize.h"
#include "ops/rope.h"

namespace fp8train::model {

using recipe::LinearRole;

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
  wq_a_ = Linear(params, name + ".wq_a", d, q_rank_, LinearRole::AttnQDown, dtype, layer);  // W_DQ
  q_norm_ = RMSNorm(params, name + ".q_norm", q_rank_, c.rms_norm_eps, dtype);
  wq_b_ = Linear(params, name + ".wq_b", q_rank_, heads_ * (nope_ + rope_), LinearRole::AttnQUp, dtype,
                 layer);  // [W_UQ; W_QR]
  wkv_a_ = Linear(params, name + ".wkv_a", d, kv_rank_ + rope_, LinearRole::AttnKvDown, dtype,
                  layer);  // [W_DKV; W_KR]
  kv_norm_ = RMSNorm(params, name + ".kv_norm", kv_rank_, c.rms_norm_eps, dtype);
  wkv_b_ = Linear(params, name + ".wkv_b", kv_rank_, heads_ * (nope_ + vdim_), LinearRole::AttnKvUp, dtype,
                  layer);                                                                    // [W_UK; W_UV]
  wo_ = Linear(params, name + ".wo", heads_ * vdim_, d, LinearRole::AttnOut, dtype, layer);  // W_O
}

void MLA::collect_linears(std::vector<const Linear*>& out) const {
  for (const Linear* l : {&wq_a_, &wq_b_, &wkv_a_, &wkv_b_, &wo_}) out.push_back(l);
}

Tensor MLA::up_project_q(const StepContext& ctx, const LinearInput& c_q) const {
  const int64_t n = c_q.x.defined() ? c_q.x.size(0) : c_q.q.rows, dqk = nope_ + rope_;
  Tensor q = Tensor::empty({n, heads_ * dqk}, ctx.dtype, MemCategory::Workspace, ctx.exec.device);
  wq_b_.forward(ctx, c_q, q);  // q^C_i | W_QR_i·c_Q per head
  q = q.view({n, heads_, dqk});
  ops::rope_(ctx.exec, q.narrow(2, nope_, rope_), ctx.seq, theta_, false);  // q^R = RoPE(W_QR·c_Q)
  return q;
}

Tensor MLA::assemble_k(const StepContext& ctx, const Tensor& kv, const Tensor& k_rope) const {
  const int64_t n = kv.size(0), dqk = nope_ + rope_, dkv = nope_ + vdim_;
  Tensor k = Tensor::empty({n, heads_, dqk}, kv.dtype(), MemCategory::Workspace, kv.device());
  // k^C_i: the first d_nope of each head's k|v, seen as [tokens·heads, d_nope] matrices
  ops::copy(ctx.exec, kv.as_strided({n * heads_, nope_}, {dkv, 1}), k.as_strided({n * heads_, nope_}, {dqk, 1}));
  // k^R: the same rotated key for every head (one broadcast launch)
  ops::repeat_heads(ctx.exec, k_rope, k.as_strided({n, heads_, rope_}, {heads_ * dqk, dqk, 1}, nope_));
  return k;
}

Tensor MLA::value_view(const Tensor& kv) const {
  const int64_t n = kv.size(0), dkv = nope_ + vdim_;
  return kv.as_strided({n, heads_, vdim_}, {heads_ * dkv, dkv, 1}, nope_);
}

Tensor MLA::forward(const StepContext& ctx, const Tensor& h, State* st, bool keep_input) const {
  const int64_t n = h.size(0);
  const bool keep = ctx.training && st;
  const Device dev = ctx.exec.device;
  // W_DQ and [W_DKV; W_KR] read the same h: one prepared (quantized) input serves both.
  const LinearInput h_in = wq_a_.prepare(ctx, h, keep && keep_input);
  // query path: c_Q = RMSNorm(W_DQ·h); q = [W_UQ·c_Q ; RoPE(W_QR·c_Q)]
  const Tensor c_q = Tensor::empty({n, q_rank_}, ctx.dtype, MemCategory::Workspace, dev);
  wq_a_.forward(ctx, h_in, c_q);
  const Tensor c_q_normed = q_norm_.forward(ctx, c_q, keep ? &st->q_norm : nullptr);
  const bool keep_norm_out = keep && ctx.store->keeps(CacheKind::NormOutput);
  const LinearInput cq_in = wq_b_.prepare(ctx, c_q_normed, keep_norm_out);
  const Tensor q = up_project_q(ctx, cq_in);
  // key/value path: [c_KV pre-norm | W_KR·h] = wkv_a·h; c_KV = RMSNorm(W_DKV·h); k^R = RoPE(W_KR·h)
  const Tensor kva = Tensor::empty({n, kv_rank_ + rope_}, ctx.dtype, MemCategory::Workspace, dev);
  wkv_a_.forward(ctx, h_in, kva);
  const Tensor c_kv_normed = kv_norm_.forward(ctx, kva.cols(0, kv_rank_), keep ? &st->kv_norm : nullptr);
  const Tensor k_rope = kva.cols(kv_rank_, kv_rank_ + rope_);
  ops::rope_(ctx.exec, kva.as_strided({n, 1, rope_}, {kv_rank_ + rope_, rope_, 1}, kv_rank_), ctx.seq, theta_, false);
  const LinearInput ckv_in = wkv_b_.prepare(ctx, c_kv_normed, keep_norm_out);
  const Tensor kv = Tensor::empty({n, heads_ * (nope_ + vdim_)}, ctx.dtype, MemCategory::Workspace, dev);
  wkv_b_.forward(ctx, ckv_in, kv);  // [k^C_i | v_i] per head = [W_UK; W_UV]·c_KV
  const Tensor k = assemble_k(ctx, kv, k_rope);
  // causal attention with scale 1/sqrt(d_nope + d_rope); lse in FP32
  const Tensor o = Tensor::empty({n, heads_, vdim_}, ctx.dtype, MemCategory::Workspace, dev);
  const Tensor lse = Tensor::empty({ctx.batch, heads_, ctx.seq}, compute_dtype(ctx.dtype), MemCategory::Workspace, dev);
  ops::attention_forward(ctx.exec, q, k, value_view(kv), o, lse, ctx.batch, scale_);
  const Tensor o2 = o.view({n, heads_ * vdim_});
  const LinearInput o_in = wo_.prepare(ctx, o2, keep);
  Tensor u = wo_.new_output(ctx, n);
  wo_.forward(ctx, o_in, u);  // u = W_O·[o_1; ...; o_nh]
  if (keep) {
    if (keep_input) st->h_in = wq_a_.kept(ctx, h_in);
    if (keep_norm_out) {
      st->cq_in = wq_b_.kept(ctx, cq_in);
      st->ckv_in = wkv_b_.kept(ctx, ckv_in);
    }
    st->o_in = wo_.kept(ctx, o_in);
    st->q = ctx.store->maybe_save(ctx.exec, q, CacheKind::MlaUpProjection);
    st->kv = ctx.store->maybe_save(ctx.exec, kv, CacheKind::MlaUpProjection);
    st->k = ctx.store->maybe_save(ctx.exec, k, CacheKind::MlaUpProjection);
    st->k_rope = ctx.store->save(ctx.exec, k_rope, CacheKind::AttentionInput);
    // The attention backward reads o: from W_O's kept input when that holds it (plain, or E5M6 — DeepSeek-V3
    // keeps the attention output once, in E5M6, for both), else kept here.
    if (!st->o_in.x.defined() && !st->o_in.stored.defined())
      st->o = ctx.store->save(ctx.exec, o2, CacheKind::AttentionOutput);
    st->lse = ctx.store->save(ctx.exec, lse, CacheKind::AttentionOutput);
  }
  return u;
}

Tensor MLA::attention_output(const StepContext& ctx, const State& st) const {
  if (st.o_in.stored.defined()) return ops::dequantize(ctx.exec, st.o_in.stored, ctx.dtype);
  if (st.o_in.x.defined()) return st.o_in.x;
  return ctx.store->load(ctx.exec, st.o);
}

void MLA::backward(const StepContext& ctx, const State& st, const Tensor& dy, const Tensor& h, const Tensor& dh,
                   bool accumulate) const {
  const int64_t n = dy.size(0), dqk = nope_ + rope_, kv_width = nope_ + vdim_;
  const DType dt = ctx.dtype;
  const Device dev = ctx.exec.device;
  const Tensor o2 = attention_output(ctx, st);
  const Tensor lse = ctx.store->load(ctx.exec, st.lse);
  const Tensor k_rope = ctx.store->load(ctx.exec, st.k_rope);
  // u = W_O·o
  const Tensor d_o = Tensor::empty({n, heads_ * vdim_}, dt, MemCategory::Workspace, dev);
  wo_.backward(ctx, dy, st.o_in, d_o, false);
  // c_Q and c_KV as W_UQ|W_QR and W_UK|W_UV read them: kept, or recomputed from the norms' kept inputs
  LinearInput cq_in = st.cq_in, ckv_in = st.ckv_in;
  if (!cq_in.defined()) cq_in = wq_b_.recomputed(ctx, q_norm_.output(ctx, st.q_norm));
  if (!ckv_in.defined()) ckv_in = wkv_b_.recomputed(ctx, kv_norm_.output(ctx, st.kv_norm));
  // the up-projections the store did not keep
  Tensor q = ctx.store->load(ctx.exec, st.q);
  if (!q.defined()) q = up_project_q(ctx, wq_b_.prepare(ctx, q_norm_.output(ctx, st.q_norm), false));
  Tensor kv = ctx.store->load(ctx.exec, st.kv);
  if (!kv.defined()) {
    kv = Tensor::empty({n, heads_ * kv_width}, dt, MemCategory::Workspace, dev);
    wkv_b_.forward(ctx, wkv_b_.prepare(ctx, kv_norm_.output(ctx, st.kv_norm), false), kv);
  }
  Tensor k = ctx.store->load(ctx.exec, st.k);
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
  // (one launch, summed in the compute dtype and rounded once)
  ops::sum_heads(ctx.exec, dk.as_strided({n, heads_, rope_}, {heads_ * dqk, dqk, 1}, nope_), dk_rope);
  ops::rope_(ctx.exec, dkva.as_strided({n, 1, rope_}, {kv_rank_ + rope_, rope_, 1}, kv_rank_), ctx.seq, theta_, true);
  ops::rope_(ctx.exec, dq.narrow(2, nope_, rope_), ctx.seq, theta_, true);
  // kv = [W_UK; W_UV]·c_KV;  c_KV = RMSNorm(c_KV pre-norm)
  const Tensor dc_kv = Tensor::empty({n, kv_rank_}, dt, MemCategory::Workspace, dev);
  wkv_b_.backward(ctx, dkv, ckv_in, dc_kv, false);
  kv_norm_.backward(ctx, st.kv_norm, dc_kv, dkva.cols(0, kv_rank_), false);
  // q = [W_UQ; W_QR]·c_Q;  c_Q = RMSNorm(W_DQ·h)
  const Tensor dc_q_normed = Tensor::empty({n, q_rank_}, dt, MemCategory::Workspace, dev);
  wq_b_.backward(ctx, dq.view({n, heads_ * dqk}), cq_in, dc_q_normed, false);
  const Tensor dc_q = Tensor::empty({n, q_rank_}, dt, MemCategory::Workspace, dev);
  q_norm_.backward(ctx, st.q_norm, dc_q_normed, dc_q, false);
  // h feeds W_DQ and [W_DKV; W_KR] (one kept input for both)
  const LinearInput h_in = st.h_in.defined() ? st.h_in : wq_a_.recomputed(ctx, h);
  wq_a_.backward(ctx, dc_q, h_in, dh, accumulate);
  wkv_a_.backward(ctx, dkva, h_in, dh, true);
}

Tensor MLA::decode(const StepContext& ctx, const Tensor& h, const Tensor& cache, int64_t pos) const {
  const int64_t m = h.size(0), dqk = nope_ + rope_, width = kv_rank_ + rope_, dkv = nope_ + vdim_;
  FP8T_CHECK(cache.defined() && cache.dim() == 2 && cache.size(1) == width && cache.dtype() == ctx.dtype,
             "{}: the latent cache must be [capacity, {}] {}, got {}", name_, width, dtype_name(ctx.dtype),
             cache.defined() ? cache.str() : "none");
  FP8T_CHECK(pos >= 0 && pos + m <= cache.size(0), "{}: tokens {}..{} do not fit a cache of {} positions", name_, pos,
             pos + m - 1, cache.size(0));
  const Device dev = ctx.exec.device;
  const DType dt = ctx.dtype;
  const LinearInput h_in = wq_a_.prepare(ctx, h, false);
  // query path as in forward(), RoPE at the absolute positions
  const Tensor c_q = Tensor::empty({m, q_rank_}, dt, MemCategory::Workspace, dev);
  wq_a_.forward(ctx, h_in, c_q);
  const Tensor c_q_normed = q_norm_.forward(ctx, c_q, nullptr);
  Tensor q = Tensor::empty({m, heads_ * dqk}, dt, MemCategory::Workspace, dev);
  wq_b_.forward(ctx, wq_b_.prepare(ctx, c_q_normed, false), q);
  q = q.view({m, heads_, dqk});
  ops::rope_(ctx.exec, q.narrow(2, nope_, rope_), m, theta_, false, pos);
  // the new latent rows: [c_KV; k^R] = [RMSNorm(W_DKV·h); RoPE(W_KR·h)], written into the cache
  const Tensor kva = Tensor::empty({m, width}, dt, MemCategory::Workspace, dev);
  wkv_a_.forward(ctx, h_in, kva);
  const Tensor rows = cache.rows(pos, pos + m);
  kv_norm_.forward(ctx, kva.cols(0, kv_rank_), rows.cols(0, kv_rank_), nullptr, false);
  ops::copy(ctx.exec, kva.cols(kv_rank_, width), rows.cols(kv_rank_, width));
  ops::rope_(ctx.exec, cache.as_strided({m, 1, rope_}, {cache.stride(0), rope_, 1}, pos * cache.stride(0) + kv_rank_),
             m, theta_, false, pos);
  // absorbed query per head: [W_UK_iᵀ·q^C_i; q^R_i] (W_UK_i: rows i·dkv .. i·dkv + d_nope of wkv_b, [d_nope, kv_rank])
  const Tensor& wkv_b = wkv_b_.weight();
  const Tensor qa = Tensor::empty({m, heads_, width}, dt, MemCategory::Workspace, dev);
  for (int64_t i = 0; i < heads_; ++i)
    ops::gemm(ctx.exec, q.as_strided({m, nope_}, {heads_ * dqk, 1}, i * dqk), false,
              wkv_b.rows(i * dkv, i * dkv + nope_), false,
              qa.as_strided({m, kv_rank_}, {heads_ * width, 1}, i * width));
  ops::copy(ctx.exec, q.as_strided({m * heads_, rope_}, {dqk, 1}, nope_),
            qa.as_strided({m * heads_, rope_}, {width, 1}, kv_rank_));
  // attention over the cached rows: keys [c_KV; k^R], values c_KV → o^lat_i = Σ_s p_s·c_KV(s)
  const Tensor seen = cache.rows(0, pos + m);
  const Tensor o_lat = Tensor::empty({m, heads_, kv_rank_}, dt, MemCategory::Workspace, dev);
  ops::attention_cached(ctx.exec, qa, seen, seen.cols(0, kv_rank_), o_lat, scale_);
  // o_i = W_UV_i·o^lat_i (W_UV_i: rows i·dkv + d_nope .. (i+1)·dkv of wkv_b, [d_v, kv_rank])
  const Tensor o = Tensor::empty({m, heads_ * vdim_}, dt, MemCategory::Workspace, dev);
  for (int64_t i = 0; i < heads_; ++i)
    ops::gemm(ctx.exec, o_lat.as_strided({m, kv_rank_}, {heads_ * kv_rank_, 1}, i * kv_rank_), false,
              wkv_b.rows(i * dkv + nope_, (i + 1) * dkv), true, o.cols(i * vdim_, (i + 1) * vdim_));
  Tensor u = wo_.new_output(ctx, m);
  wo_.forward(ctx, wo_.prepare(ctx, o, false), u);
  return u;
}

}  // namespace fp8train::model
