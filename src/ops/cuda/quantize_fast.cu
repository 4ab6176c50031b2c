// The two bandwidth-critical quantizers, one CTA (256 threads) per 128x128 tile of x, x read once:
//   quant_1x128_kernel    1x128 tiles (scale per row per 128 columns), fused with the 128x1 tiles written
//                         transposed (scale per column per 128 rows) for Wgrad;
//   quant_128x128_kernel  128x128 blocks (weights) and their transpose.
// Thread t of the CTA owns rows 8a..8a+7 and columns 8c..8c+7 of the tile (a = t / 16, c = t % 16): a
// half-warp reads one 256-byte bf16 row segment per load, row maxima reduce over the 16 lanes of a half-warp,
// column maxima over lanes c and c+16, then over the 8 warps through shared memory. The transposed codes go
// through a 128x128-byte shared tile whose 8-byte chunks are XOR-swizzled (chunk a of row 8c+j is stored at
// a ^ c) so both the 8-byte writes and the 16-byte reads are free of bank conflicts.
// Row groups (MoE experts, rows per group a multiple of 128) run in one launch: grid row y is tile y % tiles of
// group y / tiles, whose matrices and scale grids the tile reads through a FastParams narrowed to the group.
// The 1x128 kernel also re-tiles one-byte codes (ops::with_colwise): its input is then codes with 1x128 row
// scales, decoded (exact into FP16) and multiplied by the scale in FP32 -- the values dequantize writes -- so
// the 128x1 copy comes from one read of the codes instead of a dequantized scratch written and read back.
// The 1x128 kernel also fuses SwiGLU into its load (ops/quantize.h): from the E4M3 codes of the cached
// gate|up (and dout) it computes the values swiglu_forward / swiglu_backward would write in BF16 -- the codes
// decoded and scaled as dequantize does, rounded to BF16, the SwiGLU arithmetic of swiglu_device.cuh, the result
// rounded to BF16 -- and quantizes them, so neither the BF16 gate|up nor the SwiGLU output exists in memory.
// The backward's CTA takes a column block of d_gate and the matching one of d_up together: gate, up and dout are
// read once and σ evaluated once per element for both (swiglu_backward_tiles).
// Layouts and arithmetic: quantize_cuda.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "ops/cuda/quant_device.cuh"
#include "ops/cuda/quant_launch.h"
#include "ops/cuda/swiglu_device.cuh"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kTile = 128;
constexpr int kThreads = 256;

// Eight values that are BF16 numbers, held as packed BF16 (exact).
struct Bf16x8 {
  uint32_t w[4];
  __device__ __forceinline__ float get(int i) const {
    return (i & 1) ? __uint_as_float(w[i / 2] & 0xFFFF0000u) : __uint_as_float(w[i / 2] << 16);
  }
  __device__ __forceinline__ void set(int i, float v) {  // v is a BF16 value: its low 16 bits are zero
    const uint32_t b = __float_as_uint(v);
    w[i / 2] = (i & 1) ? (w[i / 2] & 0xFFFFu) | b : (w[i / 2] & 0xFFFF0000u) | (b >> 16);
  }
  // Values 2k and 2k+1, both BF16 numbers.
  __device__ __forceinline__ void set2(int k, float lo, float hi) {
    w[k] = (__float_as_uint(hi) & 0xFFFF0000u) | (__float_as_uint(lo) >> 16);
  }
};

// Codes of 8 values of one row (row-major output) or one column (transposed output), as two words.
template <quant::Format F, Encoder E, bool kStoch>
__device__ __forceinline__ uint2 encode8(const float (&v)[8], float inv, uint64_t seed, int64_t index0,
                                         int64_t index_step) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; k += 2) {
      const int e = 4 * h + k;
      uint32_t pair;
      if constexpr (kStoch) {
        pair = encode_int8_stochastic(v[e] * inv, seed, index0 + e * index_step) |
               (encode_int8_stochastic(v[e + 1] * inv, seed, index0 + (e + 1) * index_step) << 8);
      } else {
        pair = encode2<F, E>(v[e] * inv, v[e + 1] * inv);
      }
      word |= pair << (8 * k);
    }
    w[h] = word;
  }
  return make_uint2(w[0], w[1]);
}

