// Attention entry points (see attention.h).
#include "ops/attention.h"

#include "ops/checks.h"

namespace fp8train::ops {

namespace {
HeadsLayout layout(const char* op, const char* arg, const Tensor& t, int64_t rows, int64_t heads, int64_t dim) {
  FP8T_CHECK(t.defined() && t.dim() == 3, "{}: {} must be [rows, heads, dim], got {}", op, arg, t.str());
  FP8T_CHECK(t.size(0) == rows && t.size(1) == heads && t.size(2) == dim, "{}: {} must be [{}, {}, {}], got {}", op,
             arg, rows, heads, dim, t.str());
  FP8T_CHECK(dim <= 1 || t.stride(2) == 1, "{}: {} must have a unit last stride, got {}", op, arg, t.str());
  return {t.stride(0), t.stride(1)};
}

AttentionProblem problem(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                         const Tensor& lse, int64_t batch, double scale) {
  check::storage_dtype(op, "q", q);
  FP8T_CHECK(q.dim() == 3 && v.defined() && v.dim() == 3, "{}: q and v must be 3-D, got {} and {}", op, q.str(),
             v.str());
  FP8T_CHECK(batch > 0 && q.size(0) % batch == 0, "{}: {} rows are not {} whole sequences", op, q.size(0), batch);
  AttentionProblem p;
  p.dtype = q.dtype();
  p.batch = batch;
  p.seq = q.size(0) / batch;
  p.heads = q.size(1);
  p.qk_dim = q.size(2);
  p.v_dim = v.size(2);
  p.scale = scale;
  const int64_t rows = q.size(0);
  p.q = layout(op, "q", q, rows, p.heads, p.qk_dim);
  p.k = layout(op, "k", k, rows, p.heads, p.qk_dim);
  p.v = layout(op, "v", v, rows, p.heads, p.v_dim);
  p.o = layout(op, "o", o, rows, p.heads, p.v_dim);
  FP8T_CHECK(lse.defined() && lse.is_contiguous() && lse.numel() == batch * p.heads * p.seq,
             "{}: lse must be a contiguous [{}, {}, {}], got {}", op, batch, p.heads, p.seq, lse.str());
  return p;
}
}  // namespace

void attention_forward(const ExecCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                       const Tensor& lse, int64_t batch, double scale) {
  const char* op = "attention_forward";
  const AttentionProblem p = problem(op, q, k, v, o, lse, batch, scale);
  check::same_dtype(op, {&q, &k, &v, &o});
  check::compute_dtype_of(op, "lse", lse, q.dtype());
  check::on_device(op, ctx, {&q, &k, &v, &o, &lse});
  launcher(ctx, &OpTable::attention_forward, "attention_forward")(ctx, p, q.raw(), k.raw(), v.raw(), o.raw(),
                                                                  lse.raw());
}

void attention_backward(const ExecCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        int64_t batch, double scale) {
  const char* op = "attention_backward";
  AttentionProblem p = problem(op, q, k, v, o, lse, batch, scale);
  const int64_t rows = q.size(0);
  p.dout = layout(op, "dout", dout, rows, p.heads, p.v_dim);
  p.dq = layout(op, "dq", dq, rows, p.heads, p.qk_dim);
  p.dk = layout(op, "dk", dk, rows, p.heads, p.qk_dim);
  p.dv = layout(op, "dv", dv, rows, p.heads, p.v_dim);
  check::same_dtype(op, {&q, &k, &v, &o, &dout, &dq, &dk, &dv});
  check::compute_dtype_of(op, "lse", lse, q.dtype());
  check::on_device(op, ctx, {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv});
  launcher(ctx, &OpTable::attention_backward, "attention_backward")(
      ctx, p, q.raw(), k.raw(), v.raw(), o.raw(), lse.raw(), dout.raw(), dq.raw(), dk.raw(), dv.raw());
}

}  // namespace fp8train::ops
