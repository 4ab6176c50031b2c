// CUDA kernels of RMSNorm (forward, backward), RoPE and SwiGLU (forward, backward) (elementwise_launch.h).
//   RMSNorm  one warp per row holding the row in registers for 16-byte-aligned rows up to dim 2048; otherwise
//            one warp per row up to dim 1024 (8 rows per CTA), else one CTA of 256 threads per row (grid-stride over
//            rows), reading the row again (L1/L2) to write y or dx. Σx² by warp shuffles and a fixed tree (the
//            order differs from the CPU's sequential sum: rstd, y and dx within rounding of it). dw: per 64-row chunk a
//            column-parallel sequential sum into F32 scratch, then the chunks added into dw in order — the CPU's exact
//            order, so dw is bit-exact. The backward with dw of 16-byte-aligned rows up to dim 2048 is one pass over
//            x and dy: one CTA per 64-row chunk, a thread per 8 columns, the rows in groups software-pipelined over
//            two register sets (the next group's loads in flight while the current group is reduced over the CTA,
//            one barrier per group, and written), so an SM's memory pipe does not idle through the reductions.
//   RoPE     a cos/sin table [seq_len, rope_dim/2] computed in double and rounded to F32 (the CPU's table; device
//            pow/sin/cos are within 2 ulp of double, so an entry can differ from the CPU's by 1 F32 ulp only
//            when the double lands within ~2^-28 relative of an F32 rounding boundary; the launcher keeps it per
//            setting), then one thread per 4 pairs (16-byte accesses when aligned) or per pair.
//   SwiGLU   one thread per 8 columns (16-byte accesses when aligned) or per column; σ(g) = 1/(1 + e^−g) with
//            the device's expf (within 2 ulp; the CPU's glibc expf within ~0.5 ulp, so σ and the outputs can differ
//            by an ulp or two). e^−g in double, rounded to F32, agreed with the CPU but for rare near-ties and held
//            SwiGLU at ~61 % of the copy bandwidth: FP64 issues at half the FP32 rate and the exp is ~20 of them.
// All products and sums are rounded one by one (__fmul_rn / __fadd_rn: no FMA contraction), as the CPU computes.
#include <algorithm>

#include "ops/cuda/elementwise_device.cuh"
#include "ops/cuda/elementwise_launch.h"
#include "ops/cuda/swiglu_device.cuh"

namespace fp8train::ops::cuda::ew {
namespace {

// The sum over the CTA (blockDim.x a multiple of 32), returned to every thread; a fixed order (deterministic).
__device__ float block_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // red may still be read by the previous call's threads
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < warps ? red[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xFFFFFFFFu, t, o);
  return t;
}


// The threads that reduce one row: a warp (kWarp, rows up to kWarpRowDim: 8 rows per CTA) or the whole CTA.
inline constexpr int64_t kWarpRowDim = 1024;
template <bool kWarp>
struct Team {
  __device__ static int lane() { return kWarp ? threadIdx.x % 32 : threadIdx.x; }
  __device__ static int size() { return kWarp ? 32 : blockDim.x; }
  __device__ static int64_t first_row() {
    return kWarp ? static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  }
  __device__ static int64_t row_step() {
    return kWarp ? static_cast<int64_t>(gridDim.x) * (blockDim.x / 32) : gridDim.x;
  }
  __device__ static float sum(float v, float* red) {
    if constexpr (kWarp) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      return v;
    } else {
      return block_sum(v, red);
    }
  }
};
unsigned team_blocks(int64_t rows, bool warp) {
  return static_cast<unsigned>(std::min<int64_t>(warp ? ceil_div(rows, kThreads / 32) : rows, 1 << 20));
}

// ---- RMSNorm ---------------------------------------------------------------------------------------------------
template <class S, bool kVec, bool kWarp>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(RmsNormArgs p, const S* x, const float* w, S* y, float* rstd) {
  using T = Team<kWarp>;
  __shared__ float red[32];
  const int64_t nvec = kVec ? p.dim / 8 : 0;
  for (int64_t r = T::first_row(); r < p.rows; r += T::row_step()) {
    const S* xr = x + r * p.ld_x;
    S* yr = y + r * p.ld_y;
    float ss = 0.0f;
    for (int64_t i = T::lane(); i < nvec; i += T::size()) {
      float v[8];
      ld8(xr + 8 * i, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) ss = fmaf(v[k], v[k], ss);
    }
    for (int64_t c = 8 * nvec + T::lane(); c < p.dim; c += T::size()) {
      const float v = ld1(xr + c);
      ss = fmaf(v, v, ss);
    }
    ss = T::sum(ss, red);
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(p.dim)), p.eps)));
    if (rstd != nullptr && T::lane() == 0) rstd[r] = rs;
    for (int64_t i = T::lane(); i < nvec; i += T::size()) {
      float v[8], g[8];
      ld8(xr + 8 * i, v);
      ld8(w + 8 * i, g);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(__fmul_rn(v[k], rs), g[k]);
      st8(yr + 8 * i, v);
    }
    for (int64_t c = 8 * nvec + T::lane(); c < p.dim; c += T::size())
      st1(yr + c, __fmul_rn(__fmul_rn(ld1(xr + c), rs), w[c]));
  }
}