// Writes the swizzled transposed tile T (row R = tile column, 8-byte chunk a ^ (R/8) = tile rows 8a..8a+7)
// to qt[(c0 + R) * rows + r0 + ...], 16 bytes per thread per step.
template <bool kFull>
__device__ __forceinline__ void write_transposed(const uint8_t* tile, uint8_t* qt, int64_t rows, int64_t cols,
                                                 int64_t r0, int64_t c0) {
#pragma unroll
  for (int k = 0; k < (kTile * kTile / 16) / kThreads; ++k) {
    const int idx = static_cast<int>(threadIdx.x) + kThreads * k;
    const int R = idx >> 3, p = idx & 7, cg = R >> 3;
    uint4 v = *reinterpret_cast<const uint4*>(tile + R * kTile + 16 * (p ^ (cg >> 1)));
    if (cg & 1) v = make_uint4(v.z, v.w, v.x, v.y);
    const int64_t out_row = c0 + R, out_col = r0 + 16 * p;
    if (kFull || (out_row < cols && out_col < rows)) *reinterpret_cast<uint4*>(qt + out_row * rows + out_col) = v;
  }
}

// Eight codes of one row and the row's 1x128 scale (re-tiling input), decoded on each read -- exact into FP16, times
// the scale in FP32, the values dequantize writes: 3 registers per row instead of 8 floats, so the kernel fits three
// CTAs per SM without spilling.
template <quant::Format F>
struct CodeRow8 {
  uint2 raw;
  float scale;
  __device__ __forceinline__ float get(int i) const {
    const uint32_t word = i < 4 ? raw.x : raw.y;
    const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * ((i >> 1) & 1))) & 0xFFFFu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, F == quant::Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
    const float2 v = __half22float2(__half2(h));
    return __fmul_rn((i & 1) ? v.y : v.x, scale);
  }
};

template <quant::Format F, bool kFull>
__device__ __forceinline__ void load_codes(CodeRow8<F> (&in)[8], const FastParams& p, int64_t row0, int64_t col) {
  static_assert(F == quant::Format::E4M3 || F == quant::Format::E5M2, "re-tiling decodes e4m3 or e5m2");
  const uint8_t* base = static_cast<const uint8_t*>(p.x) + row0 * p.cols + col;
  const int64_t block = col / 128;
#pragma unroll
  for (int i = 0; i < 8; ++i) {  // every load issued before the first use
    const bool ok = kFull || (col < p.cols && row0 + i < p.rows);
    in[i].raw = ok ? __ldg(reinterpret_cast<const uint2*>(base + i * p.cols)) : make_uint2(0, 0);
    in[i].scale = ok ? __ldg(p.x_scales + (row0 + i) * p.xs.row + block * p.xs.col) : 0.0f;
  }
}

// Kinds of input of the 1x128 kernel.
enum class Src : int { Values, Codes, SwigluForward, SwigluBackward };

// An FP32 value rounded to BF16 (nearest even) and back: what a BF16 tensor holds.
__device__ __forceinline__ float bf16r(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Eight E4M3 codes times their scale, each rounded to BF16: the values dequantize writes into a BF16 tensor.
__device__ __forceinline__ void decode8_bf16(uint2 raw, float scale, float (&f)[8]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t word = k < 2 ? raw.x : raw.y;
    const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * (k & 1))) & 0xFFFFu);
    const float2 v = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
    f[2 * k] = bf16r(__fmul_rn(v.x, scale));
    f[2 * k + 1] = bf16r(__fmul_rn(v.y, scale));
  }
}

