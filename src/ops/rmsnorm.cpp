// RMSNorm entry points (see rmsnorm.h).
#include "ops/rmsnorm.h"

#include "ops/checks.h"

namespace fp8train::ops {

namespace {
int64_t ld_of(const Tensor& m) { return m.size(0) > 1 ? m.ld() : m.size(1); }
}  // namespace

void rmsnorm_forward(const ExecCtx& ctx, const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                     const Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  check::matrix(op, "x", x);
  check::storage_dtype(op, "x", x);
  const int64_t rows = x.size(0), dim = x.size(1);
  check::vector(op, "weight", weight, dim);
  check::matrix(op, "y", y, rows, dim);
  if (rstd.defined()) check::vector(op, "rstd", rstd, rows);
  check::same_dtype(op, {&x, &y});
  check::compute_dtype_of(op, "weight", weight, x.dtype());
  check::compute_dtype_of(op, "rstd", rstd, x.dtype());
  check::on_device(op, ctx, {&x, &weight, &y, &rstd});
  FP8T_CHECK(eps > 0, "{}: eps must be positive, got {}", op, eps);
  RmsNormProblem p;
  p.dtype = x.dtype();
  p.rows = rows;
  p.dim = dim;
  p.ld_x = ld_of(x);
  p.ld_y = ld_of(y);
  p.eps = eps;
  launcher(ctx, &OpTable::rmsnorm_forward, "rmsnorm_forward")(ctx, p, x.raw(), weight.raw(), y.raw(),
                                                              rstd.defined() ? rstd.raw() : nullptr);
}

void rmsnorm_backward(const ExecCtx& ctx, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                      const Tensor& dx, const Tensor& dweight, bool accumulate_dx) {
  const char* op = "rmsnorm_backward";
  check::matrix(op, "x", x);
  check::storage_dtype(op, "x", x);
  const int64_t rows = x.size(0), dim = x.size(1);
  check::vector(op, "weight", weight, dim);
  check::vector(op, "rstd", rstd, rows);
  check::matrix(op, "dy", dy, rows, dim);
  check::matrix(op, "dx", dx, rows, dim);
  if (dweight.defined()) check::vector(op, "dweight", dweight, dim);
  check::same_dtype(op, {&x, &dy, &dx});
  check::compute_dtype_of(op, "weight", weight, x.dtype());
  check::compute_dtype_of(op, "rstd", rstd, x.dtype());
  check::compute_dtype_of(op, "dweight", dweight, x.dtype());
  check::on_device(op, ctx, {&x, &weight, &rstd, &dy, &dx, &dweight});
  RmsNormProblem p;
  p.dtype = x.dtype();
  p.rows = rows;
  p.dim = dim;
  p.ld_x = ld_of(x);
  p.ld_dy = ld_of(dy);
  p.ld_dx = ld_of(dx);
  p.accumulate_dx = accumulate_dx;
  launcher(ctx, &OpTable::rmsnorm_backward, "rmsnorm_backward")(ctx, p, x.raw(), weight.raw(), rstd.raw(), dy.raw(),
                                                                dx.raw(), dweight.defined() ? dweight.raw() : nullptr);
}

}  // namespace fp8train::ops
