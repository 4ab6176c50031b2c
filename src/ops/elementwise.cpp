// Elementwise entry points (see elementwise.h).
#include "ops/elementwise.h"

#include <fmt/format.h>

#include <string>

#include "ops/checks.h"

namespace fp8train::ops {

namespace {
void run_axpby(const ExecCtx& ctx, const char* op, double alpha, const Tensor& a, double beta, const Tensor* b,
               const Tensor& out) {
  const Tensor ma = check::as_matrix(op, "a", a);
  const Tensor mo = check::as_matrix(op, "out", out);
  check::storage_dtype(op, "a", a);
  check::storage_dtype(op, "out", out);
  FP8T_CHECK(ma.size(0) == mo.size(0) && ma.size(1) == mo.size(1), "{}: shapes differ: {} vs {}", op, a.str(),
             out.str());
  Tensor mb;
  if (b) {
    mb = check::as_matrix(op, "b", *b);
    FP8T_CHECK(mb.size(0) == mo.size(0) && mb.size(1) == mo.size(1), "{}: shapes differ: {} vs {}", op, b->str(),
               out.str());
  }
  if (b) check::storage_dtype(op, "b", mb);
  FP8T_CHECK(compute_dtype(a.dtype()) == compute_dtype(out.dtype()) &&
                 (!b || compute_dtype(mb.dtype()) == compute_dtype(out.dtype())),
             "{}: f64 tensors mix only with f64 ({} and {})", op, a.str(), out.str());
  check::on_device(op, ctx, {&a, &mb, &out});
  AxpbyProblem p;
  p.dtype = out.dtype();
  p.a_dtype = a.dtype();
  p.b_dtype = b ? mb.dtype() : a.dtype();
  p.rows = mo.size(0);
  p.cols = mo.size(1);
  p.ld_a = ma.ld();
  p.ld_b = b ? mb.ld() : 0;
  p.ld_out = mo.ld();
  p.alpha = alpha;
  p.beta = beta;
  // A shape-recording profile tells the axpby family's uses apart ("axpby add 8192x2048 bf16").
  const std::string key = ctx.profile != nullptr && ctx.profile->shapes()
                              ? fmt::format("axpby {} {}x{} {}", op, p.rows, p.cols, dtype_name(p.dtype))
                              : std::string("axpby");
  launcher(ctx, &OpTable::axpby, key)(ctx, p, ma.raw(), b ? mb.raw() : nullptr, mo.raw());
}
}  // namespace

void axpby(const ExecCtx& ctx, double alpha, const Tensor& a, double beta, const Tensor& b, const Tensor& out) {
  run_axpby(ctx, "axpby", alpha, a, beta, &b, out);
}
void copy(const ExecCtx& ctx, const Tensor& src, const Tensor& dst) {
  run_axpby(ctx, "copy", 1.0, src, 0.0, nullptr, dst);
}
void add(const ExecCtx& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  run_axpby(ctx, "add", 1.0, a, 1.0, &b, out);
}
void axpy(const ExecCtx& ctx, double alpha, const Tensor& x, const Tensor& y) {
  run_axpby(ctx, "axpy", alpha, x, 1.0, &y, y);
}
void scale(const ExecCtx& ctx, const Tensor& x, double alpha) { run_axpby(ctx, "scale", alpha, x, 0.0, nullptr, x); }

void fill(const ExecCtx& ctx, const Tensor& x, double value) {
  const Tensor m = check::as_matrix("fill", "x", x);
  check::storage_dtype("fill", "x", x);
  AxpbyProblem p;
  p.dtype = x.dtype();
  p.rows = m.size(0);
  p.cols = m.size(1);
  p.ld_out = m.ld();
  launcher(ctx, &OpTable::fill, "fill")(ctx, p, value, m.raw());
}

}  // namespace fp8train::ops