// SwiGLU's forward values of the thread's 8x8 block (see the top of the file), from gate|up codes [rows, x_cols]:
// out[:, c] = silu(g_c)·u_c. Rows past the tensor load as zeros (their outputs are zeros, never stored). Columns
// are whole: F % 128 == 0. The outputs are BF16 numbers, held packed (exact; half the registers of floats).
template <bool kFull>
__device__ __forceinline__ void load_swiglu_forward(Bf16x8 (&in)[8], const FastParams& p, int64_t row0, int64_t col) {
  const int64_t F = p.x_cols / 2;
  const uint8_t* codes = static_cast<const uint8_t*>(p.x);
  uint2 graw[8], uraw[8];
  float gs[8], us[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {  // every load issued before the first use
    const bool ok = kFull || row0 + i < p.rows;
    const int64_t r = row0 + i;
    graw[i] = ok ? __ldg(reinterpret_cast<const uint2*>(codes + r * p.x_cols + col)) : make_uint2(0, 0);
    gs[i] = ok ? __ldg(p.x_scales + r * p.xs.row + (col / 128) * p.xs.col) : 0.0f;
    uraw[i] = ok ? __ldg(reinterpret_cast<const uint2*>(codes + r * p.x_cols + F + col)) : make_uint2(0, 0);
    us[i] = ok ? __ldg(p.x_scales + r * p.xs.row + ((F + col) / 128) * p.xs.col) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float g[8], u[8];
    decode8_bf16(graw[i], gs[i], g);
    decode8_bf16(uraw[i], us[i], u);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      in[i].set2(k, bf16r(swiglu_value(g[2 * k], u[2 * k])), bf16r(swiglu_value(g[2 * k + 1], u[2 * k + 1])));
  }
}

// Loads the thread's 8x8 block: rows r0+8a+i, columns col..col+7 (zeros outside the tensor).
template <InType IT, bool kFull>
__device__ __forceinline__ void load_block(Vec8<IT> (&in)[8], const FastParams& p, int64_t row0, int64_t col) {
  constexpr int64_t kSize = IT == InType::BF16 ? 2 : 4;
  const char* base = static_cast<const char*>(p.x) + (row0 * p.cols + col) * kSize;
  const int64_t pitch = p.cols * kSize;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (kFull || (col < p.cols && row0 + i < p.rows)) in[i].load(base + i * pitch, 0);
    else in[i].zero();
  }
}

// The row-wise 1x128 codes of the thread's 8x8 block -- rows row0..row0+7, columns col..col+7 of a [rows, cols]
// output (row pitch cols) whose 128-column block `block` the CTA's tile is -- from the thread's row maxima (bits of
// |x| over its 8 columns): the maxima reduce over the half-warp, lane c computes row c % 8's scale (one division
// pair per thread, not eight), and the inverses are broadcast with shuffles.
template <quant::Format F, Encoder E, bool kStoch, bool kFull, class In>
__device__ __forceinline__ void encode_rows(const In (&in)[8], uint32_t (&rowmax)[8], uint8_t* q, float* q_scales,
                                            ScaleStrides qs, int64_t rows, int64_t cols, int64_t row0, int64_t col,
                                            int64_t block, bool pow2, uint64_t seed) {
  const int c = threadIdx.x & 15, lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int off = 8; off >= 1; off >>= 1) rowmax[i] = max(rowmax[i], __shfl_xor_sync(0xFFFFFFFFu, rowmax[i], off));
  // rowmax[c % 8] by selects on the bits of c (an indexed read would put rowmax in local memory).
  const bool b0 = c & 1, b1 = c & 2, b2 = c & 4;
  const uint32_t s0 = b0 ? rowmax[1] : rowmax[0], s1 = b0 ? rowmax[3] : rowmax[2];
  const uint32_t s2 = b0 ? rowmax[5] : rowmax[4], s3 = b0 ? rowmax[7] : rowmax[6];
  const uint32_t mine = b2 ? (b1 ? s3 : s2) : (b1 ? s1 : s0);
  const ScaleInverse s = block_scale_dev(__uint_as_float(mine), FormatTraits<F>::kMax, pow2);
  if (c < 8 && (kFull || row0 + c < rows)) q_scales[(row0 + c) * qs.row + block * qs.col] = s.scale;
  uint8_t* qrow = q + row0 * cols + col;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float inv = __shfl_sync(0xFFFFFFFFu, s.inverse, (lane & 16) | i);
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = in[i].get(j);
    const uint2 w = encode8<F, E, kStoch>(v, inv, seed, (row0 + i) * cols + col, 1);
    if (kFull || (col < cols && row0 + i < rows)) *reinterpret_cast<uint2*>(qrow + i * cols) = w;
  }
}

// The thread's row maxima (bits of |x|) over its 8 columns.
template <class In>
__device__ __forceinline__ void row_maxima(const In (&in)[8], uint32_t (&rowmax)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) m = max(m, abs_bits(in[i].get(j)));
    rowmax[i] = m;
  }
}

