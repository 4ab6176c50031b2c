// E5M6 1x128 quantization (12-bit codes packed 8 per 12 bytes), E5M6 unpacking, and dequantization of 1-byte
// codes with any block grid. Three kernel shapes, each with all loads of a thread issued before first use and
// a 2-D grid (x: column groups, y: groups of kRows = 4 rows, grid-stride beyond 65535):
//   - quant_e5m6_kernel: 8 consecutive elements per lane, a half-warp per 128-column tile (issue-bound; see
//     its comment for what keeps it at the bandwidth target);
//   - dequant_coalesced_kernel (cols % 16 == 0, the common case): warp-contiguous lanes, hardware widening;
//   - dequant_kernel / dequant_e5m6_kernel: 8 elements per thread, any shape (the fallback).
// Speeds on the H200: bench/RESULTS.md; variants tried: docs/gpu.md. Layouts and arithmetic:
// quantize_cuda.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// Half-warp per (row, 128-column tile): lane c of the half-warp owns columns 8c..8c+7 of the tile; kRows rows
// per thread. Issue-bound (on the H200 bf16 and f32 input ran at the same ~0.75e12 elements/s whatever the
// rows per thread or occupancy), so instructions per row are what count: the scale arithmetic (an IEEE
// division and the UE8M0 rounding, ~100 instructions) is done once for all kRows rows (lane c computes row
// (c mod kRows)'s scale, the others read it with two shuffles per row), min/max use three-input VIMNMX3, the
// encoder is 6 integer operations on the signed bits when the group cannot saturate or underflow, and the
// pack is unmasked shift-and-add. bf16 input: 0.66 -> 0.81 of copy bandwidth.
template <InType IT>
__global__ void __launch_bounds__(kThreads) quant_e5m6_kernel(const QuantE5M6Args a) {
  static_assert(kRows <= 16 && 16 % kRows == 0, "one half-warp lane per row computes that row's scale");
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  const int lane = threadIdx.x & 31, lane16 = threadIdx.x & 15;
  const int64_t tile = col / 128;
  const bool ok = col < a.cols;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows; row0 < a.rows;
       row0 += static_cast<int64_t>(gridDim.y) * kRows) {
    Vec8<IT> v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (ok && row0 + r < a.rows) v[r].load(a.x, (row0 + r) * a.cols + col);
      else v[r].zero();
    }
    // |x| bits per row: the thread's largest and smallest, then the tile's largest (amax) over the half-warp.
    uint32_t lo[kRows], hi[kRows], amax[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      uint32_t b[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) b[j] = abs_bits(v[r].get(j));
      // Three-input min/max (VIMNMX3): 4 instructions each for 8 values instead of 8.
      hi[r] = __vimax3_u32(__vimax3_u32(b[0], b[1], b[2]), __vimax3_u32(b[3], b[4], b[5]), max(b[6], b[7]));
      lo[r] = __vimin3_u32(__vimin3_u32(b[0], b[1], b[2]), __vimin3_u32(b[3], b[4], b[5]), min(b[6], b[7]));
      amax[r] = hi[r];
#pragma unroll
      for (int off = 8; off >= 1; off >>= 1) amax[r] = max(amax[r], __shfl_xor_sync(0xFFFFFFFFu, amax[r], off));
    }
    uint32_t mine = amax[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r) mine = lane16 % kRows == r ? amax[r] : mine;
    const ScaleInverse own = block_scale_dev(__uint_as_float(mine), num::kE5M6Max, a.pow2_scales);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int src = (lane & ~(kRows - 1)) | r;  // a lane of this half-warp that computed row r
      const ScaleInverse s{__shfl_sync(0xFFFFFFFFu, own.scale, src), __shfl_sync(0xFFFFFFFFu, own.inverse, src)};
      const int64_t row = row0 + r;
      if (!ok || row >= a.rows) continue;
      if (lane16 == 0) a.scales[row * a.strides.row + tile * a.strides.col] = s.scale;
      // x·inverse is monotonic in |x|, so the 8 scaled values are all in the fast encoder's range iff the
      // smallest and the largest are; otherwise (zeros, subnormals, NaN, saturation) the group takes the
      // reference encoder.
      const bool normal = e5m6_unsaturated_range(__uint_as_float(lo[r]) * s.inverse) &&
                          e5m6_unsaturated_range(__uint_as_float(hi[r]) * s.inverse);
      uint32_t codes[8];
      if (normal) {
#pragma unroll
        for (int j = 0; j < 8; ++j) codes[j] = e5m6_encode_unsaturated(v[r].get(j) * s.inverse);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) codes[j] = num::e5m6_encode(v[r].get(j) * s.inverse);
      }
      uint32_t words[3];
      num::e5m6_pack8_12bit(codes, words);
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

