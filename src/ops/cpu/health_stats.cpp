// CPU numerics-health reductions (ops/health_stats.h): the arithmetic recipe::measure_accuracy and
// recipe::measure_health have always used on the host, now behind the op table so the same call reduces on a GPU.
//   row_error_sums            rows in parallel, each row's FP64 sums in column order (no FMA contraction: this
//                             file is built with -ffp-contract=off)
//   quantized_operand_counts  rows of q in parallel, integer counts; the scale range in the grid's row-major order
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/health_stats.h"
#include "quant/quant.h"

namespace fp8train::ops::cpu {
namespace {

template <class Y, class R>
void row_error_sums_impl(const RowErrorSumsProblem& p, const Y* y, const R* ref, double* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.rows; ++i) {
    const Y* yr = y + i * p.ld_y;
    const R* rr = ref + i * p.ld_ref;
    double e = 0, r2 = 0;
    for (int64_t j = 0; j < p.cols; ++j) {
      const double r = static_cast<double>(load(rr[j])), d = static_cast<double>(load(yr[j])) - r;
      e += d * d;
      r2 += r * r;
    }
    out[2 * i] = e;
    out[2 * i + 1] = r2;
  }
}

template <class X>
void operand_counts_impl(const OperandCountsProblem& p, const X* x, const uint8_t* codes, const float* scales,
                         int64_t* counts, float* scale_range) {
  const quant::ScaleGrid& grid = p.grid;
  const quant::ScaleStrides st = grid.strides();
  const int64_t rows = grid.rows, cols = grid.cols;
  float smin = std::numeric_limits<float>::infinity(), smax = 0.0f;
  const int64_t sr = grid.block_rows_per_group(), sc = grid.block_cols();
  for (int64_t g = 0; g < grid.groups; ++g)
    for (int64_t br = 0; br < sr; ++br)
      for (int64_t bc = 0; bc < sc; ++bc) {
        const float s = scales[g * st.group + br * st.row + bc * st.col];
        if (!std::isfinite(s)) continue;
        smin = std::min(smin, s);
        smax = std::max(smax, s);
      }
  int64_t nonzero = 0, saturated = 0, underflow = 0;
#pragma omp parallel reduction(+ : nonzero, saturated, underflow)
  {
    std::vector<uint16_t> row_codes(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      quant::unpack_row_codes(codes, p.format, cols, r, row_codes.data());
      for (int64_t c = 0; c < cols; ++c) {
        const float v = static_cast<float>(load(p.transposed ? x[c * p.ld_x + r] : x[r * p.ld_x + c]));
        if (v == 0.0f || std::isnan(v)) continue;
        ++nonzero;
        if (std::fabs(v) / scales[grid.offset_of(r, c)] > p.limit) ++saturated;
        if (quant::decode(p.format, row_codes[static_cast<size_t>(c)]) == 0.0f) ++underflow;
      }
    }
  }
  counts[0] = nonzero;
  counts[1] = saturated;
  counts[2] = underflow;
  scale_range[0] = smin;
  scale_range[1] = smax;
}

}  // namespace

void row_error_sums(const ExecCtx&, const RowErrorSumsProblem& p, const void* y, const void* y_ref, double* out) {
  dispatch_storage(p.y_dtype, "row_error_sums", [&](auto y_tag) {
    using Y = decltype(y_tag);
    dispatch_storage(p.ref_dtype, "row_error_sums", [&](auto r_tag) {
      using R = decltype(r_tag);
      row_error_sums_impl<Y, R>(p, static_cast<const Y*>(y), static_cast<const R*>(y_ref), out);
    });
  });
}

void quantized_operand_counts(const ExecCtx&, const OperandCountsProblem& p, const void* x, const void* codes,
                              const float* scales, int64_t* counts, float* scale_range) {
  dispatch_storage(p.x_dtype, "quantized_operand_counts", [&](auto tag) {
    using X = decltype(tag);
    operand_counts_impl<X>(p, static_cast<const X*>(x), static_cast<const uint8_t*>(codes), scales, counts,
                           scale_range);
  });
}

}  // namespace fp8train::ops::cpu