// dx (+)= rstd·dy·w − x·k with k = rstd³·(Σ dy·w·x)/dim, each product rounded as the CPU rounds it.
template <class S, bool kVec, bool kWarp>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_dx_kernel(RmsNormArgs p, const S* x, const float* w, const float* rstd, const S* dy, S* dx) {
  using T = Team<kWarp>;
  __shared__ float red[32];
  const int64_t nvec = kVec ? p.dim / 8 : 0;
  const float inv_dim = __fdiv_rn(1.0f, static_cast<float>(p.dim));
  for (int64_t r = T::first_row(); r < p.rows; r += T::row_step()) {
    const S* xr = x + r * p.ld_x;
    const S* dyr = dy + r * p.ld_dy;
    S* dxr = dx + r * p.ld_dx;
    float dot = 0.0f;
    for (int64_t i = T::lane(); i < nvec; i += T::size()) {
      float a[8], g[8], b[8];
      ld8(dyr + 8 * i, a);
      ld8(w + 8 * i, g);
      ld8(xr + 8 * i, b);
#pragma unroll
      for (int k = 0; k < 8; ++k) dot = fmaf(__fmul_rn(a[k], g[k]), b[k], dot);
    }
    for (int64_t c = 8 * nvec + T::lane(); c < p.dim; c += T::size())
      dot = fmaf(__fmul_rn(ld1(dyr + c), w[c]), ld1(xr + c), dot);
    dot = T::sum(dot, red);
    const float rs = rstd[r];
    const float k = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(rs, rs), rs), dot), inv_dim);
    for (int64_t i = T::lane(); i < nvec; i += T::size()) {
      float a[8], g[8], b[8], o[8];
      ld8(dyr + 8 * i, a);
      ld8(w + 8 * i, g);
      ld8(xr + 8 * i, b);
      if (p.accumulate_dx) ld8(dxr + 8 * i, o);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float d = __fsub_rn(__fmul_rn(__fmul_rn(rs, a[j]), g[j]), __fmul_rn(b[j], k));
        o[j] = p.accumulate_dx ? __fadd_rn(o[j], d) : d;
      }
      st8(dxr + 8 * i, o);
    }
    for (int64_t c = 8 * nvec + T::lane(); c < p.dim; c += T::size()) {
      const float d = __fsub_rn(__fmul_rn(__fmul_rn(rs, ld1(dyr + c)), w[c]), __fmul_rn(ld1(xr + c), k));
      st1(dxr + c, p.accumulate_dx ? __fadd_rn(ld1(dxr + c), d) : d);
    }
  }
}

// The same two kernels with the row held in registers (as stored: 16 bytes per 8 BF16 values) between the
// reduction and the output, one warp per row for rows of up to 8·kCache·32 values: x (and dy) read from memory
// once, every load of a row in flight at once, no CTA barrier. Same summation order as the kernels above (lane
// sums over j, then the shuffle tree), so the results are identical to theirs.
template <class S>
struct alignas(16) Raw8 {
  S e[8];
};
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(uint16_t v) { return bf16_widen(v); }

// 8 values as loaded (16 bytes of BF16 kept as 4 words, so a register holds two values until they are widened).
template <class S>
struct Vec8;
template <>
struct alignas(16) Vec8<uint16_t> {
  uint32_t w[4];
  __device__ __forceinline__ float at(int k) const {
    return __uint_as_float(k % 2 == 0 ? w[k / 2] << 16 : w[k / 2] & 0xFFFF0000u);
  }
};
template <>
struct alignas(16) Vec8<float> {
  float e[8];
  __device__ __forceinline__ float at(int k) const { return e[k]; }
};