// Both codes of the CTA's tile (row tile ty, column block cb) from the thread's 8x8 block of values `in`.
template <quant::Format F, Encoder E, bool kStoch, bool kFull, class In>
__device__ __forceinline__ void encode_tile(const FastParams& p, const In (&in)[8], int64_t ty, int64_t cb,
                                            uint8_t* tile, uint32_t (*colmax_part)[kTile], float* col_inverse) {
  const int t = threadIdx.x, a = t >> 4, c = t & 15, warp = t >> 5, lane = t & 31;
  const int64_t r0 = ty * kTile, c0 = cb * kTile;
  const int64_t col = c0 + 8 * c, row0 = r0 + 8 * a;
  constexpr float fmax = FormatTraits<F>::kMax;

  // Row maxima (reduced over the half-warp) and this thread's column maxima over its 8 rows.
  uint32_t rowmax[8], colmax[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) colmax[j] = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t m = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t b = abs_bits(in[i].get(j));
      m = max(m, b);
      colmax[j] = max(colmax[j], b);
    }
    rowmax[i] = m;
  }
  if (p.q != nullptr)
    encode_rows<F, E, kStoch, kFull>(in, rowmax, p.q, p.q_scales, p.qs, p.rows, p.cols, row0, col, cb, p.pow2, p.seed);
  if (p.qt == nullptr) return;

  // 128x1: column maxima over lanes c, c+16 and the 8 warps.
#pragma unroll
  for (int j = 0; j < 8; ++j) colmax[j] = max(colmax[j], __shfl_xor_sync(0xFFFFFFFFu, colmax[j], 16));
  if (lane < 16) {
    uint4* dst = reinterpret_cast<uint4*>(&colmax_part[warp][8 * c]);
    dst[0] = make_uint4(colmax[0], colmax[1], colmax[2], colmax[3]);
    dst[1] = make_uint4(colmax[4], colmax[5], colmax[6], colmax[7]);
  }
  __syncthreads();
  if (t < kTile) {
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) m = max(m, colmax_part[w][t]);
    const ScaleInverse s = block_scale_dev(__uint_as_float(m), fmax, p.pow2);
    col_inverse[t] = s.inverse;
    if (kFull || c0 + t < p.cols) p.qt_scales[(c0 + t) * p.qts.row + ty * p.qts.col] = s.scale;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = in[i].get(j);
    const uint2 w = encode8<F, E, kStoch>(v, col_inverse[8 * c + j], p.seed, row0 * p.cols + col + j, p.cols);
    *reinterpret_cast<uint2*>(tile + (8 * c + j) * kTile + 8 * (a ^ c)) = w;
  }
  __syncthreads();
  write_transposed<kFull>(tile, p.qt, p.rows, p.cols, r0, c0);
}

template <InType IT, quant::Format F, Encoder E, bool kStoch, Src kSrc, bool kFull>
__device__ __forceinline__ void quant_1x128_tile(const FastParams& p, int64_t ty, uint8_t* tile,
                                                 uint32_t (*colmax_part)[kTile], float* col_inverse) {
  const int t = threadIdx.x, a = t >> 4, c = t & 15;
  const int64_t cb = blockIdx.x, col = cb * kTile + 8 * c, row0 = ty * kTile + 8 * a;
  using In = std::conditional_t<kSrc == Src::SwigluForward, Bf16x8,
                                std::conditional_t<kSrc == Src::Codes, CodeRow8<F>, Vec8<IT>>>;
  In in[8];
  if constexpr (kSrc == Src::Codes)
    load_codes<F, kFull>(in, p, row0, col);
  else if constexpr (kSrc == Src::SwigluForward)
    load_swiglu_forward<kFull>(in, p, row0, col);
  else
    load_block<IT, kFull>(in, p, row0, col);
  encode_tile<F, E, kStoch, kFull>(p, in, ty, cb, tile, colmax_part, col_inverse);
}

