// Entry points of the numerics-health reductions (see health_stats.h).
#include "ops/health_stats.h"

#include "ops/checks.h"

namespace fp8train::ops {

float saturation_limit(quant::Format format) {
  switch (format) {
    case quant::Format::E4M3:
      return 464.0f;  // 448 + 32 / 2
    case quant::Format::E5M2:
      return 61440.0f;  // 57344 + 8192 / 2
    case quant::Format::E5M6:
      return 65280.0f;  // 65024 + 512 / 2
    case quant::Format::INT8:
      return 127.5f;
    case quant::Format::BF16:
      return quant::format_max(quant::Format::BF16);
  }
  FP8T_FAIL("saturation_limit: invalid format value {}", static_cast<int>(format));
}

void row_error_sums(const ExecCtx& ctx, const Tensor& y, const Tensor& y_ref, const Tensor& out) {
  const char* op = "row_error_sums";
  check::matrix(op, "y", y);
  check::matrix(op, "y_ref", y_ref, y.size(0), y.size(1));
  check::storage_dtype(op, "y", y);
  check::storage_dtype(op, "y_ref", y_ref);
  check::matrix(op, "out", out, y.size(0), 2);
  check::dtype(op, "out", out, DType::F64);
  FP8T_CHECK(out.is_contiguous(), "{}: out must be contiguous, got {}", op, out.str());
  check::on_device(op, ctx, {&y, &y_ref, &out});
  RowErrorSumsProblem p;
  p.y_dtype = y.dtype();
  p.ref_dtype = y_ref.dtype();
  p.rows = y.size(0);
  p.cols = y.size(1);
  p.ld_y = y.ld();
  p.ld_ref = y_ref.ld();
  if (p.rows == 0) return;
  launcher(ctx, &OpTable::row_error_sums, op)(ctx, p, y.raw(), y_ref.raw(), out.data<double>());
}

void quantized_operand_counts(const ExecCtx& ctx, const Tensor& x, const quant::QTensor& q, bool transposed,
                              const Tensor& counts, const Tensor& scale_range) {
  const char* op = "quantized_operand_counts";
  FP8T_CHECK(q.rowwise.defined(), "{}: the quantized operand has no row-wise payload", op);
  const int64_t xr = transposed ? q.cols : q.rows, xc = transposed ? q.rows : q.cols;
  FP8T_CHECK(x.defined() && x.dim() == 2 && x.size(0) == xr && x.size(1) == xc,
             "{}: operand {} does not match its quantization [{}, {}]{}", op,
             x.defined() ? x.str() : std::string("(undefined)"), q.rows, q.cols, transposed ? " (transposed)" : "");
  check::matrix(op, "x", x);
  check::storage_dtype(op, "x", x);
  const quant::ScaleGrid grid = q.rowwise_grid();
  const Tensor& codes = q.rowwise.codes;
  const int64_t n = q.rows * q.cols;
  if (q.spec.format == quant::Format::E5M6) {
    FP8T_CHECK(codes.dtype() == DType::U8 && codes.is_contiguous() &&
                   codes.numel() == static_cast<int64_t>(quant::code_bytes(quant::Format::E5M6, n)),
               "{}: E5M6 codes of [{}, {}] must be {} contiguous u8 bytes, got {}", op, q.rows, q.cols,
               quant::code_bytes(quant::Format::E5M6, n), codes.str());
  } else {
    const DType want = q.spec.format == quant::Format::BF16 ? DType::BF16 : DType::U8;
    FP8T_CHECK(codes.dtype() == want && codes.is_contiguous() && codes.numel() == n,
               "{}: {} codes of [{}, {}] must be a contiguous {} tensor of as many elements, got {}", op,
               quant::format_name(q.spec.format), q.rows, q.cols, dtype_name(want), codes.str());
  }
  FP8T_CHECK(q.rowwise.layout == grid.layout, "{}: the payload's scale layout disagrees with its grid", op);
  FP8T_CHECK(q.rowwise.scales.dtype() == DType::F32 && q.rowwise.scales.is_contiguous() &&
                 q.rowwise.scales.numel() == grid.numel(),
             "{}: the scales must be a contiguous f32 tensor of the scale grid's {} entries, got {}", op, grid.numel(),
             q.rowwise.scales.str());
  check::vector(op, "counts", counts, 3);
  check::dtype(op, "counts", counts, DType::I64);
  check::vector(op, "scale_range", scale_range, 2);
  check::dtype(op, "scale_range", scale_range, DType::F32);
  check::on_device(op, ctx, {&x, &codes, &q.rowwise.scales, &counts, &scale_range});
  OperandCountsProblem p;
  p.format = q.spec.format;
  p.grid = grid;
  p.x_dtype = x.dtype();
  p.ld_x = x.ld();
  p.transposed = transposed;
  p.limit = saturation_limit(q.spec.format);
  launcher(ctx, &OpTable::quantized_operand_counts, op)(ctx, p, x.raw(), codes.raw(), q.rowwise.scales.data<float>(),
                                                        counts.data<int64_t>(), scale_range.data<float>());
}

}  // namespace fp8train::ops
