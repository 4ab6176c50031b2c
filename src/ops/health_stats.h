// The reductions behind the numerics-health samples (recipe/health.h), so a sampled step reads back a few numbers
// per GEMM instead of copying its operands and products to the host.
//
// row_error_sums(y, y_ref, out): a GEMM's product y against its FP32 reference, per row i
//   out[i, 0] = Σ_j (y[i, j] − y_ref[i, j])²,   out[i, 1] = Σ_j y_ref[i, j]²
//   each value widened to FP64 (d = double(y) − double(y_ref)), every product and sum one round-to-nearest FP64
//   operation. y, y_ref: [rows, cols] matrix views (unit column stride) of F32, BF16 or F64, each its own dtype;
//   out: F64 [rows, 2], contiguous. The CPU adds each row in column order (recipe::measure_accuracy's order, bit for
//   bit); CUDA gives each row to a warp (lane l sums columns l, l + 32, ... in order, then a fixed shuffle tree), so
//   the two differ in the last bits of the FP64 sums; each is deterministic.
//
// quantized_operand_counts(x, q, transposed, counts, scale_range): what quantizing x into q did (recipe::
// OperandHealth). Element (r, c) of q's row-wise payload ([q.rows, q.cols]) quantizes x[r, c], or x[c, r] with
// `transposed` (q quantizes xᵀ; x is then [q.cols, q.rows]). With v the element of x as FP32 (F64 rounded to
// nearest), s = the scale of (r, c) in q's scale grid (any granularity, groups, RowMajor or GemmNative) and z its
// code decoded without the scale:
//   counts I64 [3]       nonzero    v != 0 and not NaN
//                        saturated  of those, |v| / s > saturation_limit(format) (FP32 division)
//                        underflow  of those, z == 0
//   scale_range F32 [2]  the smallest and the largest finite scale of the grid (padding excluded), starting from
//                        +inf and 0 (so no finite scale leaves [+inf, 0]).
// Formats: E4M3, E5M2, INT8 (one byte per code), E5M6 (12-bit codes packed 8 per 12 bytes), BF16 (16-bit codes).
// x: F32, BF16 or F64 matrix view. Integer counts are exact on every backend. CUDA takes the scale range over the
// grid's entries with order-free integer min / max on the floats' ordered bit patterns; the only case where that
// could differ from the CPU's std::min / std::max sweep is a grid holding both +0 and −0, which no quantizer makes
// (every scale is at least kMinAmax / fmax).
#pragma once
#include <cstdint>

#include "ops/op_table.h"
#include "quant/qtensor.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

struct RowErrorSumsProblem {
  DType y_dtype = DType::F32;
  DType ref_dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t ld_y = 0, ld_ref = 0;  // row strides (elements)
};

struct OperandCountsProblem {
  quant::Format format = quant::Format::E4M3;
  quant::ScaleGrid grid;  // of q's row-wise payload: rows × cols elements
  DType x_dtype = DType::F32;
  int64_t ld_x = 0;  // row stride of x (elements)
  bool transposed = false;
  float limit = 0;  // saturation_limit(format)
};

// |x| / scale beyond this saturates: the format's largest finite value plus half its ulp (a value that would have
// rounded above the largest code; a scale one float ulp off its ideal value must not count).
float saturation_limit(quant::Format format);

void row_error_sums(const ExecCtx& ctx, const Tensor& y, const Tensor& y_ref, const Tensor& out);

void quantized_operand_counts(const ExecCtx& ctx, const Tensor& x, const quant::QTensor& q, bool transposed,
                              const Tensor& counts, const Tensor& scale_range);

}  // namespace fp8train::ops
