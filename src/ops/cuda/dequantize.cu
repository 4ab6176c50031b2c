// E5M6 1x128 quantization (12-bit codes packed 8 per 12 bytes), E5M6 unpacking, and dequantization of 1-byte
// codes with any block grid. Each thread handles 8 consecutive elements in each of kRows = 4 rows, all loads
// issued before the first use (enough bytes in flight to saturate HBM); a 2-D grid (x: groups of 8 columns,
// y: groups of 4 rows, grid-stride beyond 65535) so no thread divides a 64-bit flat index. E5M6 uses the
// fast codec of e5m6_fast.h. Layouts and arithmetic: quantize_cuda.h.
#include "ops/cuda/e5m6_fast.h"
#include "ops/cuda/quant_device.cuh"
#include "ops/cuda/quant_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;  // rows per thread

template <InType OT>
__device__ __forceinline__ void store8(void* out, int64_t elem, const float (&v)[8]) {
  if constexpr (OT == InType::BF16) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = static_cast<uint32_t>(num::bf16_encode(v[2 * k])) |
             (static_cast<uint32_t>(num::bf16_encode(v[2 * k + 1])) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + elem) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(out) + elem);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// Half-warp per (row, 128-column tile): lane c of the half-warp owns columns 8c..8c+7 of the tile.
template <InType IT>
__global__ void __launch_bounds__(kThreads) quant_e5m6_kernel(const QuantE5M6Args a) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  const int lane16 = threadIdx.x & 15;
  const int64_t tile = col / 128;
  const bool ok = col < a.cols;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows; row0 < a.rows; row0 += static_cast<int64_t>(gridDim.y) * kRows) {
    Vec8<IT> v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (ok && row0 + r < a.rows) v[r].load(a.x, (row0 + r) * a.cols + col);
      else v[r].zero();
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r;
      uint32_t m = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) m = max(m, abs_bits(v[r].get(j)));
#pragma unroll
      for (int off = 8; off >= 1; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
      const ScaleInverse s = block_scale_dev(__uint_as_float(m), num::kE5M6Max, a.pow2_scales);
      if (!ok || row >= a.rows) continue;
      if (lane16 == 0) a.scales[row * a.strides.row + tile * a.strides.col] = s.scale;
      uint16_t codes[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) codes[j] = e5m6_encode_fast(v[r].get(j) * s.inverse);
      uint32_t words[3];
      num::e5m6_pack8(codes, words);
      uint32_t* dst = reinterpret_cast<uint32_t*>(a.packed + (row * a.cols + col) / 8 * 12);
      dst[0] = words[0];
      dst[1] = words[1];
      dst[2] = words[2];
    }
  }
}

template <InType OT>
__global__ void __launch_bounds__(kThreads) dequant_e5m6_kernel(const uint8_t* packed, const float* scales,
                                                                ScaleStrides strides, int64_t rows, int64_t cols,
                                                                void* out) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  if (col >= cols) return;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows; row0 < rows; row0 += static_cast<int64_t>(gridDim.y) * kRows) {
    uint32_t words[kRows][3];
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r < rows ? row0 + r : rows - 1;  // clamped: loads stay in bounds
      const uint32_t* src = reinterpret_cast<const uint32_t*>(packed + (row * cols + col) / 8 * 12);
      words[r][0] = __ldg(src);
      words[r][1] = __ldg(src + 1);
      words[r][2] = __ldg(src + 2);
      s[r] = __ldg(scales + row * strides.row + (col / 128) * strides.col);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r >= rows) break;
      uint16_t codes[8];
      num::e5m6_unpack8(words[r], codes);
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = e5m6_decode_fast(codes[j]) * s[r];
      store8<OT>(out, (row0 + r) * cols + col, v);
    }
  }
}

__device__ __forceinline__ float decode_code(CodeFormat f, uint32_t code) {
  switch (f) {
    case CodeFormat::E4M3: return num::e4m3_decode(static_cast<uint8_t>(code));
    case CodeFormat::E5M2: return num::e5m2_decode(static_cast<uint8_t>(code));
    default: return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(code)));
  }
}