__device__ __forceinline__ float decode_code(quant::Format f, uint32_t code) {
  switch (f) {
    case quant::Format::E4M3: return num::e4m3_decode(static_cast<uint8_t>(code));
    case quant::Format::E5M2: return num::e5m2_decode(static_cast<uint8_t>(code));
    default: return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(code)));
  }
}

// 8 consecutive codes of kRows rows; `uniform_block` when all 8 share one block column (block_cols % 8 == 0).
template <quant::Format F, InType OT>
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

// ---- Coalesced dequantization (cols % 16 == 0, sizes < 2^31) ----------------------------------------------
// Lane l of a warp owns V consecutive elements of each 32·V-column segment (V = 4 for F32 output: one float4
// store; V = 8 for BF16: one 16-byte store), so every load and every store instruction of a warp covers one
// contiguous range — measured, 32- and 64-byte lane strides in the stores cost up to half the
// bandwidth. Each thread handles kSeg segments of kRows rows, all loads issued first.
// Decoding uses the hardware: every E4M3/E5M2 value is exact in fp16 (fp8x2 -> f16x2 conversion, then
// f16 -> f32 widening), an E5M6 code is the top 12 bits of an fp16, and BF16 output uses cvt.rn.bf16x2.f32.
// These equal num::*_decode and num::bf16_encode on every non-NaN value; NaN stays NaN but, as with any GPU
// arithmetic, the multiply by the scale returns the canonical NaN (the CPU keeps the code's sign and payload).
enum class Packed { E4M3, E5M2, INT8, E5M6 };

constexpr int kSeg = 2;

template <Packed P, int V>
struct Codes;
template <Packed P>
struct Codes<P, 4> {  // 4 one-byte codes, or 4 E5M6 codes (6 bytes = three 2-byte loads)
  uint32_t w[2];
  __device__ __forceinline__ void load(const uint8_t* q, int64_t elem) {
    if constexpr (P == Packed::E5M6) {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(q + elem / 2 * 3);
      w[0] = __ldg(p) | (static_cast<uint32_t>(__ldg(p + 1)) << 16);
      w[1] = __ldg(p + 2);
    } else {
      w[0] = __ldg(reinterpret_cast<const uint32_t*>(q + elem));
    }
  }
};
template <Packed P>
struct Codes<P, 8> {  // 8 one-byte codes (8 bytes), or 8 E5M6 codes (12 bytes)
  uint32_t w[3];
  __device__ __forceinline__ void load(const uint8_t* q, int64_t elem) {
    if constexpr (P == Packed::E5M6) {
      const uint32_t* p = reinterpret_cast<const uint32_t*>(q + elem / 2 * 3);
      w[0] = __ldg(p);
      w[1] = __ldg(p + 1);
      w[2] = __ldg(p + 2);
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(q + elem));
      w[0] = v.x;
      w[1] = v.y;
    }
  }
};

