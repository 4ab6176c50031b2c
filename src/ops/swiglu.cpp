// SwiGLU entry points (see swiglu.h).
#include "ops/swiglu.h"

#include "ops/checks.h"

namespace fp8train::ops {

namespace {
int64_t ld_of(const Tensor& m) { return m.size(0) > 1 ? m.ld() : m.size(1); }
}  // namespace

void swiglu_forward(const ExecCtx& ctx, const Tensor& in, const Tensor& out) {
  const char* op = "swiglu_forward";
  check::matrix(op, "in", in);
  check::storage_dtype(op, "in", in);
  FP8T_CHECK(in.size(1) % 2 == 0, "{}: in must have 2F columns (gate | up), got {}", op, in.str());
  check::matrix(op, "out", out, in.size(0), in.size(1) / 2);
  check::same_dtype(op, {&in, &out});
  check::on_device(op, ctx, {&in, &out});
  SwigluProblem p;
  p.dtype = in.dtype();
  p.rows = in.size(0);
  p.ffn_dim = in.size(1) / 2;
  p.ld_in = ld_of(in);
  p.ld_out = ld_of(out);
  launcher(ctx, &OpTable::swiglu_forward, "swiglu_forward")(ctx, p, in.raw(), out.raw());
}

void swiglu_backward(const ExecCtx& ctx, const Tensor& in, const Tensor& dout, const Tensor& din) {
  const char* op = "swiglu_backward";
  check::matrix(op, "in", in);
  check::storage_dtype(op, "in", in);
  FP8T_CHECK(in.size(1) % 2 == 0, "{}: in must have 2F columns (gate | up), got {}", op, in.str());
  check::matrix(op, "dout", dout, in.size(0), in.size(1) / 2);
  check::matrix(op, "din", din, in.size(0), in.size(1));
  FP8T_CHECK(ld_of(din) == ld_of(in), "{}: din and in must share their row stride ({} vs {})", op, ld_of(din),
             ld_of(in));
  check::same_dtype(op, {&in, &dout, &din});
  check::on_device(op, ctx, {&in, &dout, &din});
  SwigluProblem p;
  p.dtype = in.dtype();
  p.rows = in.size(0);
  p.ffn_dim = in.size(1) / 2;
  p.ld_in = ld_of(in);
  p.ld_out = ld_of(dout);
  launcher(ctx, &OpTable::swiglu_backward, "swiglu_backward")(ctx, p, in.raw(), dout.raw(), din.raw());
}

}  // namespace fp8train::ops
