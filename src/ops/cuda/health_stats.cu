// CUDA numerics-health reductions (ops/health_stats.h; launch functions in health_launch.h).
//   row_error_sums   one warp per row: lane l adds columns l, l + 32, ... in order, the 32 partial sums are then
//                    added by a fixed shuffle tree; every FP64 product and sum one round-to-nearest operation
//                    (__dmul_rn / __dadd_rn: no FMA contraction). Deterministic; the CPU's column order differs,
//                    so the sums agree to the last bits only.
//   operand counts   32 × 32 tiles of the payload, CTAs looping over them: the codes are read along the payload's
//                    rows (coalesced) into a shared-memory tile of "decodes to zero" flags, then x is read along
//                    its own rows (coalesced, the payload's columns when transposed) and each element counted by
//                    the CPU's rules (FP32 division __fdiv_rn, as the host's IEEE division). Per-thread counts are
//                    reduced in the CTA and added to the output with 64-bit integer atomics (exact, order-free).
//   scale range      over the scale grid's entries (padding excluded), finite ones only: integer atomicMin / Max
//                    on the floats' order-preserving bit keys, then one thread turns the keys back into floats.
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/formats.h"
#include "ops/cuda/health_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kWarpsPerCta = 8;
constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;  // blockDim = (32, 8)
constexpr int kMaxCountCtas = 2048;  // enough to fill 132 SMs; CTAs loop over the tiles beyond
constexpr int kRangeThreads = 256;
constexpr int kMaxRangeCtas = 264;

__device__ __forceinline__ double widen(float v) { return static_cast<double>(v); }
__device__ __forceinline__ double widen(uint16_t v) { return static_cast<double>(__uint_as_float(uint32_t{v} << 16)); }
__device__ __forceinline__ double widen(double v) { return v; }

__device__ __forceinline__ float as_f32(float v) { return v; }
__device__ __forceinline__ float as_f32(uint16_t v) { return __uint_as_float(uint32_t{v} << 16); }
__device__ __forceinline__ float as_f32(double v) { return __double2float_rn(v); }

template <class Y, class R>
__global__ void __launch_bounds__(kWarpsPerCta * 32) row_error_sums_kernel(RowErrorSumsArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (row >= a.rows) return;  // the whole warp
  const Y* y = static_cast<const Y*>(a.y) + row * a.ld_y;
  const R* r = static_cast<const R*>(a.ref) + row * a.ld_ref;
  double e = 0.0, r2 = 0.0;
#pragma unroll 4
  for (int64_t j = lane; j < a.cols; j += 32) {
    const double rv = widen(r[j]);
    const double d = __dsub_rn(widen(y[j]), rv);
    e = __dadd_rn(e, __dmul_rn(d, d));
    r2 = __dadd_rn(r2, __dmul_rn(rv, rv));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    e = __dadd_rn(e, __shfl_down_sync(0xFFFFFFFFu, e, off));
    r2 = __dadd_rn(r2, __shfl_down_sync(0xFFFFFFFFu, r2, off));
  }
  if (lane == 0) {
    a.out[2 * row] = e;
    a.out[2 * row + 1] = r2;
  }
}

// Whether the code of payload element `flat` decodes to zero (quant::decode's rules).
__device__ __forceinline__ bool code_is_zero(const OperandCountsArgs& a, int64_t flat) {
  switch (a.codes_kind) {
    case HealthCodes::E4M3:
      return num::e4m3_decode(a.codes[flat]) == 0.0f;
    case HealthCodes::E5M2:
      return num::e5m2_decode(a.codes[flat]) == 0.0f;
    case HealthCodes::INT8:
      return static_cast<int8_t>(a.codes[flat]) == 0;
    case HealthCodes::BF16:
      return num::bf16_decode(reinterpret_cast<const uint16_t*>(a.codes)[flat]) == 0.0f;
    case HealthCodes::E5M6: {
      // Value i of a group of 8 holds bits [12·i, 12·i + 12) of the group's 12 little-endian bytes.
      const int bit = 12 * static_cast<int>(flat % 8);
      const uint8_t* b = a.codes + 12 * (flat / 8) + bit / 8;
      const uint32_t code = ((uint32_t{b[0]} | (uint32_t{b[1]} << 8)) >> (bit % 8)) & 0xFFFu;
      return num::e5m6_decode(static_cast<uint16_t>(code)) == 0.0f;
    }
  }
  return false;
}