// 8 consecutive codes of kRows rows; `uniform_block` when all 8 share one block column (block_cols % 8 == 0).
template <CodeFormat F, InType OT>
__global__ void __launch_bounds__(kThreads) dequant_kernel(const DequantArgs a, bool uniform_block) {
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  if (col >= a.cols) return;
  const int64_t bc0 = col / a.block_cols;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows; row0 < a.rows; row0 += static_cast<int64_t>(gridDim.y) * kRows) {
    uint2 raw[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r < a.rows ? row0 + r : a.rows - 1;  // clamped: loads stay in bounds
      raw[r] = __ldg(reinterpret_cast<const uint2*>(a.q + row * a.cols + col));
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r;
      if (row >= a.rows) break;
      const float* srow = a.scales + (row / a.block_rows) * a.strides.row;
      const float s0 = __ldg(srow + bc0 * a.strides.col);
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float s = uniform_block ? s0 : __ldg(srow + ((col + j) / a.block_cols) * a.strides.col);
        v[j] = decode_code(F, ((j < 4 ? raw[r].x : raw[r].y) >> (8 * (j & 3))) & 0xFFu) * s;
      }
      store8<OT>(a.out, row * a.cols + col, v);
    }
  }
}

dim3 grid_rows_cols(int64_t rows, int64_t cols) {
  const int64_t gx = (cols / 8 + kThreads - 1) / kThreads;
  const int64_t groups = (rows + kRows - 1) / kRows;
  const int64_t gy = groups < 65535 ? groups : 65535;
  return dim3(static_cast<unsigned>(gx < 1 ? 1 : gx), static_cast<unsigned>(gy < 1 ? 1 : gy));
}

template <CodeFormat F>
cudaError_t dequant_by_out(const DequantArgs& a, cudaStream_t s) {
  const dim3 grid = grid_rows_cols(a.rows, a.cols);
  const bool uniform = a.block_cols % 8 == 0;
  if (a.out_type == InType::BF16) dequant_kernel<F, InType::BF16><<<grid, kThreads, 0, s>>>(a, uniform);
  else dequant_kernel<F, InType::F32><<<grid, kThreads, 0, s>>>(a, uniform);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_quant_e5m6(const QuantE5M6Args& a, cudaStream_t stream) {
  // Whole 128-column tiles per half-warp: pad the x extent of the grid to whole tiles of 16 threads.
  const int64_t tiles = (a.cols + 127) / 128;
  const int64_t gx = (tiles * 16 + kThreads - 1) / kThreads;
  const int64_t groups = (a.rows + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(groups < 65535 ? groups : 65535));
  if (a.x_type == InType::BF16) quant_e5m6_kernel<InType::BF16><<<grid, kThreads, 0, stream>>>(a);
  else quant_e5m6_kernel<InType::F32><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_dequant_e5m6(const uint8_t* packed, const float* scales, ScaleStrides strides, int64_t rows,
                                int64_t cols, void* out, InType out_type, cudaStream_t stream) {
  const dim3 grid = grid_rows_cols(rows, cols);
  if (out_type == InType::BF16)
    dequant_e5m6_kernel<InType::BF16><<<grid, kThreads, 0, stream>>>(packed, scales, strides, rows, cols, out);
  else dequant_e5m6_kernel<InType::F32><<<grid, kThreads, 0, stream>>>(packed, scales, strides, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t launch_dequant(const DequantArgs& a, cudaStream_t stream) {
  switch (a.format) {
    case CodeFormat::E4M3: return dequant_by_out<CodeFormat::E4M3>(a, stream);
    case CodeFormat::E5M2: return dequant_by_out<CodeFormat::E5M2>(a, stream);
    case CodeFormat::INT8: return dequant_by_out<CodeFormat::INT8>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8train::ops::cuda::detail
