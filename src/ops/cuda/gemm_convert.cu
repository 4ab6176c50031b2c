// The element-wise helpers of the CUDA GEMMs (gemm_launch.h): BF16 -> F32 widening of a mixed-dtype operand,
// F32 -> BF16 rounding (round_inputs_bf16, and a BF16 output computed in F32), and c = beta·c (k = 0, empty
// experts, rows past the last expert). Row-major rows × cols with row strides; one thread per element on a
// grid-stride loop (these are side paths of the GEMMs, small next to the products they feed).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/gemm_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

__global__ void widen_bf16_kernel(const __nv_bfloat16* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                                  int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[r * ld_dst + c] = __bfloat162float(src[r * ld_src + c]);
  }
}

__global__ void round_bf16_kernel(const float* src, int64_t ld_src, int64_t rows, int64_t cols, __nv_bfloat16* dst,
                                  int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[r * ld_dst + c] = __float2bfloat16_rn(src[r * ld_src + c]);
  }
}

template <class T>
__global__ void scale_kernel(T* c, int64_t ldc, int64_t rows, int64_t cols, float beta) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, col = i - r * cols;
    T& v = c[r * ldc + col];
    if constexpr (sizeof(T) == 4) {
      v = beta == 0.0f ? 0.0f : beta * v;
    } else {
      v = __float2bfloat16_rn(beta == 0.0f ? 0.0f : beta * __bfloat162float(v));
    }
  }
}

}  // namespace

cudaError_t launch_gemm_widen_bf16(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                                   int64_t ld_dst, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  widen_bf16_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(src), ld_src,
                                                                    rows, cols, dst, ld_dst);
  return cudaGetLastError();
}

cudaError_t launch_gemm_round_bf16(const float* src, int64_t ld_src, int64_t rows, int64_t cols, uint16_t* dst,
                                   int64_t ld_dst, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  round_bf16_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(src, ld_src, rows, cols,
                                                                    reinterpret_cast<__nv_bfloat16*>(dst), ld_dst);
  return cudaGetLastError();
}

cudaError_t launch_gemm_scale(void* c, bool bf16_c, int64_t ldc, int64_t rows, int64_t cols, float beta,
                              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (bf16_c) {
    scale_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(c), ldc, rows, cols, beta);
  } else {
    scale_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<float*>(c), ldc, rows, cols, beta);
  }
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