// The scale of payload element (r, c) (quant::ScaleGrid::offset_of).
__device__ __forceinline__ float scale_at(const OperandCountsArgs& a, int r, int c) {
  const int rg = static_cast<int>(a.group_rows);
  const int g = rg > 0 ? r / rg : 0, rl = rg > 0 ? r - g * rg : 0;
  int64_t off = g * a.stride_group;
  if (!a.per_tensor)
    off += (rl / static_cast<int>(a.block_rows)) * a.stride_row + (c / static_cast<int>(a.block_cols)) * a.stride_col;
  return a.scales[off];
}

template <class X, bool kTransposed>
__global__ void __launch_bounds__(kTile* kTileRowsPerPass) operand_counts_kernel(OperandCountsArgs a) {
  __shared__ uint8_t zero[kTile][kTile + 1];
  __shared__ unsigned long long partial[kTileRowsPerPass][3];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const X* x = static_cast<const X*>(a.x);
  const int64_t tiles_c = (a.cols + kTile - 1) / kTile;
  const int64_t tiles = (a.rows + kTile - 1) / kTile * tiles_c;
  unsigned long long nonzero = 0, saturated = 0, underflow = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int r0 = static_cast<int>(t / tiles_c) * kTile, c0 = static_cast<int>(t % tiles_c) * kTile;
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRowsPerPass) {
      const int r = r0 + ty + k, c = c0 + tx;
      if (r < a.rows && c < a.cols) zero[ty + k][tx] = code_is_zero(a, static_cast<int64_t>(r) * a.cols + c);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; k += kTileRowsPerPass) {
      const int rl = kTransposed ? tx : ty + k, cl = kTransposed ? ty + k : tx;
      const int r = r0 + rl, c = c0 + cl;
      if (r >= a.rows || c >= a.cols) continue;
      const float v =
          as_f32(kTransposed ? x[static_cast<int64_t>(c) * a.ld_x + r] : x[static_cast<int64_t>(r) * a.ld_x + c]);
      if (v == 0.0f || isnan(v)) continue;
      ++nonzero;
      if (__fdiv_rn(fabsf(v), scale_at(a, r, c)) > a.limit) ++saturated;
      if (zero[rl][cl]) ++underflow;
    }
    __syncthreads();
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    nonzero += __shfl_down_sync(0xFFFFFFFFu, nonzero, off);
    saturated += __shfl_down_sync(0xFFFFFFFFu, saturated, off);
    underflow += __shfl_down_sync(0xFFFFFFFFu, underflow, off);
  }
  if (tx == 0) {
    partial[ty][0] = nonzero;
    partial[ty][1] = saturated;
    partial[ty][2] = underflow;
  }
  __syncthreads();
  if (tx < 3 && ty == 0) {
    unsigned long long s = 0;
    for (int w = 0; w < kTileRowsPerPass; ++w) s += partial[w][tx];
    if (s != 0) atomicAdd(a.counts + tx, s);
  }
}

