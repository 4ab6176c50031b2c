// CUDA segmented sum of squares (order in ops/sum_squares.h), bit-exact against the CPU: x F32 or F64 [n]; bounds
// i64 [segments, 2]; out f64 [segments]. The chunks of every segment are numbered globally (first[s] = segment s's
// first chunk, from the launcher), and two kernels reproduce the CPU's order:
//   chunk_sums      one thread per chunk, accumulating its <= chunk elements sequentially in FP64 from 0 (as the
//                   CPU does). A CTA owns 256 consecutive chunks; their elements arrive through a shared-memory
//                   tile of 256 chunks × W elements that the CTA loads cooperatively, W consecutive threads per
//                   chunk row (coalesced), before each thread adds its own row in order; the next step's loads
//                   are issued (into registers) before the current step is summed.
//   segment_totals  one CTA per segment: the segment's chunk sums staged 256 at a time in shared memory and added
//                   in chunk order from 0 by one thread.
// Every add is a separate round-to-nearest FP64 operation (__dmul_rn / __dadd_rn; the product of two FP32 values is
// exact in FP64 anyway), as on the CPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/train_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kChunksPerCta = 256;  // = threads per CTA: one chunk per thread

template <class T>
constexpr int kTileWidth = sizeof(T) == 4 ? 32 : 16;  // elements per chunk row and step (33.8 / 34.8 KB of tile)

template <class T>
__global__ void __launch_bounds__(kChunksPerCta, 2) chunk_sums_kernel(SumSquaresArgs a) {
  constexpr int W = kTileWidth<T>;
  __shared__ T tile[kChunksPerCta][W + 1];  // +1: thread t reading row t, column i hits bank (t + i) % 32
  __shared__ int64_t begin[kChunksPerCta], len[kChunksPerCta];
  __shared__ unsigned long long max_len;
  const T* x = static_cast<const T*>(a.x);
  const int t = threadIdx.x;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunksPerCta;
  const int64_t c = c0 + t;
  if (t == 0) max_len = 0;
  int64_t my_len = 0;
  if (c < a.chunks) {
    // The segment s with first[s] <= c < first[s + 1] (empty segments have first[s] == first[s + 1]).
    int64_t lo = 0, hi = a.segments;  // first[lo] <= c < first[hi]
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (a.first[mid] <= c)
        lo = mid;
      else
        hi = mid;
    }
    const int64_t b = a.bounds[2 * lo] + (c - a.first[lo]) * a.chunk;
    const int64_t e = a.bounds[2 * lo + 1];
    my_len = e - b < a.chunk ? e - b : a.chunk;
    begin[t] = b;
  } else {
    begin[t] = 0;
  }
  len[t] = my_len;
  __syncthreads();
  atomicMax(&max_len, static_cast<unsigned long long>(my_len));  // integer max: order-free
  __syncthreads();
  const int64_t steps_len = static_cast<int64_t>(max_len);

  // This thread's share of a step's tile (elements q = t + r·256 of the 256 × W tile), loaded a step ahead so
  // the loads of step k + W are in flight while the rows of step k are summed.
  // As 256 is a multiple of W, the thread's column i0 is the same in every row it loads.
  constexpr int kRowStep = kChunksPerCta / W;
  const int i0 = t % W, j0 = t / W;
  T staged[W];
  auto load_step = [&](int64_t k) {
    const int64_t e = k + i0;
#pragma unroll
    for (int r = 0; r < W; ++r) {
      const int j = j0 + r * kRowStep;
      staged[r] = e < len[j] ? x[begin[j] + e] : T(0);
    }
  };
  double acc = 0.0;
  if (steps_len > 0) load_step(0);
  for (int64_t k = 0; k < steps_len; k += W) {
#pragma unroll
    for (int r = 0; r < W; ++r) tile[j0 + r * kRowStep][i0] = staged[r];
    __syncthreads();
    if (k + W < steps_len) load_step(k + W);
    const int64_t left = my_len - k;
    if (left >= W) {
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const double v = static_cast<double>(tile[t][i]);
        acc = __dadd_rn(acc, __dmul_rn(v, v));
      }
    } else {
      for (int i = 0; i < left; ++i) {
        const double v = static_cast<double>(tile[t][i]);
        acc = __dadd_rn(acc, __dmul_rn(v, v));
      }
    }
    __syncthreads();
  }
  if (c < a.chunks) a.partial[c] = acc;
}

__global__ void __launch_bounds__(kChunksPerCta) segment_totals_kernel(SumSquaresArgs a) {
  __shared__ double staged[kChunksPerCta];
  const int64_t s = blockIdx.x;
  const int64_t b = a.first[s], e = a.first[s + 1];
  double total = 0.0;
  for (int64_t k = b; k < e; k += kChunksPerCta) {
    const int64_t i = k + threadIdx.x;
    staged[threadIdx.x] = i < e ? a.partial[i] : 0.0;
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t count = e - k < kChunksPerCta ? e - k : kChunksPerCta;
      for (int64_t j = 0; j < count; ++j) total = __dadd_rn(total, staged[j]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) a.out[s] = total;
}

}  // namespace

cudaError_t launch_sum_squares(const SumSquaresArgs& a, cudaStream_t stream) {
  if (a.segments <= 0) return cudaSuccess;
  if (a.segments > 0x7FFFFFFF || (a.chunks + kChunksPerCta - 1) / kChunksPerCta > 0x7FFFFFFF)
    return cudaErrorInvalidValue;
  if (a.chunks > 0) {
    const unsigned grid = static_cast<unsigned>((a.chunks + kChunksPerCta - 1) / kChunksPerCta);
    if (a.f64)
      chunk_sums_kernel<double><<<grid, kChunksPerCta, 0, stream>>>(a);
    else
      chunk_sums_kernel<float><<<grid, kChunksPerCta, 0, stream>>>(a);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  segment_totals_kernel<<<static_cast<unsigned>(a.segments), kChunksPerCta, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
