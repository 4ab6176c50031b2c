// GEMM entry points (see gemm.h): validate, then dispatch to the device's kernels.
#include "ops/gemm.h"

#include "ops/checks.h"

namespace fp8train::ops {

void gemm(const ExecCtx& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
          const GemmOptions& options) {
  check::matrix("gemm", "a", a);
  check::matrix("gemm", "b", b);
  check::matrix("gemm", "c", c);
  check::storage_dtype("gemm", "a", a);
  check::storage_dtype("gemm", "b", b);
  check::storage_dtype("gemm", "c", c);
  FP8T_CHECK(
      (a.dtype() == DType::F64) == (c.dtype() == DType::F64) && (b.dtype() == DType::F64) == (c.dtype() == DType::F64),
      "gemm: f64 operands mix only with f64 (a {}, b {}, c {})", a.str(), b.str(), c.str());
  FP8T_CHECK(
      !options.round_inputs_bf16 || (a.dtype() == DType::F32 && b.dtype() == DType::F32 && c.dtype() == DType::F32),
      "gemm: BF16 input rounding is defined for f32 operands only");
  check::on_device("gemm", ctx, {&a, &b, &c});
  GemmProblem p;
  p.dtype = c.dtype();
  p.a_dtype = a.dtype();
  p.b_dtype = b.dtype();
  p.m = trans_a ? a.size(1) : a.size(0);
  p.k = trans_a ? a.size(0) : a.size(1);
  p.n = trans_b ? b.size(0) : b.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0);
  FP8T_CHECK(kb == p.k, "gemm: inner dimensions differ: op(a) is [{}, {}], op(b) is [{}, {}]", p.m, p.k, kb, p.n);
  FP8T_CHECK(c.size(0) == p.m && c.size(1) == p.n, "gemm: c must be [{}, {}], got {}", p.m, p.n, c.str());
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.lda = a.size(0) > 1 ? a.ld() : a.size(1);
  p.ldb = b.size(0) > 1 ? b.ld() : b.size(1);
  p.ldc = c.size(0) > 1 ? c.ld() : c.size(1);
  p.alpha = options.alpha;
  p.beta = options.beta;
  p.round_inputs_bf16 = options.round_inputs_bf16;
  launcher(ctx, &OpTable::gemm, "gemm")(ctx, p, a.raw(), b.raw(), c.raw());
}

Tensor matmul(const ExecCtx& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, MemCategory category,
              const GemmOptions& options, std::optional<DType> out) {
  check::matrix("matmul", "a", a);
  check::matrix("matmul", "b", b);
  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  Tensor c = Tensor::empty({m, n}, out.value_or(a.dtype()), category, ctx.device);
  GemmOptions o = options;
  o.beta = 0.0;
  gemm(ctx, a, trans_a, b, trans_b, c, o);
  return c;
}

}  // namespace fp8train::ops
