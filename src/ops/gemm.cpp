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

void gemm_grouped(const ExecCtx& ctx, GroupedGemmKind kind, const Tensor& a, const Tensor& b, bool trans_b,
                  const Tensor& c, const Tensor& offsets, const GemmOptions& options) {
  const char* op = "gemm_grouped";
  check::matrix(op, "a", a);
  check::matrix(op, "b", b);
  check::matrix(op, "c", c);
  check::storage_dtype(op, "a", a);
  check::storage_dtype(op, "b", b);
  check::storage_dtype(op, "c", c);
  FP8T_CHECK(
      (a.dtype() == DType::F64) == (c.dtype() == DType::F64) && (b.dtype() == DType::F64) == (c.dtype() == DType::F64),
      "{}: f64 operands mix only with f64 (a {}, b {}, c {})", op, a.str(), b.str(), c.str());
  FP8T_CHECK(!options.round_inputs_bf16, "{}: BF16 input rounding is not supported (pass bf16 operands)", op);
  check::vector(op, "offsets", offsets);
  check::dtype(op, "offsets", offsets, DType::I32);
  FP8T_CHECK(offsets.numel() >= 2, "{}: offsets must hold E + 1 >= 2 entries, got {}", op, offsets.str());
  check::on_device(op, ctx, {&a, &b, &c, &offsets});
  GroupedGemmProblem p;
  p.kind = kind;
  p.dtype = c.dtype();
  p.a_dtype = a.dtype();
  p.b_dtype = b.dtype();
  p.groups = offsets.numel() - 1;
  p.rows = a.size(0);
  if (kind == GroupedGemmKind::M) {
    p.k = a.size(1);
    FP8T_CHECK(b.size(0) % p.groups == 0, "{}: b {} is not {} equal expert blocks", op, b.str(), p.groups);
    const int64_t b_rows = b.size(0) / p.groups;
    p.n = trans_b ? b_rows : b.size(1);
    const int64_t kb = trans_b ? b.size(1) : b_rows;
    FP8T_CHECK(kb == p.k, "{}: a is [{}, {}] but each expert's op(b) is [{}, {}]", op, a.size(0), p.k, kb, p.n);
    check::matrix(op, "c", c, p.rows, p.n);
    p.trans_b = trans_b;
  } else {
    FP8T_CHECK(!trans_b, "{}: the K-grouped form takes b untransposed", op);
    check::matrix(op, "b", b, p.rows);
    p.m = a.size(1);
    p.n = b.size(1);
    check::matrix(op, "c", c, p.groups * p.m, p.n);
  }
  p.lda = a.size(0) > 1 ? a.ld() : a.size(1);
  p.ldb = b.size(0) > 1 ? b.ld() : b.size(1);
  p.ldc = c.size(0) > 1 ? c.ld() : c.size(1);
  p.alpha = options.alpha;
  p.beta = options.beta;
  launcher(ctx, &OpTable::gemm_grouped, op)(ctx, p, offsets.data<int32_t>(), a.raw(), b.raw(), c.raw());
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
