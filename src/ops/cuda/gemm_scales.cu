// Scale re-layout for cuBLASLt: transposes a [rows, cols] float32 matrix into [cols, rows] (row-major
// QTensor 1x128 scales [M, ceil(K/128)] -> cuBLASLt's MN-major [ceil(K/128), M]). 32x32 tiles through
// shared memory (padded one column against bank conflicts). Tiny next to the GEMM it feeds.
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8train::ops::cuda::detail {
namespace {
__global__ void transpose_f32_kernel(const float* __restrict__ src, int64_t rows, int64_t cols,
                                     float* __restrict__ dst) {
  __shared__ float tile[32][33];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32, c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}
}  // namespace

cudaError_t launch_transpose_f32(const float* src, int64_t rows, int64_t cols, float* dst, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_f32_kernel<<<grid, dim3(32, 8), 0, stream>>>(src, rows, cols, dst);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