// SwiGLU's backward fused into the quantizer, both halves of a column block per CTA: the thread's 8x8 block of
// gate, up and dout is read once and σ(g) evaluated once, giving d_gate (column block cb) and d_up (column block
// F/128 + cb); each is rounded to BF16 -- so held packed, exactly -- and the two tiles are encoded one after the
// other through the same shared memory. Per element: the decoded BF16 gate and up, SwiGLU's gradient
// (swiglu_grad), each half rounded to BF16 -- the values swiglu_backward writes.
template <quant::Format F, Encoder E, bool kFull>
__device__ __forceinline__ void swiglu_backward_tiles(const FastParams& p, int64_t ty, uint8_t* tile,
                                                      uint32_t (*colmax_part)[kTile], float* col_inverse,
                                                      uint4 (*du_stage)[kThreads]) {
  const int t = threadIdx.x, a = t >> 4, c = t & 15;
  const int64_t F_cols = p.x_cols / 2, cb = blockIdx.x;
  const int64_t gc = cb * kTile + 8 * c, row0 = ty * kTile + 8 * a;
  const uint8_t* codes = static_cast<const uint8_t*>(p.x);
  // d_up waits in shared memory (du_stage[8][kThreads]: packed BF16, each thread's 8 rows in its own 16-byte
  // column, conflict-free) while d_gate is encoded: both in registers would spill at the 128 registers two CTAs
  // per SM leave a thread.
  Bf16x8 dg[8];
  // Two halves of four rows, each with all its loads issued before the first use (register pressure again).
#pragma unroll
  for (int h = 0; h < 8; h += 4) {
    uint2 graw[4], uraw[4];
    float gs[4], us[4];
    uint4 draw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = row0 + h + i;
      const bool ok = kFull || r < p.rows;
      graw[i] = ok ? __ldg(reinterpret_cast<const uint2*>(codes + r * p.x_cols + gc)) : make_uint2(0, 0);
      gs[i] = ok ? __ldg(p.x_scales + r * p.xs.row + (gc / 128) * p.xs.col) : 0.0f;
      uraw[i] = ok ? __ldg(reinterpret_cast<const uint2*>(codes + r * p.x_cols + F_cols + gc)) : make_uint2(0, 0);
      us[i] = ok ? __ldg(p.x_scales + r * p.xs.row + ((F_cols + gc) / 128) * p.xs.col) : 0.0f;
      draw[i] =
          ok ? __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.dout) + r * p.ld_dout + gc))
             : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float g[8], u[8];
      decode8_bf16(graw[i], gs[i], g);
      decode8_bf16(uraw[i], us[i], u);
      const uint32_t w[4] = {draw[i].x, draw[i].y, draw[i].z, draw[i].w};
      Bf16x8 du;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float d = __uint_as_float(((w[j / 2] >> (16 * (j & 1))) & 0xFFFFu) << 16);  // BF16 -> FP32, exact
        float vg, vu;
        swiglu_grad(g[j], u[j], d, vg, vu);
        dg[h + i].set(j, bf16r(vg));
        du.set(j, bf16r(vu));
      }
      du_stage[h + i][t] = make_uint4(du.w[0], du.w[1], du.w[2], du.w[3]);
    }
  }
  encode_tile<F, E, false, kFull>(p, dg, ty, cb, tile, colmax_part, col_inverse);
  Bf16x8 du[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4 v = du_stage[i][t];
    du[i].w[0] = v.x, du[i].w[1] = v.y, du[i].w[2] = v.z, du[i].w[3] = v.w;
  }
  __syncthreads();  // the d_gate tile's transposed codes have been read out of `tile`
  encode_tile<F, E, false, kFull>(p, du, ty, F_cols / kTile + cb, tile, colmax_part, col_inverse);
}

// The parameters of grid row blockIdx.y's group, and the tile row inside it (groups of whole 128-row tiles).
__device__ __forceinline__ FastParams group_of(const FastParams& p, int64_t in_bytes, int64_t& ty) {
  ty = blockIdx.y;
  if (p.groups <= 1) return p;
  const int64_t rg = p.rows / p.groups, tiles = rg / kTile, g = ty / tiles;
  ty -= g * tiles;
  FastParams q = p;
  q.rows = rg;
  q.x = static_cast<const char*>(p.x) + g * rg * p.cols * in_bytes;
  if (p.q != nullptr) {
    q.q = p.q + g * rg * p.cols;
    q.q_scales = p.q_scales + g * p.qs_group;
  }
  if (p.qt != nullptr) {
    q.qt = p.qt + g * p.cols * rg;
    q.qt_scales = p.qt_scales + g * p.qts_group;
  }
  if (p.x_scales != nullptr) q.x_scales = p.x_scales + g * p.xs_group;
  return q;
}