// The forward: one warp per row, the row held in registers between Σx² and the output (one read of x). Measured
// on an H200: software-pipelining two rows per warp over a one-wave grid made [8192, 2048] slower (0.031 against
// 0.028 ms, docs/gpu_training.md), so one row per warp over as many CTAs as rows need.
template <class S, int kCache>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_cached_kernel(RmsNormArgs p, const S* x, const float* w, S* y, float* rstd) {
  using T = Team<true>;
  const int64_t nvec = p.dim / 8;
  for (int64_t r = T::first_row(); r < p.rows; r += T::row_step()) {
    const auto* xr = reinterpret_cast<const Raw8<S>*>(x + r * p.ld_x);
    S* yr = y + r * p.ld_y;
    Raw8<S> v[kCache];
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int64_t i = T::lane() + 32 * j;
      if (i < nvec) v[j] = xr[i];
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      if (T::lane() + 32 * j < nvec) {
#pragma unroll
        for (int k = 0; k < 8; ++k) ss = fmaf(widen(v[j].e[k]), widen(v[j].e[k]), ss);
      }
    }
    ss = T::sum(ss, nullptr);
    const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(p.dim)), p.eps)));
    if (rstd != nullptr && T::lane() == 0) rstd[r] = rs;
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int64_t i = T::lane() + 32 * j;
      if (i < nvec) {
        float g[8], o[8];
        ld8(w + 8 * i, g);
#pragma unroll
        for (int k = 0; k < 8; ++k) o[k] = __fmul_rn(__fmul_rn(widen(v[j].e[k]), rs), g[k]);
        st8(yr + 8 * i, o);
      }
    }
  }
}

template <class S, int kCache>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_dx_cached_kernel(RmsNormArgs p, const S* x, const float* w, const float* rstd, const S* dy, S* dx) {
  using T = Team<true>;
  const int64_t nvec = p.dim / 8;
  const float inv_dim = __fdiv_rn(1.0f, static_cast<float>(p.dim));
  for (int64_t r = T::first_row(); r < p.rows; r += T::row_step()) {
    const auto* xr = reinterpret_cast<const Raw8<S>*>(x + r * p.ld_x);
    const auto* dyr = reinterpret_cast<const Raw8<S>*>(dy + r * p.ld_dy);
    S* dxr = dx + r * p.ld_dx;
    Raw8<S> a[kCache], b[kCache];
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int64_t i = T::lane() + 32 * j;
      if (i < nvec) {
        a[j] = dyr[i];
        b[j] = xr[i];
      }
    }
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int64_t i = T::lane() + 32 * j;
      if (i < nvec) {
        float g[8];
        ld8(w + 8 * i, g);
#pragma unroll
        for (int k = 0; k < 8; ++k) dot = fmaf(__fmul_rn(widen(a[j].e[k]), g[k]), widen(b[j].e[k]), dot);
      }
    }
    dot = T::sum(dot, nullptr);
    const float rs = rstd[r];
    const float k = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(rs, rs), rs), dot), inv_dim);
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int64_t i = T::lane() + 32 * j;
      if (i < nvec) {
        float g[8], o[8];
        ld8(w + 8 * i, g);
        if (p.accumulate_dx) ld8(dxr + 8 * i, o);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float d = __fsub_rn(__fmul_rn(__fmul_rn(rs, widen(a[j].e[q])), g[q]), __fmul_rn(widen(b[j].e[q]), k));
          o[q] = p.accumulate_dx ? __fadd_rn(o[q], d) : d;
        }
        st8(dxr + 8 * i, o);
      }
    }
  }
}

// Whether the cached kernels serve a row (vectorized rows of up to 8·kRmsNormCache·32 values).
inline constexpr int kRmsNormCache = 8;
bool rmsnorm_cached(int64_t dim) { return dim % 8 == 0 && dim / 8 <= int64_t{kRmsNormCache} * 32; }

// The whole backward of 16-byte-aligned rows of up to 2048 values in one pass over x and dy: one CTA per
// 64-row chunk of the dw order, each thread owning one 8-column vector. Rows go in groups of kG, software-pipelined
// over two register sets: the next group's loads (x, dy, and the old dx when accumulating) are issued before the
// current group is reduced and written, so the SM's loads stay in flight through the reductions and barriers. A
// group is 128 bytes each of x and dy per thread (64 KB per CTA: 8 BF16 or 4 F32 rows), half that when
// accumulating (x, dy and dx: 48 KB per CTA), so two sets fit in the registers; the chunk's rstd waits in shared
// memory. Each row's Σ dy·w·x is reduced over the CTA (per thread over its 8 columns, then the warp's shuffle tree,
// then the warps in order: one barrier per group, the per-warp sums double-buffered by group parity so no barrier
// is needed before they are overwritten), dx written, and the thread's dw partial sums advanced in row order — the
// partial kernel's exact sums, so dw stays bit-exact. The chunk's partials go to `partial`; the sum kernel adds
// them into dw.
template <class S, bool kAcc>
inline constexpr int kRmsNormGroup = (kAcc ? 64 : 128) / static_cast<int>(sizeof(Vec8<S>));
template <class S, bool kAcc>
struct RmsNormRows {
  static constexpr int kG = kRmsNormGroup<S, kAcc>;
  Vec8<S> dy[kG], x[kG], dx[kAcc ? kG : 1];  // dx: the old values (kAcc)
};