// Two one-byte codes (the low 16 bits of `pair`) to floats.
template <Packed P>
__device__ __forceinline__ float2 decode_pair(uint32_t pair) {
  if constexpr (P == Packed::INT8) {
    return make_float2(static_cast<float>(static_cast<int8_t>(pair)), static_cast<float>(static_cast<int8_t>(pair >> 8)));
  } else {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu),
                                                     P == Packed::E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half22float2(*reinterpret_cast<const __half2*>(&r));
  }
}
__device__ __forceinline__ float2 decode_e5m6_pair(uint32_t c0, uint32_t c1) {
  return __half22float2(__halves2half2(__ushort_as_half(static_cast<unsigned short>(c0 << 4)),
                                       __ushort_as_half(static_cast<unsigned short>(c1 << 4))));
}

template <Packed P, int V>
__device__ __forceinline__ void decode(const Codes<P, V>& c, float (&v)[V]) {
  if constexpr (P == Packed::E5M6) {
    // Code i of a group sits at bit 12·i of the little-endian words (num::e5m6_pack8).
    const uint64_t lo = c.w[0] | (static_cast<uint64_t>(c.w[1]) << 32);
    uint32_t code[V];
#pragma unroll
    for (int i = 0; i < V && i < 5; ++i) code[i] = static_cast<uint32_t>(lo >> (12 * i)) & 0xFFFu;
    if constexpr (V == 8) {
      code[5] = static_cast<uint32_t>((lo >> 60) | (static_cast<uint64_t>(c.w[2]) << 4)) & 0xFFFu;
      code[6] = (c.w[2] >> 8) & 0xFFFu;
      code[7] = (c.w[2] >> 20) & 0xFFFu;
    }
#pragma unroll
    for (int i = 0; i < V; i += 2) {
      const float2 f = decode_e5m6_pair(code[i], code[i + 1]);
      v[i] = f.x;
      v[i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; i += 2) {
      const float2 f = decode_pair<P>(c.w[i / 4] >> (8 * (i % 4)));
      v[i] = f.x;
      v[i + 1] = f.y;
    }
  }
}

template <InType OT, int V>
__device__ __forceinline__ void store_v(void* out, int64_t elem, const float (&v)[V]) {
  if constexpr (OT == InType::BF16) {
    uint32_t w[V / 2];
#pragma unroll
    for (int i = 0; i < V; i += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(v[i], v[i + 1]);
      w[i / 2] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + elem) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(out) + elem) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

struct CoalescedArgs {
  const uint8_t* q;
  const float* scales;
  ScaleStrides strides;
  uint32_t rows, cols, block_rows, block_cols;
  void* out;
};

template <Packed P, InType OT>
__global__ void __launch_bounds__(kThreads) dequant_coalesced_kernel(const CoalescedArgs a) {
  constexpr int V = OT == InType::F32 ? 4 : 8;
  const uint32_t warp = (blockIdx.x * kThreads + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const uint32_t col0 = warp * (32 * V * kSeg) + lane * V;
  if (col0 >= a.cols) return;
  int64_t scale_col[kSeg];  // each segment's block column offset (rows change, columns do not)
#pragma unroll
  for (int g = 0; g < kSeg; ++g) {
    const uint32_t col = col0 + g * 32 * V < a.cols ? col0 + g * 32 * V : col0;
    scale_col[g] = static_cast<int64_t>(col / a.block_cols) * a.strides.col;
  }
  for (uint32_t row0 = blockIdx.y * kRows; row0 < a.rows; row0 += gridDim.y * kRows) {
    Codes<P, V> c[kRows][kSeg];
    float s[kRows][kSeg];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint32_t row = row0 + r < a.rows ? row0 + r : a.rows - 1;  // clamped: loads stay in bounds
      const float* srow = a.scales + static_cast<int64_t>(row / a.block_rows) * a.strides.row;
#pragma unroll
      for (int g = 0; g < kSeg; ++g) {
        const uint32_t col = col0 + g * 32 * V < a.cols ? col0 + g * 32 * V : col0;
        c[r][g].load(a.q, static_cast<int64_t>(row) * a.cols + col);
        s[r][g] = __ldg(srow + scale_col[g]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r >= a.rows) break;
#pragma unroll
      for (int g = 0; g < kSeg; ++g) {
        const uint32_t col = col0 + g * 32 * V;
        if (col >= a.cols) break;
        float v[V];
        decode<P, V>(c[r][g], v);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] *= s[r][g];
        store_v<OT, V>(a.out, static_cast<int64_t>(row0 + r) * a.cols + col, v);
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The coalesced kernel serves cols % 16 == 0 (so every lane's V elements share a block column when
// block_cols % 8 == 0), sizes below 2^31 and 16-byte aligned buffers; false otherwise.
template <Packed P>
bool try_coalesced(const uint8_t* q, const float* scales, ScaleStrides strides, int64_t rows, int64_t cols,
                   int64_t block_rows, int64_t block_cols, void* out, InType out_type, cudaStream_t s) {
  const int64_t lim = int64_t{1} << 31;
  if (cols % 16 != 0 || block_cols % 8 != 0 || rows >= lim || cols >= lim || block_rows >= lim ||
      block_cols >= lim || !aligned16(q) || !aligned16(out))
    return false;
  const CoalescedArgs a{q, scales, strides, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                        static_cast<uint32_t>(block_rows), static_cast<uint32_t>(block_cols), out};
  const int v = out_type == InType::F32 ? 4 : 8;
  const int64_t cols_per_cta = int64_t{kThreads} / 32 * 32 * v * kSeg;
  const int64_t gx = (cols + cols_per_cta - 1) / cols_per_cta;
  const int64_t groups = (rows + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(groups < 65535 ? groups : 65535));
  if (out_type == InType::BF16) dequant_coalesced_kernel<P, InType::BF16><<<grid, kThreads, 0, s>>>(a);
  else dequant_coalesced_kernel<P, InType::F32><<<grid, kThreads, 0, s>>>(a);
  return true;
}

constexpr Packed packed_of(quant::Format f) {
  return f == quant::Format::E4M3 ? Packed::E4M3 : f == quant::Format::E5M2 ? Packed::E5M2 : Packed::INT8;
}

dim3 grid_rows_cols(int64_t rows, int64_t cols) {
  const int64_t gx = (cols / 8 + kThreads - 1) / kThreads;
  const int64_t groups = (rows + kRows - 1) / kRows;
  const int64_t gy = groups < 65535 ? groups : 65535;
  return dim3(static_cast<unsigned>(gx < 1 ? 1 : gx), static_cast<unsigned>(gy < 1 ? 1 : gy));
}

template <quant::Format F>
cudaError_t dequant_by_out(const DequantArgs& a, cudaStream_t s) {
  if (try_coalesced<packed_of(F)>(a.q, a.scales, a.strides, a.rows, a.cols, a.block_rows, a.block_cols, a.out,
                                  a.out_type, s))
    return cudaGetLastError();
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
  if (try_coalesced<Packed::E5M6>(packed, scales, strides, rows, cols, 1, 128, out, out_type, stream))
    return cudaGetLastError();
  const dim3 grid = grid_rows_cols(rows, cols);
  if (out_type == InType::BF16)
    dequant_e5m6_kernel<InType::BF16><<<grid, kThreads, 0, stream>>>(packed, scales, strides, rows, cols, out);
  else dequant_e5m6_kernel<InType::F32><<<grid, kThreads, 0, stream>>>(packed, scales, strides, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t launch_dequant(const DequantArgs& a, cudaStream_t stream) {
  switch (a.format) {
    case quant::Format::E4M3: return dequant_by_out<quant::Format::E4M3>(a, stream);
    case quant::Format::E5M2: return dequant_by_out<quant::Format::E5M2>(a, stream);
    case quant::Format::INT8: return dequant_by_out<quant::Format::INT8>(a, stream);
    default: break;  // E5M6 / BF16: no one-byte kernel
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8train::ops::cuda::detail