template <InType IT, quant::Format F, Encoder E, bool kStoch, Src kSrc>
__global__ void __launch_bounds__(kThreads, kSrc == Src::Codes              ? 3
                                            : kSrc != Src::Values           ? 2
                                            : IT == InType::BF16 && !kStoch ? 4
                                                                            : 3)
    quant_1x128_kernel(const FastParams params) {
  __shared__ __align__(16) uint8_t tile[kTile * kTile];
  __shared__ __align__(16) uint32_t colmax_part[kThreads / 32][kTile];
  __shared__ float col_inverse[kTile];
  constexpr int64_t kInBytes = kSrc != Src::Values ? 1 : static_cast<int64_t>(sizeof(Vec8<IT>) / 8);
  int64_t ty;
  const FastParams p = group_of(params, kInBytes, ty);
  if constexpr (kSrc == Src::SwigluBackward) {  // grid x: the F/128 column blocks of d_gate (F % 128 == 0)
    extern __shared__ uint4 dynamic_smem[];     // kSwigluStageBytes: d_up's staging
    auto* du_stage = reinterpret_cast<uint4(*)[kThreads]>(dynamic_smem);
    if ((ty + 1) * kTile <= p.rows)
      swiglu_backward_tiles<F, E, true>(p, ty, tile, colmax_part, col_inverse, du_stage);
    else
      swiglu_backward_tiles<F, E, false>(p, ty, tile, colmax_part, col_inverse, du_stage);
  } else {
    const bool full = (ty + 1) * kTile <= p.rows && (static_cast<int64_t>(blockIdx.x) + 1) * kTile <= p.cols;
    if (full)
      quant_1x128_tile<IT, F, E, kStoch, kSrc, true>(p, ty, tile, colmax_part, col_inverse);
    else
      quant_1x128_tile<IT, F, E, kStoch, kSrc, false>(p, ty, tile, colmax_part, col_inverse);
  }
}

template <InType IT, quant::Format F, Encoder E, bool kStoch, bool kFull>
__device__ __forceinline__ void quant_128x128_tile(const FastParams& p, int64_t ty, uint8_t* tile, uint32_t* warp_max) {
  const int t = threadIdx.x, a = t >> 4, c = t & 15, warp = t >> 5, lane = t & 31;
  const int64_t r0 = ty * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t col = c0 + 8 * c, row0 = r0 + 8 * a;
  constexpr float fmax = FormatTraits<F>::kMax;

  Vec8<IT> in[8];
  load_block<IT, kFull>(in, p, row0, col);
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) m = max(m, abs_bits(in[i].get(j)));
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  m = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) m = max(m, warp_max[w]);
  const ScaleInverse s = block_scale_dev(__uint_as_float(m), fmax, p.pow2);
  if (t == 0) {
    if (p.q) p.q_scales[ty * p.qs.row + blockIdx.x * p.qs.col] = s.scale;
    if (p.qt) p.qt_scales[blockIdx.x * p.qts.row + ty * p.qts.col] = s.scale;
  }

  uint2 codes[8];  // codes[i]: row 8a+i, columns 8c..8c+7
  uint8_t* qrow = p.q + row0 * p.cols + col;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = in[i].get(j);
    codes[i] = encode8<F, E, kStoch>(v, s.inverse, p.seed, (row0 + i) * p.cols + col, 1);
    if (p.q && (kFull || (col < p.cols && row0 + i < p.rows))) *reinterpret_cast<uint2*>(qrow + i * p.cols) = codes[i];
  }
  if (p.qt == nullptr) return;
  // The same codes transposed: column j of the thread's 8x8 block collects byte j of each row's codes.
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t wi = j < 4 ? codes[i].x : codes[i].y;
      const uint32_t wk = j < 4 ? codes[i + 4].x : codes[i + 4].y;
      lo |= ((wi >> (8 * (j & 3))) & 0xFFu) << (8 * i);
      hi |= ((wk >> (8 * (j & 3))) & 0xFFu) << (8 * i);
    }
    *reinterpret_cast<uint2*>(tile + (8 * c + j) * kTile + 8 * (a ^ c)) = make_uint2(lo, hi);
  }
  __syncthreads();
  write_transposed<kFull>(tile, p.qt, p.rows, p.cols, r0, c0);
}

template <InType IT, quant::Format F, Encoder E, bool kStoch>
__global__ void __launch_bounds__(kThreads, IT == InType::BF16 && F != quant::Format::INT8 ? 4 : 3) quant_128x128_kernel(const FastParams params) {
  __shared__ __align__(16) uint8_t tile[kTile * kTile];
  __shared__ uint32_t warp_max[kThreads / 32];
  int64_t ty;
  const FastParams p = group_of(params, static_cast<int64_t>(sizeof(Vec8<IT>) / 8), ty);
  const bool full = (ty + 1) * kTile <= p.rows && (static_cast<int64_t>(blockIdx.x) + 1) * kTile <= p.cols;
  if (full) quant_128x128_tile<IT, F, E, kStoch, true>(p, ty, tile, warp_max);
  else quant_128x128_tile<IT, F, E, kStoch, false>(p, ty, tile, warp_max);
}