// Issues the loads of rows r0.. (those below r_end; kFull: all kG of them) of this thread's vector i.
template <bool kFull, class S, bool kAcc>
__device__ __forceinline__ void rmsnorm_load_rows(RmsNormRows<S, kAcc>& g, const RmsNormArgs& p, const S* x,
                                                  const S* dy, const S* dx, int64_t i, bool mine, int64_t r0,
                                                  int64_t r_end) {
  if (!mine) return;
#pragma unroll
  for (int q = 0; q < g.kG; ++q)
    if (kFull || r0 + q < r_end) {
      g.dy[q] = *reinterpret_cast<const Vec8<S>*>(dy + (r0 + q) * p.ld_dy + 8 * i);
      g.x[q] = *reinterpret_cast<const Vec8<S>*>(x + (r0 + q) * p.ld_x + 8 * i);
      if constexpr (kAcc) g.dx[q] = *reinterpret_cast<const Vec8<S>*>(dx + (r0 + q) * p.ld_dx + 8 * i);
    }
}

// Reduces rows r0.. of `g` over the CTA (red: this group parity's [warp][row] sums; rs_chunk: rstd of the chunk's
// rows from its first row c0), writes their dx and advances acc. One barrier: red of this parity was last read two
// groups ago, before the previous group's barrier. kFull (every group but a ragged last one) drops the per-row
// bounds checks, so the rows' shuffle chains and arithmetic interleave instead of running row after row.
template <bool kFull, class S, bool kAcc>
__device__ __forceinline__ void rmsnorm_rows(const RmsNormRows<S, kAcc>& g, const RmsNormArgs& p, S* dx, int64_t i,
                                             bool mine, int64_t r0, int64_t r_end, const float (&w)[8], float (&acc)[8],
                                             float inv_dim, float (*red)[RmsNormRows<S, kAcc>::kG],
                                             const float* rs_chunk, int64_t c0) {
  constexpr int kG = RmsNormRows<S, kAcc>::kG;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float dot[kG];
#pragma unroll
  for (int q = 0; q < kG; ++q) dot[q] = 0.0f;
  if (mine) {
#pragma unroll
    for (int q = 0; q < kG; ++q)
      if (kFull || r0 + q < r_end) {
#pragma unroll
        for (int k = 0; k < 8; ++k) dot[q] = fmaf(__fmul_rn(g.dy[q].at(k), w[k]), g.x[q].at(k), dot[q]);
      }
  }
#pragma unroll
  for (int q = 0; q < kG; ++q) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot[q] += __shfl_xor_sync(0xFFFFFFFFu, dot[q], o);
  }
  if (lane == 0) {
#pragma unroll
    for (int q = 0; q < kG; ++q) red[warp][q] = dot[q];
  }
  __syncthreads();
  if (!mine) return;
#pragma unroll
  for (int q = 0; q < kG; ++q) {
    if (!kFull && r0 + q >= r_end) continue;
    float t = 0.0f;
#pragma unroll
    for (int w8 = 0; w8 < kThreads / 32; ++w8) t = __fadd_rn(t, red[w8][q]);
    // dx (+)= rstd·dy·w − x·k with k = rstd³·(Σ dy·w·x)/dim.
    const float rs = rs_chunk[r0 + q - c0];
    const float kk = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(rs, rs), rs), t), inv_dim);
    float o[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float av = g.dy[q].at(k), bv = g.x[q].at(k);
      const float d = __fsub_rn(__fmul_rn(__fmul_rn(rs, av), w[k]), __fmul_rn(bv, kk));
      if constexpr (kAcc)
        o[k] = __fadd_rn(g.dx[q].at(k), d);
      else
        o[k] = d;
      acc[k] = __fadd_rn(acc[k], __fmul_rn(__fmul_rn(av, bv), rs));
    }
    st8(dx + (r0 + q) * p.ld_dx + 8 * i, o);
  }
}

