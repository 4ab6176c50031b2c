// Transposes of quantized payloads (quantize_cuda.h): one-byte codes through a 32x32 shared tile (coalesced reads
// and writes, the tile padded by one byte per row against bank conflicts), and scale grids one element per thread
// (they are 128x smaller than the codes).
#include "ops/cuda/quant_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // block (32, 8): each thread moves 4 bytes of the tile

__global__ void transpose_codes_kernel(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols,
                                       int64_t src_batch, int64_t dst_batch) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  src += static_cast<int64_t>(blockIdx.z) * src_batch;
  dst += static_cast<int64_t>(blockIdx.z) * dst_batch;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile; r0 < rows; r0 += static_cast<int64_t>(gridDim.y) * kTile) {
    for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[j][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
      const int64_t c = c0 + j, r = r0 + threadIdx.x;
      if (c < cols && r < rows) dst[c * rows + r] = tile[threadIdx.x][j];
    }
    __syncthreads();  // the tile is refilled by the next pass
  }
}

__global__ void transpose_scales_kernel(const float* src, GridStrides s, float* dst, GridStrides d, int64_t rows,
                                        int64_t cols, int64_t groups) {
  const int64_t n = rows * cols * groups;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / (rows * cols), rc = i % (rows * cols), r = rc / cols, c = rc % cols;
    dst[g * d.group + c * d.row + r * d.col] = src[g * s.group + r * s.row + c * s.col];
  }
}

// dst (g, r, c) = src (g, r / block_rows, c): a block grid's scales repeated on every row of their blocks.
__global__ void expand_scale_rows_kernel(const float* src, GridStrides s, float* dst, GridStrides d, int64_t rows,
                                         int64_t cols, int64_t groups, int64_t block_rows) {
  const int64_t n = rows * cols * groups;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / (rows * cols), rc = i % (rows * cols), r = rc / cols, c = rc % cols;
    dst[g * d.group + r * d.row + c * d.col] = src[g * s.group + (r / block_rows) * s.row + c * s.col];
  }
}

}  // namespace

cudaError_t launch_transpose_codes(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols, int64_t batches,
                                   int64_t src_batch, int64_t dst_batch, cudaStream_t stream) {
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  if (gx > 2147483647) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy < 65535 ? gy : 65535),
                  static_cast<unsigned>(batches));
  transpose_codes_kernel<<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(src, dst, rows, cols, src_batch, dst_batch);
  return cudaGetLastError();
}

cudaError_t launch_transpose_scales(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides,
                                    int64_t rows, int64_t cols, int64_t groups, cudaStream_t stream) {
  const int64_t n = rows * cols * groups, blocks = (n + 255) / 256;
  transpose_scales_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      src, src_strides, dst, dst_strides, rows, cols, groups);
  return cudaGetLastError();
}

cudaError_t launch_expand_scale_rows(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides,
                                     int64_t rows, int64_t cols, int64_t groups, int64_t block_rows,
                                     cudaStream_t stream) {
  const int64_t n = rows * cols * groups, blocks = (n + 255) / 256;
  expand_scale_rows_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      src, src_strides, dst, dst_strides, rows, cols, groups, block_rows);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