// SwiGLU's forward with its two row-wise quantizations (ops::quantize_swiglu_gate_up): one CTA per 128x128 tile
// of act [rows, F] reads the gate and up tiles of x (BF16 [rows, 2F]) once and writes their 1x128 codes into the
// cache [rows, 2F] (when asked) and act = bf16(silu(g)·u) quantized 1x128 into act's codes [rows, F] -- the
// arithmetic of quantize (encode_rows) and of the SwiGLU kernel (swiglu_device.cuh), so the same bits.
template <quant::Format FA, Encoder E, bool kFull>
__device__ __forceinline__ void swiglu_gate_up_tile(const QuantSwigluGateUpArgs& p) {
  const int t = threadIdx.x, a = t >> 4, c = t & 15;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t col = c0 + 8 * c, row0 = r0 + 8 * a, F = p.ffn;
  Vec8<InType::BF16> g[8], u[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (kFull || row0 + i < p.rows) {
      g[i].load(p.x, (row0 + i) * p.ld_x + col);
      u[i].load(p.x, (row0 + i) * p.ld_x + F + col);
    } else {
      g[i].zero();
      u[i].zero();
    }
  }
  uint32_t rowmax[8];
  if (p.cache != nullptr) {
    row_maxima(g, rowmax);
    encode_rows<quant::Format::E4M3, E, false, kFull>(g, rowmax, p.cache, p.cache_scales, p.cache_strides, p.rows,
                                                      2 * F, row0, col, blockIdx.x, p.cache_pow2, 0);
    row_maxima(u, rowmax);
    encode_rows<quant::Format::E4M3, E, false, kFull>(u, rowmax, p.cache, p.cache_scales, p.cache_strides, p.rows,
                                                      2 * F, row0, F + col, F / kTile + blockIdx.x, p.cache_pow2, 0);
  }
  Bf16x8 v[8];  // BF16 numbers, held packed (exact): floats would spill
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k)
      v[i].set2(k, bf16r(swiglu_value(g[i].get(2 * k), u[i].get(2 * k))),
                bf16r(swiglu_value(g[i].get(2 * k + 1), u[i].get(2 * k + 1))));
  row_maxima(v, rowmax);
  encode_rows<FA, E, false, kFull>(v, rowmax, p.act, p.act_scales, p.act_strides, p.rows, F, row0, col, blockIdx.x,
                                   p.act_pow2, 0);
}

template <quant::Format FA, Encoder E>
__global__ void __launch_bounds__(kThreads, 2) swiglu_gate_up_kernel(const QuantSwigluGateUpArgs p) {
  if ((static_cast<int64_t>(blockIdx.y) + 1) * kTile <= p.rows)
    swiglu_gate_up_tile<FA, E, true>(p);
  else
    swiglu_gate_up_tile<FA, E, false>(p);
}

template <template <InType, quant::Format, Encoder, bool> class Launch, InType IT>
cudaError_t dispatch_format(quant::Format f, Encoder e, const FastParams& p, dim3 grid, cudaStream_t stream) {
  const bool hw = e == Encoder::Hardware;
  switch (f) {
    case quant::Format::E4M3:
      return hw ? Launch<IT, quant::Format::E4M3, Encoder::Hardware, false>::run(p, grid, stream)
                : Launch<IT, quant::Format::E4M3, Encoder::Software, false>::run(p, grid, stream);
    case quant::Format::E5M2:
      return hw ? Launch<IT, quant::Format::E5M2, Encoder::Hardware, false>::run(p, grid, stream)
                : Launch<IT, quant::Format::E5M2, Encoder::Software, false>::run(p, grid, stream);
    case quant::Format::INT8:
      return p.stochastic ? Launch<IT, quant::Format::INT8, Encoder::Software, true>::run(p, grid, stream)
                          : Launch<IT, quant::Format::INT8, Encoder::Software, false>::run(p, grid, stream);
    default: break;  // E5M6 / BF16: no one-byte kernel
  }
  return cudaErrorInvalidValue;
}

template <template <InType, quant::Format, Encoder, bool> class Launch>
cudaError_t dispatch(InType it, quant::Format f, Encoder e, const FastParams& p, dim3 grid, cudaStream_t stream) {
  return it == InType::BF16 ? dispatch_format<Launch, InType::BF16>(f, e, p, grid, stream)
                            : dispatch_format<Launch, InType::F32>(f, e, p, grid, stream);
}