template <class S, bool kAcc>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_fused_kernel(RmsNormArgs p, const S* x, const float* w, const float* rstd, const S* dy, S* dx,
                                  float* partial) {
  using Rows = RmsNormRows<S, kAcc>;
  constexpr int kG = Rows::kG;
  __shared__ float red[2][kThreads / 32][kG];  // per group parity: [warp][row]
  __shared__ float rs_chunk[kRmsNormRowsPerChunk];  // rstd of the chunk's rows (read after the first barrier)
  // The dw sum kernel (launched as this grid's programmatic dependent) may be scheduled now: it waits for this
  // grid's completion and memory before it reads anything, and is small enough to sit beside these CTAs.
  asm volatile("griddepcontrol.launch_dependents;");
  const int64_t i = threadIdx.x;  // this thread's vector
  const bool mine = i < p.dim / 8;
  const float inv_dim = __fdiv_rn(1.0f, static_cast<float>(p.dim));
  float g[8], acc[8];
  if (mine) ld8(w + 8 * i, g);
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
  const int64_t ch = blockIdx.x, c0 = ch * kRmsNormRowsPerChunk;
  const int64_t r_end = std::min(p.rows, c0 + kRmsNormRowsPerChunk);
  if (c0 + threadIdx.x < r_end && threadIdx.x < kRmsNormRowsPerChunk) rs_chunk[threadIdx.x] = rstd[c0 + threadIdx.x];
  const auto load = [&](Rows& rows, int64_t r) {
    if (r + kG <= r_end)
      rmsnorm_load_rows<true>(rows, p, x, dy, dx, i, mine, r, r_end);
    else if (r < r_end)
      rmsnorm_load_rows<false>(rows, p, x, dy, dx, i, mine, r, r_end);
  };
  const auto reduce_write = [&](const Rows& rows, int64_t r, float(*red_parity)[kG]) {
    if (r + kG <= r_end)
      rmsnorm_rows<true>(rows, p, dx, i, mine, r, r_end, g, acc, inv_dim, red_parity, rs_chunk, c0);
    else
      rmsnorm_rows<false>(rows, p, dx, i, mine, r, r_end, g, acc, inv_dim, red_parity, rs_chunk, c0);
  };
  Rows even, odd;  // the chunk's groups 0, 2, 4, ... and 1, 3, 5, ...
  int64_t r0 = c0;
  load(even, r0);
  for (; r0 < r_end; r0 += 2 * kG) {
    load(odd, r0 + kG);
    reduce_write(even, r0, red[0]);
    if (r0 + kG >= r_end) break;
    load(even, r0 + 2 * kG);
    reduce_write(odd, r0 + kG, red[1]);
  }
  if (mine) st8(partial + ch * p.dim + 8 * i, acc);
}

// partial[ch, c] = Σ_{r in chunk ch, in order} dy[r, c]·x[r, c]·rstd[r] (grid: x over columns, y over chunks).
template <class S>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_dw_partial_kernel(RmsNormArgs p, const S* x, const float* rstd, const S* dy, float* partial) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.dim) return;
  const int64_t chunks = ceil_div(p.rows, kRmsNormRowsPerChunk);
  for (int64_t ch = blockIdx.y; ch < chunks; ch += gridDim.y) {
    const int64_t r1 = std::min(p.rows, (ch + 1) * kRmsNormRowsPerChunk);
    float acc = 0.0f;
    for (int64_t r = ch * kRmsNormRowsPerChunk; r < r1; ++r)
      acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(ld1(dy + r * p.ld_dy + c), ld1(x + r * p.ld_x + c)), rstd[r]));
    partial[ch * p.dim + c] = acc;
  }
}

// dw[c] += partial[0, c] + partial[1, c] + ... in chunk order: one thread per column, its loads issued kBatch at a
// time (they are independent; only the sum is sequential), small CTAs to spread the columns over more SMs. Launched
// after the fused backward as a programmatic dependent (rmsnorm_dw_sum), it waits here for that grid's completion
// and memory (a no-op after an ordinary launch), so its launch latency overlaps the backward.
inline constexpr int kDwSumThreads = 64;
__global__ void __launch_bounds__(kDwSumThreads)
    rmsnorm_dw_sum_kernel(int64_t dim, int64_t chunks, const float* partial, float* dw) {
  constexpr int kBatch = 32;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  float acc = dw[c];
  int64_t ch = 0;
  for (; ch + kBatch <= chunks; ch += kBatch) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) v[j] = partial[(ch + j) * dim + c];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) acc = __fadd_rn(acc, v[j]);
  }
  for (; ch < chunks; ++ch) acc = __fadd_rn(acc, partial[ch * dim + c]);
  dw[c] = acc;
}

// Launches the dw sum; `dependent`: as a programmatic dependent of the stream's previous kernel (the sum still
// reads nothing before that kernel has completed; only its launch overlaps it).
cudaError_t rmsnorm_dw_sum(int64_t dim, int64_t chunks, const float* partial, float* dw, bool dependent,
                           cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ceil_div(dim, kDwSumThreads)), 1, 1);
  config.blockDim = dim3(kDwSumThreads, 1, 1);
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (dependent) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  const cudaError_t err = cudaLaunchKernelEx(&config, rmsnorm_dw_sum_kernel, dim, chunks, partial, dw);
  return err != cudaSuccess ? err : cudaGetLastError();
}

