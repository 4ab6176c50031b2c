// Device helpers of the elementwise family's kernels: F32 / BF16 (uint16_t codes) loads that widen to FP32 and
// stores that round once to nearest even (num::bf16_encode, the CPU's rounding bit for bit, NaN kept a NaN),
// one element or 8 consecutive ones (16-byte vector accesses: the pointer must be 16-byte aligned).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "numerics/formats.h"
#include "ops/cuda/elementwise_launch.h"

namespace fp8train::ops::cuda::ew {

__device__ __forceinline__ float bf16_widen(uint32_t code) { return __uint_as_float(code << 16); }

__device__ __forceinline__ float ld1(const float* p) { return *p; }
__device__ __forceinline__ float ld1(const uint16_t* p) { return bf16_widen(*p); }
__device__ __forceinline__ void st1(float* p, float v) { *p = v; }
__device__ __forceinline__ void st1(uint16_t* p, float v) { *p = num::bf16_encode(v); }

__device__ __forceinline__ void ld8(const float* p, float v[8]) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  const float4 y = *reinterpret_cast<const float4*>(p + 4);
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
}
__device__ __forceinline__ void ld8(const uint16_t* p, float v[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = __uint_as_float(w[k] << 16);
    v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void st8(float* p, const float v[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(num::bf16_encode(lo)) | (static_cast<uint32_t>(num::bf16_encode(hi)) << 16);
}
__device__ __forceinline__ void st8(uint16_t* p, const float v[8]) {
  *reinterpret_cast<uint4*>(p) =
      make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- host side: vector-path preconditions and launch shapes -------------------------------------------------
inline constexpr int kThreads = 256;
inline constexpr int64_t kTargetBlocks = 4096;  // CTAs in flight enough to fill 132 SMs

inline size_t size_of(Ty t) { return t == Ty::F32 ? 4 : 2; }
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// A row-major operand whose every row starts 16-byte aligned.
inline bool rows_aligned16(const void* p, int64_t ld, Ty t, int64_t rows) {
  return aligned16(p) && (rows <= 1 || (ld * static_cast<int64_t>(size_of(t))) % 16 == 0);
}

// A rows × items_per_row launch: CTAs of 256 threads shaped (x, y) with x a multiple of 32 covering a row's
// items (up to 256) and y = 256 / x rows, so short rows still fill whole CTAs; kernels grid-stride on both axes
// (threadIdx.x / blockDim.x along a row, threadIdx.y / blockDim.y over rows).
struct Shape2d {
  dim3 grid, block;
};
inline Shape2d shape_2d(int64_t rows, int64_t items_per_row) {
  const int64_t bx = std::min<int64_t>(kThreads, std::max<int64_t>(32, ceil_div(items_per_row, 32) * 32));
  const int64_t by = kThreads / bx;
  const int64_t gx = std::max<int64_t>(1, std::min<int64_t>(ceil_div(items_per_row, bx), kTargetBlocks));
  const int64_t gy =
      std::max<int64_t>(1, std::min<int64_t>({ceil_div(rows, by), std::max<int64_t>(1, kTargetBlocks / gx), 65535}));
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
          dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by))};
}

}  // namespace fp8train::ops::cuda::ew
