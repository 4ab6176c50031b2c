// Sum of squares per segment of a 1-D tensor, in FP64 and in a fixed order — the global gradient norm over a
// gradient arena (one segment per named parameter, in registration order) without depending on the thread count:
//   out[s] = Σ_{i ∈ [begin_s, end_s)} x_i²,   summed as: chunks of `chunk` elements from begin_s, each chunk added
//            sequentially in FP64 starting from 0, the chunk sums added in chunk order starting from 0.
//   x: F32 or F64 [n], contiguous; bounds: I64 [segments, 2] (begin, end) with 0 <= begin <= end <= n; out: F64
//   [segments]. Segments may leave gaps (arena padding) and may repeat.
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

struct SumSquaresProblem {
  DType dtype = DType::F32;  // of x
  int64_t n = 0;             // elements of x
  int64_t segments = 0;
  int64_t chunk = 16384;  // elements per partial sum
};

// The chunk the gradient-norm reduction has always used (its bits depend on it).
inline constexpr int64_t kSumSquaresChunk = 16384;

void sum_squares_segments(const ExecCtx& ctx, const Tensor& x, const Tensor& bounds, const Tensor& out,
                          int64_t chunk = kSumSquaresChunk);

}  // namespace fp8train::ops