template <class S>
cudaError_t rmsnorm_forward_t(const RmsNormArgs& p, const void* x, const float* w, void* y, float* rstd,
                              cudaStream_t stream) {
  const bool vec =
      rows_aligned16(x, p.ld_x, p.type, p.rows) && rows_aligned16(y, p.ld_y, p.type, p.rows) && aligned16(w);
  const auto* px = static_cast<const S*>(x);
  auto* py = static_cast<S*>(y);
  const bool warp = p.dim <= kWarpRowDim;
  const unsigned blocks = team_blocks(p.rows, warp);
  if (vec && rmsnorm_cached(p.dim)) {
    rmsnorm_forward_cached_kernel<S, kRmsNormCache>
        <<<team_blocks(p.rows, true), kThreads, 0, stream>>>(p, px, w, py, rstd);
  } else if (vec && warp)
    rmsnorm_forward_kernel<S, true, true><<<blocks, kThreads, 0, stream>>>(p, px, w, py, rstd);
  else if (vec) rmsnorm_forward_kernel<S, true, false><<<blocks, kThreads, 0, stream>>>(p, px, w, py, rstd);
  else if (warp) rmsnorm_forward_kernel<S, false, true><<<blocks, kThreads, 0, stream>>>(p, px, w, py, rstd);
  else rmsnorm_forward_kernel<S, false, false><<<blocks, kThreads, 0, stream>>>(p, px, w, py, rstd);
  return cudaGetLastError();
}

template <class S>
cudaError_t rmsnorm_backward_t(const RmsNormArgs& p, const void* x, const float* w, const float* rstd, const void* dy,
                               void* dx, float* dw, float* dw_partial, cudaStream_t stream) {
  const bool vec = rows_aligned16(x, p.ld_x, p.type, p.rows) && rows_aligned16(dy, p.ld_dy, p.type, p.rows) &&
                   rows_aligned16(dx, p.ld_dx, p.type, p.rows) && aligned16(w);
  const auto* px = static_cast<const S*>(x);
  const auto* pdy = static_cast<const S*>(dy);
  auto* pdx = static_cast<S*>(dx);
  const bool warp = p.dim <= kWarpRowDim;
  const unsigned blocks = team_blocks(p.rows, warp);
  const int64_t chunks = ceil_div(p.rows, kRmsNormRowsPerChunk);
  if (vec && dw != nullptr && p.dim % 8 == 0 && p.dim / 8 <= kThreads && aligned16(dw_partial) && chunks <= 65535) {
    if (p.accumulate_dx)
      rmsnorm_backward_fused_kernel<S, true>
          <<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx, dw_partial);
    else
      rmsnorm_backward_fused_kernel<S, false>
          <<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx, dw_partial);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    return rmsnorm_dw_sum(p.dim, chunks, dw_partial, dw, /*dependent=*/true, stream);
  }
  if (vec && rmsnorm_cached(p.dim)) {
    rmsnorm_dx_cached_kernel<S, kRmsNormCache>
        <<<team_blocks(p.rows, true), kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx);
  } else if (vec && warp)
    rmsnorm_dx_kernel<S, true, true><<<blocks, kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx);
  else if (vec) rmsnorm_dx_kernel<S, true, false><<<blocks, kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx);
  else if (warp) rmsnorm_dx_kernel<S, false, true><<<blocks, kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx);
  else rmsnorm_dx_kernel<S, false, false><<<blocks, kThreads, 0, stream>>>(p, px, w, rstd, pdy, pdx);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || dw == nullptr) return err;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.dim, kThreads)),
                  static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
  rmsnorm_dw_partial_kernel<S><<<grid, kThreads, 0, stream>>>(p, px, rstd, pdy, dw_partial);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return rmsnorm_dw_sum(p.dim, chunks, dw_partial, dw, /*dependent=*/false, stream);
}

// ---- RoPE ------------------------------------------------------------------------------------------------------
__global__ void rope_table_kernel(RopeArgs p, float* table) {
  const int64_t half = p.rope_dim / 2;
  const int64_t n = p.seq_len * half;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pos = idx / half, i = idx % half;
    const double inv_freq = pow(p.theta, -2.0 * static_cast<double>(i) / static_cast<double>(p.rope_dim));
    const double angle = static_cast<double>(p.pos_offset + pos) * inv_freq;
    const double s = sin(angle);
    table[2 * idx] = static_cast<float>(cos(angle));
    table[2 * idx + 1] = static_cast<float>(p.inverse ? -s : s);
  }
}

template <class S>
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeArgs p, S* x, const float* table) {
  const int64_t half = p.rope_dim / 2;
  const int64_t pairs = p.heads * half;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = r0; r < p.rows; r += rstep) {
    const float* tr = table + 2 * (r % p.seq_len) * half;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < pairs; j += step) {
      const int64_t h = j / half, i = j - h * half;
      S* v = x + r * p.ld + h * p.head_stride + 2 * i;
      const float2 cs = *reinterpret_cast<const float2*>(tr + 2 * i);
      const float x0 = ld1(v), x1 = ld1(v + 1);
      st1(v, __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)));
      st1(v + 1, __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
    }
  }
}