// A float's bits mapped so that unsigned integer order is the floats' order (−0 just below +0).
__device__ __forceinline__ unsigned order_key(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

__global__ void scale_range_init_kernel(OperandCountsArgs a) {
  a.keys[0] = order_key(__int_as_float(0x7F800000));  // +inf
  a.keys[1] = order_key(0.0f);
}

__global__ void __launch_bounds__(kRangeThreads) scale_range_kernel(OperandCountsArgs a) {
  __shared__ unsigned lo_w[kRangeThreads / 32], hi_w[kRangeThreads / 32];
  const int64_t per_group = a.grid_rows * a.grid_cols, n = a.groups * per_group;
  unsigned lo = 0xFFFFFFFFu, hi = 0u;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kRangeThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kRangeThreads) {
    const int64_t g = i / per_group, rem = i - g * per_group, br = rem / a.grid_cols, bc = rem - br * a.grid_cols;
    const float s = a.scales[g * a.stride_group + br * a.stride_row + bc * a.stride_col];
    if (!isfinite(s)) continue;
    const unsigned k = order_key(s);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned l = __shfl_down_sync(0xFFFFFFFFu, lo, off), h = __shfl_down_sync(0xFFFFFFFFu, hi, off);
    lo = l < lo ? l : lo;
    hi = h > hi ? h : hi;
  }
  if ((threadIdx.x & 31) == 0) {
    lo_w[threadIdx.x >> 5] = lo;
    hi_w[threadIdx.x >> 5] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kRangeThreads / 32; ++w) {
      lo = lo_w[w] < lo ? lo_w[w] : lo;
      hi = hi_w[w] > hi ? hi_w[w] : hi;
    }
    atomicMin(a.keys, lo);
    atomicMax(a.keys + 1, hi);
  }
}

__global__ void scale_range_finish_kernel(OperandCountsArgs a) {
  a.scale_range[0] = key_float(a.keys[0]);
  a.scale_range[1] = key_float(a.keys[1]);
}

template <class Y>
cudaError_t row_sums_with(const RowErrorSumsArgs& a, unsigned grid, cudaStream_t stream) {
  constexpr unsigned threads = kWarpsPerCta * 32;
  switch (a.ref_type) {
    case HealthType::F32:
      row_error_sums_kernel<Y, float><<<grid, threads, 0, stream>>>(a);
      break;
    case HealthType::BF16:
      row_error_sums_kernel<Y, uint16_t><<<grid, threads, 0, stream>>>(a);
      break;
    case HealthType::F64:
      row_error_sums_kernel<Y, double><<<grid, threads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

template <class X>
void counts_with(const OperandCountsArgs& a, unsigned grid, cudaStream_t stream) {
  const dim3 block(kTile, kTileRowsPerPass);
  if (a.transposed)
    operand_counts_kernel<X, true><<<grid, block, 0, stream>>>(a);
  else
    operand_counts_kernel<X, false><<<grid, block, 0, stream>>>(a);
}

}  // namespace

cudaError_t launch_row_error_sums(const RowErrorSumsArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  const int64_t ctas = (a.rows + kWarpsPerCta - 1) / kWarpsPerCta;
  if (ctas > 0x7FFFFFFF) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(ctas);
  switch (a.y_type) {
    case HealthType::F32:
      return row_sums_with<float>(a, grid, stream);
    case HealthType::BF16:
      return row_sums_with<uint16_t>(a, grid, stream);
    case HealthType::F64:
      return row_sums_with<double>(a, grid, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_operand_counts(const OperandCountsArgs& a, cudaStream_t stream) {
  if (a.rows > 0x7FFFFFFF || a.cols > 0x7FFFFFFF) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(a.counts, 0, 3 * sizeof(unsigned long long), stream);
  if (e != cudaSuccess) return e;
  const int64_t tiles = (a.rows + kTile - 1) / kTile * ((a.cols + kTile - 1) / kTile);
  if (tiles > 0) {
    const unsigned grid = static_cast<unsigned>(tiles < kMaxCountCtas ? tiles : kMaxCountCtas);
    switch (a.x_type) {
      case HealthType::F32:
        counts_with<float>(a, grid, stream);
        break;
      case HealthType::BF16:
        counts_with<uint16_t>(a, grid, stream);
        break;
      case HealthType::F64:
        counts_with<double>(a, grid, stream);
        break;
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  scale_range_init_kernel<<<1, 1, 0, stream>>>(a);
  const int64_t n = a.groups * a.grid_rows * a.grid_cols;
  if (n > 0) {
    const int64_t ctas = (n + kRangeThreads - 1) / kRangeThreads;
    scale_range_kernel<<<static_cast<unsigned>(ctas < kMaxRangeCtas ? ctas : kMaxRangeCtas), kRangeThreads, 0,
                         stream>>>(a);
  }
  scale_range_finish_kernel<<<1, 1, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