template <InType IT, quant::Format F, Encoder E, bool kStoch>
struct Launch1x128 {
  static cudaError_t run(const FastParams& p, dim3 grid, cudaStream_t stream) {
    quant_1x128_kernel<IT, F, E, kStoch, Src::Values><<<grid, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
};
// Dynamic shared memory of the SwiGLU backward's CTA (d_up staged, packed BF16): with the static buffers over the
// 48 KiB a kernel gets without opting in, hence the attribute, set once per instantiation.
constexpr int kSwigluStageBytes = 8 * kThreads * 16;
template <quant::Format F, Encoder E, Src kSrc>
cudaError_t launch_from_codes(const FastParams& p, dim3 grid, cudaStream_t stream) {
  const auto kernel = quant_1x128_kernel<InType::BF16, F, E, false, kSrc>;
  int smem = 0;
  if constexpr (kSrc == Src::SwigluBackward) {
    static const cudaError_t opted =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSwigluStageBytes);
    if (opted != cudaSuccess) return opted;
    smem = kSwigluStageBytes;
  }
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}
template <Src kSrc>
cudaError_t dispatch_codes(quant::Format f, Encoder e, const FastParams& p, dim3 grid, cudaStream_t stream) {
  const bool hw = e == Encoder::Hardware;
  if (f == quant::Format::E4M3)
    return hw ? launch_from_codes<quant::Format::E4M3, Encoder::Hardware, kSrc>(p, grid, stream)
              : launch_from_codes<quant::Format::E4M3, Encoder::Software, kSrc>(p, grid, stream);
  if (f == quant::Format::E5M2)
    return hw ? launch_from_codes<quant::Format::E5M2, Encoder::Hardware, kSrc>(p, grid, stream)
              : launch_from_codes<quant::Format::E5M2, Encoder::Software, kSrc>(p, grid, stream);
  return cudaErrorInvalidValue;
}
template <InType IT, quant::Format F, Encoder E, bool kStoch>
struct Launch128x128 {
  static cudaError_t run(const FastParams& p, dim3 grid, cudaStream_t stream) {
    quant_128x128_kernel<IT, F, E, kStoch><<<grid, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
};

template <quant::Format FA, Encoder E>
cudaError_t launch_gate_up(const QuantSwigluGateUpArgs& p, dim3 grid, cudaStream_t stream) {
  swiglu_gate_up_kernel<FA, E><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

dim3 tile_grid(const FastParams& p) {
  return dim3(static_cast<unsigned>((p.cols + kTile - 1) / kTile), static_cast<unsigned>((p.rows + kTile - 1) / kTile));
}

}  // namespace

cudaError_t launch_quant_1x128(const FastParams& p, InType it, quant::Format f, Encoder e, cudaStream_t stream) {
  if (p.swiglu == 1) return dispatch_codes<Src::SwigluForward>(f, e, p, tile_grid(p), stream);
  if (p.swiglu == 2) {  // one CTA per column block of d_gate and the matching one of d_up
    if (p.x_cols % (2 * kTile) != 0 || p.cols != p.x_cols) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(p.x_cols / (2 * kTile)), tile_grid(p).y);
    return dispatch_codes<Src::SwigluBackward>(f, e, p, grid, stream);
  }
  if (p.x_scales != nullptr) return dispatch_codes<Src::Codes>(f, e, p, tile_grid(p), stream);  // re-tiling codes
  return dispatch<Launch1x128>(it, f, e, p, tile_grid(p), stream);
}
cudaError_t launch_swiglu_gate_up(const QuantSwigluGateUpArgs& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.ffn / kTile), static_cast<unsigned>((p.rows + kTile - 1) / kTile));
  const bool hw = p.encoder == Encoder::Hardware;
  if (p.act_format == quant::Format::E4M3)
    return hw ? launch_gate_up<quant::Format::E4M3, Encoder::Hardware>(p, grid, stream)
              : launch_gate_up<quant::Format::E4M3, Encoder::Software>(p, grid, stream);
  if (p.act_format == quant::Format::E5M2)
    return hw ? launch_gate_up<quant::Format::E5M2, Encoder::Hardware>(p, grid, stream)
              : launch_gate_up<quant::Format::E5M2, Encoder::Software>(p, grid, stream);
  return cudaErrorInvalidValue;
}
cudaError_t launch_quant_128x128(const FastParams& p, InType it, quant::Format f, Encoder e, cudaStream_t stream) {
  return dispatch<Launch128x128>(it, f, e, p, tile_grid(p), stream);
}

}  // namespace fp8train::ops::cuda::detail