// Four pairs per thread (16-byte accesses of BF16, two of F32): rope_dim/2 a multiple of 4 and aligned rows and heads.
template <class S>
__global__ void __launch_bounds__(kThreads) rope_vec_kernel(RopeArgs p, S* x, const float* table) {
  const int64_t half = p.rope_dim / 2, quads = half / 4;
  const int64_t items = p.heads * quads;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = r0; r < p.rows; r += rstep) {
    const float* tr = table + 2 * (r % p.seq_len) * half;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < items; j += step) {
      const int64_t h = j / quads, i = 4 * (j - h * quads);  // first pair of the four
      S* v = x + r * p.ld + h * p.head_stride + 2 * i;
      float e[8], cs[8];
      ld8(v, e);
      ld8(tr + 2 * i, cs);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float x0 = e[2 * q], x1 = e[2 * q + 1], c = cs[2 * q], sn = cs[2 * q + 1];
        e[2 * q] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
        e[2 * q + 1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
      }
      st8(v, e);
    }
  }
}

// ---- SwiGLU ----------------------------------------------------------------------------------------------------

template <class S, bool kVec>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(SwigluArgs p, const S* in, S* out) {
  const int64_t f = p.ffn_dim;
  const int64_t nvec = kVec ? f / 8 : 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = r0; r < p.rows; r += rstep) {
    const S* g = in + r * p.ld_in;
    const S* u = g + f;
    S* o = out + r * p.ld_out;
    for (int64_t i = t0; i < nvec; i += step) {
      float gv[8], uv[8];
      ld8(g + 8 * i, gv);
      ld8(u + 8 * i, uv);
#pragma unroll
      for (int k = 0; k < 8; ++k) gv[k] = swiglu_value(gv[k], uv[k]);
      st8(o + 8 * i, gv);
    }
    for (int64_t c = 8 * nvec + t0; c < f; c += step) {
      const float gc = ld1(g + c);
      st1(o + c, swiglu_value(gc, ld1(u + c)));
    }
  }
}

template <class S, bool kVec>
__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(SwigluArgs p, const S* in, const S* dout, S* din) {
  const int64_t f = p.ffn_dim;
  const int64_t nvec = kVec ? f / 8 : 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = r0; r < p.rows; r += rstep) {
    const S* g = in + r * p.ld_in;
    const S* u = g + f;
    const S* d = dout + r * p.ld_out;
    S* dg = din + r * p.ld_in;
    S* du = dg + f;
    for (int64_t i = t0; i < nvec; i += step) {
      float gv[8], uv[8], dv[8], og[8], ou[8];
      ld8(g + 8 * i, gv);
      ld8(u + 8 * i, uv);
      ld8(d + 8 * i, dv);
#pragma unroll
      for (int k = 0; k < 8; ++k) swiglu_grad(gv[k], uv[k], dv[k], og[k], ou[k]);
      st8(du + 8 * i, ou);
      st8(dg + 8 * i, og);
    }
    for (int64_t c = 8 * nvec + t0; c < f; c += step) {
      float og, ou;
      swiglu_grad(ld1(g + c), ld1(u + c), ld1(d + c), og, ou);
      st1(du + c, ou);
      st1(dg + c, og);
    }
  }
}

// The up half starts F elements into the row: it is 16-byte aligned when F·size is.
bool swiglu_vec(const SwigluArgs& p, const void* in, const void* out_rows, const void* din) {
  const bool up_aligned = (p.ffn_dim * static_cast<int64_t>(size_of(p.type))) % 16 == 0;
  return up_aligned && rows_aligned16(in, p.ld_in, p.type, p.rows) &&
         rows_aligned16(out_rows, p.ld_out, p.type, p.rows) &&
         (din == nullptr || rows_aligned16(din, p.ld_in, p.type, p.rows));
}

}  // namespace

cudaError_t rmsnorm_forward(const RmsNormArgs& p, const void* x, const float* w, void* y, float* rstd,
                            cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  if (p.type == Ty::BF16) return rmsnorm_forward_t<uint16_t>(p, x, w, y, rstd, stream);
  return rmsnorm_forward_t<float>(p, x, w, y, rstd, stream);
}

cudaError_t rmsnorm_backward(const RmsNormArgs& p, const void* x, const float* w, const float* rstd, const void* dy,
                             void* dx, float* dw, float* dw_partial, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  if (p.type == Ty::BF16) return rmsnorm_backward_t<uint16_t>(p, x, w, rstd, dy, dx, dw, dw_partial, stream);
  return rmsnorm_backward_t<float>(p, x, w, rstd, dy, dx, dw, dw_partial, stream);
}

