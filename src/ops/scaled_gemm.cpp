// Scaled-GEMM entry points (ops/scaled_gemm.h): validate the operands, the output and the offsets, fill the
// problem, and call the device's launcher.
#include "ops/scaled_gemm.h"

#include "common/error.h"
#include "ops/checks.h"

namespace fp8train::ops {
namespace {

int64_t ld_of(const Tensor& m) { return m.size(0) > 1 ? m.ld() : m.size(1); }

ScaledOperand operand_of(const char* op, const char* name, const ExecCtx& ctx, const quant::QTensor& q) {
  FP8T_CHECK(q.rowwise.defined(), "{}: operand {} has no row-wise payload (a Dgrad or Wgrad operand is "
             "x.transposed() of a tensor with a column-wise payload)", op, name);
  quant::check_spec(q.spec, op);
  FP8T_CHECK(q.groups >= 1 && q.rows % q.groups == 0, "{}: operand {} has {} rows in {} groups", op, name, q.rows,
             q.groups);
  FP8T_CHECK(q.rowwise.codes.is_contiguous() && q.rowwise.scales.is_contiguous() &&
                 q.rowwise.codes.nbytes() == quant::code_bytes(q.format(), q.rows * q.cols) &&
                 q.rowwise.scales.numel() == q.rowwise_grid().numel(),
             "{}: operand {} ([{}, {}] {}) holds {} code bytes and {} scales, which do not match its shape", op, name,
             q.rows, q.cols, quant::format_name(q.format()), q.rowwise.codes.nbytes(), q.rowwise.scales.numel());
  check::on_device(op, ctx, {&q.rowwise.codes, &q.rowwise.scales});
  ScaledOperand o;
  o.format = q.format();
  o.granularity = q.granularity();
  o.layout = q.rowwise.layout;
  o.rows = q.rows;
  o.cols = q.cols;
  o.groups = q.groups;
  o.codes = q.rowwise.codes.raw();
  o.scales = q.rowwise.scales.data<float>();
  return o;
}

void check_options(const char* op, const ScaledGemmOptions& options) {
  FP8T_CHECK(!options.numerics.accumulate,
             "{}: set ScaledGemmOptions::accumulate (d += a·bᵀ) rather than numerics.accumulate", op);
}

void check_offsets(const char* op, const char* name, const ExecCtx& ctx, const Tensor& offsets, int64_t groups) {
  check::vector(op, name, offsets, groups + 1);
  check::dtype(op, name, offsets, DType::I32);
  check::on_device(op, ctx, {&offsets});
}

}  // namespace

void scaled_gemm(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b, const Tensor& d,
                 const ScaledGemmOptions& options) {
  const char* op = "scaled_gemm";
  check_options(op, options);
  ScaledGemmProblem p;
  p.a = operand_of(op, "a", ctx, a);
  p.b = operand_of(op, "b", ctx, b);
  FP8T_CHECK(a.groups == 1 && b.groups == 1, "{}: operands with row groups ({} and {}) go to scaled_gemm_grouped", op,
             a.groups, b.groups);
  FP8T_CHECK(a.cols == b.cols, "{}: a is [{}, {}] and b is [{}, {}]; d = a·bᵀ needs the same K", op, a.rows, a.cols,
             b.rows, b.cols);
  check::matrix(op, "d", d, a.rows, b.rows);
  FP8T_CHECK(d.dtype() == DType::F32 || d.dtype() == DType::BF16, "{}: d must be F32 or BF16, got {}", op,
             dtype_name(d.dtype()));
  check::on_device(op, ctx, {&d});
  p.m = a.rows;
  p.n = b.rows;
  p.k = a.cols;
  p.out_dtype = d.dtype();
  p.ldd = ld_of(d);
  p.accumulate = options.accumulate;
  p.numerics = options.numerics;
  launcher(ctx, &OpTable::scaled_gemm, op)(ctx, p, d.raw());
}

void scaled_gemm_grouped(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b, const Tensor& offsets,
                         const Tensor& d, const ScaledGemmOptions& options) {
  const char* op = "scaled_gemm_grouped";
  check_options(op, options);
  ScaledGemmProblem p;
  p.a = operand_of(op, "a", ctx, a);
  p.b = operand_of(op, "b", ctx, b);
  FP8T_CHECK(a.groups == 1, "{}: a holds the experts' rows by offsets, not row groups (got {} groups)", op, a.groups);
  FP8T_CHECK(a.cols == b.cols, "{}: a is [{}, {}] and b is [{}, {}]; d = a·bᵀ needs the same K", op, a.rows, a.cols,
             b.rows, b.cols);
  const int64_t experts = b.groups, n = b.group_rows();
  check_offsets(op, "offsets", ctx, offsets, experts);
  check::matrix(op, "d", d, a.rows, n);
  FP8T_CHECK(d.dtype() == DType::F32 || d.dtype() == DType::BF16, "{}: d must be F32 or BF16, got {}", op,
             dtype_name(d.dtype()));
  check::on_device(op, ctx, {&d});
  p.m = a.rows;
  p.n = n;
  p.k = a.cols;
  p.num_groups = static_cast<int>(experts);
  p.out_dtype = d.dtype();
  p.ldd = ld_of(d);
  p.accumulate = options.accumulate;
  p.numerics = options.numerics;
  launcher(ctx, &OpTable::scaled_gemm_grouped, op)(ctx, p, offsets.data<int32_t>(), d.raw());
}

void scaled_gemm_grouped_k(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b,
                           const Tensor& k_offsets, const Tensor& d, const ScaledGemmOptions& options) {
  const char* op = "scaled_gemm_grouped_k";
  check_options(op, options);
  ScaledGemmProblem p;
  p.a = operand_of(op, "a", ctx, a);
  p.b = operand_of(op, "b", ctx, b);
  FP8T_CHECK(a.groups == 1 && b.groups == 1, "{}: operands with row groups ({} and {}) are not K-grouped", op,
             a.groups, b.groups);
  FP8T_CHECK(a.cols == b.cols, "{}: a is [{}, {}] and b is [{}, {}]; d = a·bᵀ needs the same K", op, a.rows, a.cols,
             b.rows, b.cols);
  const bool per_tensor = a.granularity().per_tensor && b.granularity().per_tensor;
  FP8T_CHECK(
      per_tensor || (!a.granularity().per_tensor && !b.granularity().per_tensor && a.granularity().block_rows == 1 &&
                     b.granularity().block_rows == 1 && a.granularity().block_cols == b.granularity().block_cols),
      "{}: both operands must be tiled 1xG along K with the same G, or both per tensor; got {} and {}", op,
      a.granularity().name(), b.granularity().name());
  FP8T_CHECK(k_offsets.defined() && k_offsets.dim() == 1 && k_offsets.size(0) >= 2,
             "{}: k_offsets must be an I32 [E + 1] vector with E >= 1", op);
  const int64_t experts = k_offsets.size(0) - 1;
  check_offsets(op, "k_offsets", ctx, k_offsets, experts);
  FP8T_CHECK(d.defined() && d.dim() == 3 && d.size(0) == experts && d.size(1) == a.rows && d.size(2) == b.rows &&
                 d.is_contiguous() && d.dtype() == DType::F32,
             "{}: d must be a contiguous F32 [{}, {}, {}] tensor, got {}", op, experts, a.rows, b.rows,
             d.defined() ? d.str() : std::string("an undefined tensor"));
  check::on_device(op, ctx, {&d});
  p.m = a.rows;
  p.n = b.rows;
  p.k = a.cols;
  p.num_groups = static_cast<int>(experts);
  p.out_dtype = DType::F32;
  p.ldd = b.rows;
  p.accumulate = options.accumulate;
  p.numerics = options.numerics;
  launcher(ctx, &OpTable::scaled_gemm_grouped_k, op)(ctx, p, k_offsets.data<int32_t>(), d.raw());
}

}  // namespace fp8train::ops
