// Segmented sum-of-squares entry point (see sum_squares.h).
#include "ops/sum_squares.h"

#include "ops/checks.h"

namespace fp8train::ops {

void sum_squares_segments(const ExecCtx& ctx, const Tensor& x, const Tensor& bounds, const Tensor& out, int64_t chunk) {
  const char* op = "sum_squares_segments";
  check::vector(op, "x", x);
  check::float_dtype(op, "x", x);
  FP8T_CHECK(bounds.defined() && bounds.dim() == 2 && bounds.size(1) == 2 && bounds.is_contiguous(),
             "{}: bounds must be a contiguous [segments, 2] tensor of (begin, end), got {}", op, bounds.str());
  check::dtype(op, "bounds", bounds, DType::I64);
  const int64_t segments = bounds.size(0);
  check::vector(op, "out", out, segments);
  check::dtype(op, "out", out, DType::F64);
  check::on_device(op, ctx, {&x, &bounds, &out});
  FP8T_CHECK(chunk >= 1, "{}: chunk must be positive, got {}", op, chunk);
  if (bounds.device().is_cpu()) {  // host bounds are cheap to validate; device ones are the caller's promise
    const int64_t* b = bounds.data<int64_t>();
    for (int64_t s = 0; s < segments; ++s)
      FP8T_CHECK(0 <= b[2 * s] && b[2 * s] <= b[2 * s + 1] && b[2 * s + 1] <= x.numel(),
                 "{}: segment {} = [{}, {}) is not inside the {} elements of x", op, s, b[2 * s], b[2 * s + 1],
                 x.numel());
  }
  SumSquaresProblem p;
  p.dtype = x.dtype();
  p.n = x.numel();
  p.segments = segments;
  p.chunk = chunk;
  if (segments == 0) return;
  launcher(ctx, &OpTable::sum_squares, op)(ctx, p, x.raw(), bounds.data<int64_t>(), out.data<double>());
}

}  // namespace fp8train::ops