cudaError_t rope_table(const RopeArgs& p, float* table, cudaStream_t stream) {
  const int64_t entries = p.seq_len * (p.rope_dim / 2);
  if (entries <= 0) return cudaSuccess;
  rope_table_kernel<<<static_cast<unsigned>(std::min<int64_t>(ceil_div(entries, kThreads), 4096)), kThreads, 0,
                      stream>>>(p, table);
  return cudaGetLastError();
}

cudaError_t rope(const RopeArgs& p, void* x, const float* table, cudaStream_t stream) {
  const int64_t half = p.rope_dim / 2;
  if (p.rows <= 0 || p.heads <= 0 || half <= 0) return cudaSuccess;
  const int64_t es = static_cast<int64_t>(size_of(p.type));
  const bool vec = half % 4 == 0 && aligned16(x) && (p.rows <= 1 || (p.ld * es) % 16 == 0) &&
                   (p.heads <= 1 || (p.head_stride * es) % 16 == 0) && aligned16(table);
  if (vec) {
    const Shape2d sh = shape_2d(p.rows, p.heads * half / 4);
    if (p.type == Ty::BF16)
      rope_vec_kernel<uint16_t><<<sh.grid, sh.block, 0, stream>>>(p, static_cast<uint16_t*>(x), table);
    else
      rope_vec_kernel<float><<<sh.grid, sh.block, 0, stream>>>(p, static_cast<float*>(x), table);
    return cudaGetLastError();
  }
  const Shape2d sh = shape_2d(p.rows, p.heads * half);
  if (p.type == Ty::BF16)
    rope_kernel<uint16_t><<<sh.grid, sh.block, 0, stream>>>(p, static_cast<uint16_t*>(x), table);
  else
    rope_kernel<float><<<sh.grid, sh.block, 0, stream>>>(p, static_cast<float*>(x), table);
  return cudaGetLastError();
}

cudaError_t swiglu_forward(const SwigluArgs& p, const void* in, void* out, cudaStream_t stream) {
  if (p.rows <= 0 || p.ffn_dim <= 0) return cudaSuccess;
  const bool vec = swiglu_vec(p, in, out, nullptr);
  const Shape2d sh = shape_2d(p.rows, vec ? std::max<int64_t>(p.ffn_dim / 8, p.ffn_dim % 8) : p.ffn_dim);
  if (p.type == Ty::BF16) {
    const auto* i = static_cast<const uint16_t*>(in);
    auto* o = static_cast<uint16_t*>(out);
    if (vec)
      swiglu_forward_kernel<uint16_t, true><<<sh.grid, sh.block, 0, stream>>>(p, i, o);
    else
      swiglu_forward_kernel<uint16_t, false><<<sh.grid, sh.block, 0, stream>>>(p, i, o);
  } else {
    const auto* i = static_cast<const float*>(in);
    auto* o = static_cast<float*>(out);
    if (vec)
      swiglu_forward_kernel<float, true><<<sh.grid, sh.block, 0, stream>>>(p, i, o);
    else
      swiglu_forward_kernel<float, false><<<sh.grid, sh.block, 0, stream>>>(p, i, o);
  }
  return cudaGetLastError();
}

cudaError_t swiglu_backward(const SwigluArgs& p, const void* in, const void* dout, void* din, cudaStream_t stream) {
  if (p.rows <= 0 || p.ffn_dim <= 0) return cudaSuccess;
  const bool vec = swiglu_vec(p, in, dout, din);
  const Shape2d sh = shape_2d(p.rows, vec ? std::max<int64_t>(p.ffn_dim / 8, p.ffn_dim % 8) : p.ffn_dim);
  if (p.type == Ty::BF16) {
    const auto* i = static_cast<const uint16_t*>(in);
    const auto* d = static_cast<const uint16_t*>(dout);
    auto* o = static_cast<uint16_t*>(din);
    if (vec)
      swiglu_backward_kernel<uint16_t, true><<<sh.grid, sh.block, 0, stream>>>(p, i, d, o);
    else
      swiglu_backward_kernel<uint16_t, false><<<sh.grid, sh.block, 0, stream>>>(p, i, d, o);
  } else {
    const auto* i = static_cast<const float*>(in);
    const auto* d = static_cast<const float*>(dout);
    auto* o = static_cast<float*>(din);
    if (vec)
      swiglu_backward_kernel<float, true><<<sh.grid, sh.block, 0, stream>>>(p, i, d, o);
    else
      swiglu_backward_kernel<float, false><<<sh.grid, sh.block, 0, stream>>>(p, i, d, o);
  }
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::ew
