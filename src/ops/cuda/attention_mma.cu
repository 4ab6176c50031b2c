// Tensor-core attention forward and backward (BF16 storage, FP32 accumulation and softmax), flash-attention-2 style
// on mma.sync.m16n8k16 (inline PTX) with ldmatrix operand loads and cp.async tiles.
// Forward: a CTA of 8 warps owns kFwdBM = 128 queries of one (b, h) (16 per warp) and loops over key blocks of
//   kBN = 64 up to the causal limit (heaviest query blocks launched first; a warp skips the block past its rows).
//   Scores S = Q·Kᵀ in FP32, online softmax in FP32 in the log2 domain (scale·log2e folded into one multiply, exp2),
//   P rounded to BF16 for P·V, o rounded once. Shared memory (BF16): Q [kFwdBM][DQK + 8], K [kBN][DQK + 8],
//   V [kBN][DV + 8], K and V single-buffered but staggered (94 KB at 192 / 128: two CTAs an SM); the 8-element row
//   pad makes every ldmatrix phase hit 8 distinct 16-byte bank groups. DQK / DV: qk_dim / v_dim rounded up to the
//   kernel's instantiated widths, the extra columns zero.
// Backward (deterministic, no atomics): delta = rowsum(dO∘O) (attention_simt.cu), then dkdv_mma (a CTA per key
// block, Pᵀ and dSᵀ through shared memory) and dq_mma (a CTA per query block); see the backward section below.
// Preconditions (attention_mma_supported): qk_dim, v_dim multiples of 8 in [8, 256], every base pointer 16-byte
// aligned and every row / head stride a multiple of 8 elements (16-byte cp.async chunks).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kBM = 64, kBN = 64;  // backward query and key blocks; kBN: the forward's key blocks too
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte cp.async; src_bytes = 0 fills the destination with zeros (rows past the sequence).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a·b, a 16x16 (row), b 16x8 (col), BF16 in, FP32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (lower address / lower k index)
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Forward tiles: kFwdWarps warps, kFwdBM = 16·kFwdWarps queries; K and V single-buffered but staggered (the load of
// V[n] runs under S = Q·K[n]ᵀ and the softmax, the load of K[n + 1] under O += P·V[n]), so Q, K and V of the
// 192 / 128 form fit in 94 KB and two CTAs share an SM.
constexpr int kFwdWarps = 8, kFwdThreads = kFwdWarps * 32, kFwdBM = 16 * kFwdWarps;

template <int DQK, int DV>
struct FwdSmem {
  static constexpr int kLdQ = DQK + 8, kLdV = DV + 8;
  static constexpr int kQ = kFwdBM * kLdQ, kK = kBN * kLdQ, kV = kBN * kLdV;
  static constexpr size_t kBytes = sizeof(__nv_bfloat16) * (kQ + kK + kV);
};

template <int kRowsTile, int kNThreads>
__device__ __forceinline__ void load_tile_n(__nv_bfloat16* dst, int ld, const void* base, AttnLayout l, int64_t row0,
                                            int n_valid, int h, int dim) {
  const int chunks = dim / 8;
  const auto* b = static_cast<const __nv_bfloat16*>(base) + static_cast<int64_t>(h) * l.head_stride;
  for (int i = threadIdx.x; i < kRowsTile * chunks; i += kNThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bool ok = r < n_valid;
    const __nv_bfloat16* src = ok ? b + (row0 + r) * l.row_stride + c : b;
    cp_async16(dst + r * ld + c, src, ok ? 16 : 0);
  }
}

template <int DQK, int DV, int kMinBlocks>
__global__ void __launch_bounds__(kFwdThreads, kMinBlocks) forward_mma(AttnArgs a) {
  using L = FwdSmem<DQK, DV>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* const ks = qs + L::kQ;
  __nv_bfloat16* const vs = ks + L::kK;

  const int mblocks = (a.seq + kFwdBM - 1) / kFwdBM, bh_count = a.batch * a.heads;
  const int mb = mblocks - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int bh = static_cast<int>(blockIdx.x % bh_count), b = bh / a.heads, h = bh % a.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int m0 = mb * kFwdBM;
  const int64_t row0 = static_cast<int64_t>(b) * a.seq;

  // Zero the padding columns once (cp.async never writes them): they enter Q·Kᵀ as zero products.
  if (DQK > a.qk_dim) {
    const int pad = DQK - a.qk_dim;
    for (int i = threadIdx.x; i < (kFwdBM + kBN) * pad; i += kFwdThreads)
      qs[(i / pad) * L::kLdQ + a.qk_dim + i % pad] = __float2bfloat16_rn(0.0f);  // Q rows, then K rows
  }
  if (DV > a.v_dim) {
    const int pad = DV - a.v_dim;
    for (int i = threadIdx.x; i < kBN * pad; i += kFwdThreads)
      vs[(i / pad) * L::kLdV + a.v_dim + i % pad] = __float2bfloat16_rn(0.0f);
  }

  // key blocks 0.. up to the block's last real query
  const int nblocks = (min(m0 + kFwdBM, a.seq) + kBN - 1) / kBN;
  load_tile_n<kFwdBM, kFwdThreads>(qs, L::kLdQ, a.q, a.lq, row0 + m0, min(kFwdBM, a.seq - m0), h, a.qk_dim);
  load_tile_n<kBN, kFwdThreads>(ks, L::kLdQ, a.k, a.lk, row0, min(kBN, a.seq), h, a.qk_dim);
  cp_async_commit();

  constexpr int kNt = kBN / 8;  // score n-tiles per warp row block
  constexpr int kOt = DV / 8;   // output n-tiles
  float o[kOt][4];
#pragma unroll
  for (int j = 0; j < kOt; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp's 16
  const float scale_log2 = a.scale * kLog2e;
  const int qrow = warp * 16;  // the warp's first row in the block
  const int t_lo = m0 + qrow + g, t_hi = t_lo + 8;

  for (int nb = 0; nb < nblocks; ++nb) {
    const int n0 = nb * kBN;
    cp_async_wait<0>();
    __syncthreads();  // K[nb] landed; every warp is done with V[nb - 1]
    load_tile_n<kBN, kFwdThreads>(vs, L::kLdV, a.v, a.lv, row0 + n0, min(kBN, a.seq - n0), h, a.v_dim);
    cp_async_commit();
    // The warp's rows see keys of this block (warp-uniform): key n0 ≤ its last row, hence ≤ its first (n0 and
    // m0 + qrow are multiples of 16), so every row has a visible key in its first block and mx stays finite.
    const bool active = n0 <= m0 + qrow + 15;
    const bool masked = n0 + kBN - 1 > m0 + qrow;  // some key of the block lies past some row of the warp

    // S = Q·Kᵀ for the warp's 16 rows and the block's 64 keys.
    float s[kNt][4];
    if (active) {
#pragma unroll
      for (int j = 0; j < kNt; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DQK / 16; ++kk) {
        uint32_t qa[4];
        ldmatrix_x4(qa, qs + (qrow + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdQ + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t kb[4];
          ldmatrix_x4(kb, ks + (np * 16 + (lane & 7) + (lane >> 4) * 8) * L::kLdQ + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_bf16(s[2 * np], qa, kb[0], kb[1]);
          mma_bf16(s[2 * np + 1], qa, kb[2], kb[3]);
        }
      }

      // Online softmax (log2 domain). Causal mask where the block crosses the warp's rows (keys past the query;
      // this also masks keys past the sequence for every real query).
      float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + j * 8 + 2 * tig + (e & 1);
          const int t = e < 2 ? t_lo : t_hi;
          float x = s[j][e] * scale_log2;
          if (masked && key > t) x = -INFINITY;
          s[j][e] = x;
          mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      }
      float corr[2], psum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        corr[r] = exp2f(m_run[r] - mx[r]);
        m_run[r] = mx[r];
      }
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = exp2f(s[j][e] - mx[e >> 1]);
          s[j][e] = p;
          psum[e >> 1] += p;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * corr[r] + psum[r];  // per-thread partial, reduced at the end
#pragma unroll
      for (int j = 0; j < kOt; ++j) {
        o[j][0] *= corr[0];
        o[j][1] *= corr[0];
        o[j][2] *= corr[1];
        o[j][3] *= corr[1];
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // V[nb] landed; every warp is done with K[nb]
    if (nb + 1 < nblocks) {
      const int n1 = n0 + kBN;
      load_tile_n<kBN, kFwdThreads>(ks, L::kLdQ, a.k, a.lk, row0 + n1, min(kBN, a.seq - n1), h, a.qk_dim);
      cp_async_commit();
    }
    if (active) {
      // O += P·V: P's accumulator layout is the A-operand layout of the next product (two n-tiles = one k-step).
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < DV / 16; ++dp) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb,
                            vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdV + dp * 16 + (lane >> 4) * 8);
          mma_bf16(o[2 * dp], pa, vb[0], vb[1]);
          mma_bf16(o[2 * dp + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }

  float l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = l_run[r];
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = r == 0 ? t_lo : t_hi;
    if (t >= a.seq) continue;
    auto* orow =
        static_cast<__nv_bfloat16*>(a.o) + (row0 + t) * a.lo.row_stride + static_cast<int64_t>(h) * a.lo.head_stride;
#pragma unroll
    for (int j = 0; j < kOt; ++j) {
      const int c = j * 8 + 2 * tig;
      if (c < a.v_dim)
        *reinterpret_cast<__nv_bfloat162*>(orow + c) =
            __floats2bfloat162_rn(o[j][2 * r] * inv[r], o[j][2 * r + 1] * inv[r]);
    }
    if (tig == 0) a.lse[static_cast<int64_t>(bh) * a.seq + t] = (m_run[r] + log2f(l[r])) * kLn2;
  }
}

// ---- backward ---------------------------------------------------------------------------------------------------
// dK, dV: a CTA of 8 warps per (b, h, block of kBN = 64 keys); query blocks of 64 from the key block on.
//   phase 1: warp w scores keys 16·(w % 4).. against queries 32·(w / 4).. : Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, then
//            Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e) (causal, rows past the sequence: 0) and dSᵀ = Pᵀ∘(dPᵀ − D), both
//            stored to shared memory in BF16 [64 keys][64 queries].
//   phase 2: warp w accumulates keys 16·(w % 4).. and half (w / 4) of the columns: dV += Pᵀ·dO, dK += dSᵀ·Q.
// dQ: a CTA of 8 warps per (b, h, block of 128 queries) (4 warps and 64 queries where the tiles of the widest
//   dims do not fit), 16 queries a warp; K / V double-buffered, key blocks up to the diagonal:
//   S = Q·Kᵀ, dP = dO·Vᵀ, P, dS as above (registers), dQ += dS·K. dK and dQ are scaled once at the end.
template <int DQK, int DV>
struct DkdvSmem {
  static constexpr int kLdQ = DQK + 8, kLdV = DV + 8, kLdP = kBM + 8;
  static constexpr int kK = kBN * kLdQ, kV = kBN * kLdV, kQ = kBM * kLdQ, kO = kBM * kLdV, kP = kBN * kLdP;
  static constexpr size_t kHalfs = kK + kV + 2 * kQ + 2 * kO + 2 * kP;
  static constexpr size_t kBytes = sizeof(__nv_bfloat16) * kHalfs + sizeof(float) * 4 * kBM;
};

constexpr int kBwdWarps = 8, kBwdThreads = kBwdWarps * 32;

// Zero columns [dim, width) of `rows` rows of row stride ld (the padding cp.async never writes).
__device__ __forceinline__ void zero_pad(__nv_bfloat16* base, int rows, int ld, int dim, int width, int nthreads) {
  const int pad = width - dim;
  if (pad <= 0) return;
  for (int i = threadIdx.x; i < rows * pad; i += nthreads)
    base[(i / pad) * ld + dim + i % pad] = __float2bfloat16_rn(0.0f);
}

template <int DQK, int DV>
__global__ void __launch_bounds__(kBwdThreads) dkdv_mma(AttnArgs a) {
  using L = DkdvSmem<DQK, DV>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* vs = ks + L::kK;
  __nv_bfloat16* const q0 = vs + L::kV;                  // Q stages: q0 + stage·kQ
  __nv_bfloat16* const o0 = q0 + 2 * L::kQ;              // dO stages: o0 + stage·kO
  __nv_bfloat16* ps = o0 + 2 * L::kO;                    // Pᵀ [keys][queries]
  __nv_bfloat16* dss = ps + L::kP;                       // dSᵀ
  float* lse_s = reinterpret_cast<float*>(dss + L::kP);  // [2][kBM], times log2e
  float* del_s = lse_s + 2 * kBM;                        // [2][kBM]

  const int bh_count = a.batch * a.heads;
  const int nb = static_cast<int>(blockIdx.x / bh_count);  // early key blocks (the most query blocks) first
  const int bh = static_cast<int>(blockIdx.x % bh_count), b = bh / a.heads, h = bh % a.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int s0 = nb * kBN;
  const int64_t row0 = static_cast<int64_t>(b) * a.seq;
  const float* lse = a.lse + static_cast<int64_t>(bh) * a.seq;
  const float* delta = a.delta + static_cast<int64_t>(bh) * a.seq;

  zero_pad(ks, kBN, L::kLdQ, a.qk_dim, DQK, kBwdThreads);
  zero_pad(vs, kBN, L::kLdV, a.v_dim, DV, kBwdThreads);
  zero_pad(q0, 2 * kBM, L::kLdQ, a.qk_dim, DQK, kBwdThreads);  // both stages: contiguous
  zero_pad(o0, 2 * kBM, L::kLdV, a.v_dim, DV, kBwdThreads);

  const int mfirst = nb, mblocks = (a.seq + kBM - 1) / kBM;
  auto issue = [&](int mbk, int st) {
    const int i0 = mbk * kBM, n = min(kBM, a.seq - i0);
    load_tile_n<kBM, kBwdThreads>((q0 + st * L::kQ), L::kLdQ, a.q, a.lq, row0 + i0, n, h, a.qk_dim);
    load_tile_n<kBM, kBwdThreads>((o0 + st * L::kO), L::kLdV, a.dout, a.ldout, row0 + i0, n, h, a.v_dim);
    if (threadIdx.x < kBM) {
      const bool ok = static_cast<int>(threadIdx.x) < n;
      lse_s[st * kBM + threadIdx.x] = ok ? lse[i0 + threadIdx.x] * kLog2e : 0.0f;
      del_s[st * kBM + threadIdx.x] = ok ? delta[i0 + threadIdx.x] : 0.0f;
    }
  };
  load_tile_n<kBN, kBwdThreads>(ks, L::kLdQ, a.k, a.lk, row0 + s0, min(kBN, a.seq - s0), h, a.qk_dim);
  load_tile_n<kBN, kBwdThreads>(vs, L::kLdV, a.v, a.lv, row0 + s0, min(kBN, a.seq - s0), h, a.v_dim);
  issue(mfirst, 0);
  cp_async_commit();

  // phase-1 tile of this warp and phase-2 rows / column half
  const int kr = 16 * (warp % 4), qc = 32 * (warp / 4), half = warp / 4;
  constexpr int kHq = DQK / 2, kHv = DV / 2;  // columns per half (multiples of 16)
  float dk[kHq / 8][4], dv[kHv / 8][4];
#pragma unroll
  for (int j = 0; j < kHq / 8; ++j) dk[j][0] = dk[j][1] = dk[j][2] = dk[j][3] = 0.0f;
#pragma unroll
  for (int j = 0; j < kHv / 8; ++j) dv[j][0] = dv[j][1] = dv[j][2] = dv[j][3] = 0.0f;
  const float scale_log2 = a.scale * kLog2e;
  const int key_lo = s0 + kr + g, key_hi = key_lo + 8;

  for (int mbk = mfirst; mbk < mblocks; ++mbk) {
    const int st = (mbk - mfirst) & 1;
    if (mbk + 1 < mblocks) {
      issue(mbk + 1, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int i0 = mbk * kBM;
    const __nv_bfloat16* qt = (q0 + st * L::kQ);
    const __nv_bfloat16* ot = (o0 + st * L::kO);

    // phase 1: Sᵀ and dPᵀ for 16 keys × 32 queries
    float s[4][4], dp[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DQK / 16; ++kk) {
      uint32_t ka[4];
      ldmatrix_x4(ka, ks + (kr + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdQ + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t qb[4];
        ldmatrix_x4(qb, qt + (qc + np * 16 + (lane & 7) + (lane >> 4) * 8) * L::kLdQ + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_bf16(s[2 * np], ka, qb[0], qb[1]);
        mma_bf16(s[2 * np + 1], ka, qb[2], qb[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk) {
      uint32_t va[4];
      ldmatrix_x4(va, vs + (kr + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdV + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t ob[4];
        ldmatrix_x4(ob, ot + (qc + np * 16 + (lane & 7) + (lane >> 4) * 8) * L::kLdV + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_bf16(dp[2 * np], va, ob[0], ob[1]);
        mma_bf16(dp[2 * np + 1], va, ob[2], ob[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float pv[4], dsv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = qc + j * 8 + 2 * tig + (e & 1);  // query within the block
        const int query = i0 + ql, key = e < 2 ? key_lo : key_hi;
        const bool visible = query >= key && query < a.seq;
        const float p = visible ? exp2f(s[j][e] * scale_log2 - lse_s[st * kBM + ql]) : 0.0f;
        pv[e] = p;
        dsv[e] = p * (dp[j][e] - del_s[st * kBM + ql]);
      }
      const int col = qc + j * 8 + 2 * tig;
      *reinterpret_cast<__nv_bfloat162*>(ps + (kr + g) * L::kLdP + col) = __floats2bfloat162_rn(pv[0], pv[1]);
      *reinterpret_cast<__nv_bfloat162*>(ps + (kr + g + 8) * L::kLdP + col) = __floats2bfloat162_rn(pv[2], pv[3]);
      *reinterpret_cast<__nv_bfloat162*>(dss + (kr + g) * L::kLdP + col) = __floats2bfloat162_rn(dsv[0], dsv[1]);
      *reinterpret_cast<__nv_bfloat162*>(dss + (kr + g + 8) * L::kLdP + col) = __floats2bfloat162_rn(dsv[2], dsv[3]);
    }
    __syncthreads();

    // phase 2: dV += Pᵀ·dO and dK += dSᵀ·Q over the block's 64 queries, this warp's rows and column half
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
      uint32_t pa[4], da[4];
      const int arow = (kr + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdP + kk * 16 + (lane >> 4) * 8;
      ldmatrix_x4(pa, ps + arow);
      ldmatrix_x4(da, dss + arow);
      const int brow = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int dpair = 0; dpair < kHv / 16; ++dpair) {
        uint32_t ob[4];
        ldmatrix_x4_trans(ob, ot + brow * L::kLdV + half * kHv + dpair * 16 + (lane >> 4) * 8);
        mma_bf16(dv[2 * dpair], pa, ob[0], ob[1]);
        mma_bf16(dv[2 * dpair + 1], pa, ob[2], ob[3]);
      }
#pragma unroll
      for (int dpair = 0; dpair < kHq / 16; ++dpair) {
        uint32_t qb[4];
        ldmatrix_x4_trans(qb, qt + brow * L::kLdQ + half * kHq + dpair * 16 + (lane >> 4) * 8);
        mma_bf16(dk[2 * dpair], da, qb[0], qb[1]);
        mma_bf16(dk[2 * dpair + 1], da, qb[2], qb[3]);
      }
    }
    __syncthreads();  // Pᵀ / dSᵀ and this stage are rewritten next
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r == 0 ? key_lo : key_hi;
    if (key >= a.seq) continue;
    auto* dkr = static_cast<__nv_bfloat16*>(a.dk) + (row0 + key) * a.ldk.row_stride +
                static_cast<int64_t>(h) * a.ldk.head_stride;
    auto* dvr = static_cast<__nv_bfloat16*>(a.dv) + (row0 + key) * a.ldv.row_stride +
                static_cast<int64_t>(h) * a.ldv.head_stride;
#pragma unroll
    for (int j = 0; j < kHq / 8; ++j) {
      const int c = half * kHq + j * 8 + 2 * tig;
      if (c < a.qk_dim)
        *reinterpret_cast<__nv_bfloat162*>(dkr + c) =
            __floats2bfloat162_rn(dk[j][2 * r] * a.scale, dk[j][2 * r + 1] * a.scale);
    }
#pragma unroll
    for (int j = 0; j < kHv / 8; ++j) {
      const int c = half * kHv + j * 8 + 2 * tig;
      if (c < a.v_dim)
        *reinterpret_cast<__nv_bfloat162*>(dvr + c) = __floats2bfloat162_rn(dv[j][2 * r], dv[j][2 * r + 1]);
    }
  }
}

template <int DQK, int DV, int NW>
struct DqSmem {
  static constexpr int kBMq = 16 * NW;  // queries per CTA (16 per warp)
  static constexpr int kLdQ = DQK + 8, kLdV = DV + 8;
  static constexpr int kQ = kBMq * kLdQ, kO = kBMq * kLdV, kK = kBN * kLdQ, kV = kBN * kLdV;
  static constexpr size_t kBytes = sizeof(__nv_bfloat16) * (kQ + kO + 2 * kK + 2 * kV);
};

template <int DQK, int DV, int NW>
__global__ void __launch_bounds__(NW * 32) dq_mma(AttnArgs a) {
  using L = DqSmem<DQK, DV, NW>;
  constexpr int kBMq = L::kBMq, kNThr = NW * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* os = qs + L::kQ;
  __nv_bfloat16* const k0 = os + L::kO;      // K stages: k0 + stage·kK
  __nv_bfloat16* const v0 = k0 + 2 * L::kK;  // V stages: v0 + stage·kV

  const int mblocks = (a.seq + kBMq - 1) / kBMq, bh_count = a.batch * a.heads;
  const int mb = mblocks - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int bh = static_cast<int>(blockIdx.x % bh_count), b = bh / a.heads, h = bh % a.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const int m0 = mb * kBMq;
  const int64_t row0 = static_cast<int64_t>(b) * a.seq;

  zero_pad(qs, kBMq, L::kLdQ, a.qk_dim, DQK, kNThr);
  zero_pad(os, kBMq, L::kLdV, a.v_dim, DV, kNThr);
  zero_pad(k0, 2 * kBN, L::kLdQ, a.qk_dim, DQK, kNThr);
  zero_pad(v0, 2 * kBN, L::kLdV, a.v_dim, DV, kNThr);

  const int nq = min(kBMq, a.seq - m0);
  load_tile_n<kBMq, kNThr>(qs, L::kLdQ, a.q, a.lq, row0 + m0, nq, h, a.qk_dim);
  load_tile_n<kBMq, kNThr>(os, L::kLdV, a.dout, a.ldout, row0 + m0, nq, h, a.v_dim);
  load_tile_n<kBN, kNThr>(k0, L::kLdQ, a.k, a.lk, row0, min(kBN, a.seq), h, a.qk_dim);
  load_tile_n<kBN, kNThr>(v0, L::kLdV, a.v, a.lv, row0, min(kBN, a.seq), h, a.v_dim);
  cp_async_commit();

  const int qrow = warp * 16, t_lo = m0 + qrow + g, t_hi = t_lo + 8;
  const int64_t base = static_cast<int64_t>(bh) * a.seq;
  const float lse2[2] = {t_lo < a.seq ? a.lse[base + t_lo] * kLog2e : 0.0f,
                         t_hi < a.seq ? a.lse[base + t_hi] * kLog2e : 0.0f};
  const float del[2] = {t_lo < a.seq ? a.delta[base + t_lo] : 0.0f, t_hi < a.seq ? a.delta[base + t_hi] : 0.0f};
  const float scale_log2 = a.scale * kLog2e;
  constexpr int kNt = kBN / 8, kQt = DQK / 8;
  float dq[kQt][4];
#pragma unroll
  for (int j = 0; j < kQt; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

  // key blocks 0.. up to the block's last real query
  const int nblocks = (min(m0 + kBMq, a.seq) + kBN - 1) / kBN;
  for (int nb = 0; nb < nblocks; ++nb) {
    const int st = nb & 1;
    if (nb + 1 < nblocks) {
      const int n1 = (nb + 1) * kBN;
      load_tile_n<kBN, kNThr>((k0 + (st ^ 1) * L::kK), L::kLdQ, a.k, a.lk, row0 + n1, min(kBN, a.seq - n1), h,
                              a.qk_dim);
      load_tile_n<kBN, kNThr>((v0 + (st ^ 1) * L::kV), L::kLdV, a.v, a.lv, row0 + n1, min(kBN, a.seq - n1), h, a.v_dim);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* kt = (k0 + st * L::kK);
    const __nv_bfloat16* vt = (v0 + st * L::kV);
    const int n0 = nb * kBN;
    if (n0 <= m0 + qrow + 15) {  // some key of the block is visible to the warp's rows (warp-uniform)
      float s[kNt][4], dp[kNt][4];
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DQK / 16; ++kk) {
        uint32_t qa[4];
        ldmatrix_x4(qa, qs + (qrow + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdQ + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t kb[4];
          ldmatrix_x4(kb, kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * L::kLdQ + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_bf16(s[2 * np], qa, kb[0], kb[1]);
          mma_bf16(s[2 * np + 1], qa, kb[2], kb[3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < DV / 16; ++kk) {
        uint32_t oa[4];
        ldmatrix_x4(oa, os + (qrow + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdV + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          uint32_t vb[4];
          ldmatrix_x4(vb, vt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * L::kLdV + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_bf16(dp[2 * np], oa, vb[0], vb[1]);
          mma_bf16(dp[2 * np + 1], oa, vb[2], vb[3]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + j * 8 + 2 * tig + (e & 1), r = e >> 1;
          const int t = r == 0 ? t_lo : t_hi;
          const float p = key <= t && t < a.seq ? exp2f(s[j][e] * scale_log2 - lse2[r]) : 0.0f;
          s[j][e] = p * (dp[j][e] - del[r]);  // dS
        }
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        const uint32_t da[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dpair = 0; dpair < DQK / 16; ++dpair) {
          uint32_t kb[4];
          ldmatrix_x4_trans(
              kb, kt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L::kLdQ + dpair * 16 + (lane >> 4) * 8);
          mma_bf16(dq[2 * dpair], da, kb[0], kb[1]);
          mma_bf16(dq[2 * dpair + 1], da, kb[2], kb[3]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = r == 0 ? t_lo : t_hi;
    if (t >= a.seq) continue;
    auto* dqr =
        static_cast<__nv_bfloat16*>(a.dq) + (row0 + t) * a.ldq.row_stride + static_cast<int64_t>(h) * a.ldq.head_stride;
#pragma unroll
    for (int j = 0; j < kQt; ++j) {
      const int c = j * 8 + 2 * tig;
      if (c < a.qk_dim)
        *reinterpret_cast<__nv_bfloat162*>(dqr + c) =
            __floats2bfloat162_rn(dq[j][2 * r] * a.scale, dq[j][2 * r + 1] * a.scale);
    }
  }
}

template <int DQK, int DV>
cudaError_t launch_backward(const AttnArgs& a, cudaStream_t stream) {
  const int64_t kv_blocks = static_cast<int64_t>((a.seq + kBN - 1) / kBN) * a.batch * a.heads;
  if (kv_blocks == 0) return cudaSuccess;
  if (kv_blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  // dQ: 128 queries (8 warps) a CTA where its double-buffered tiles fit in shared memory, else 64 (4 warps)
  constexpr int kDqWarps = DqSmem<DQK, DV, 8>::kBytes <= 227 * 1024 ? 8 : 4;
  constexpr int kDqBM = DqSmem<DQK, DV, kDqWarps>::kBMq;
  const int64_t q_blocks = static_cast<int64_t>((a.seq + kDqBM - 1) / kDqBM) * a.batch * a.heads;
  constexpr size_t smem_kv = DkdvSmem<DQK, DV>::kBytes, smem_q = DqSmem<DQK, DV, kDqWarps>::kBytes;
  cudaError_t e =
      cudaFuncSetAttribute(dkdv_mma<DQK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_kv));
  if (e != cudaSuccess) return e;
  const auto dq_kernel = dq_mma<DQK, DV, kDqWarps>;
  e = cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_q));
  if (e != cudaSuccess) return e;
  dkdv_mma<DQK, DV><<<static_cast<unsigned>(kv_blocks), kBwdThreads, smem_kv, stream>>>(a);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  dq_kernel<<<static_cast<unsigned>(q_blocks), kDqWarps * 32, smem_q, stream>>>(a);
  return cudaGetLastError();
}

template <int DQK>
cudaError_t backward_dv(const AttnArgs& a, cudaStream_t stream) {
  if (a.v_dim <= 64) return launch_backward<DQK, 64>(a, stream);
  if (a.v_dim <= 128) return launch_backward<DQK, 128>(a, stream);
  return launch_backward<DQK, 256>(a, stream);
}

template <int DQK, int DV>
cudaError_t launch_forward(const AttnArgs& a, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>((a.seq + kFwdBM - 1) / kFwdBM) * a.batch * a.heads;
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  constexpr size_t smem = FwdSmem<DQK, DV>::kBytes;
  constexpr int kMinBlocks = DV <= 128 ? 2 : 1;  // two CTAs an SM need <= 128 registers a thread
  const auto kernel = forward_mma<DQK, DV, kMinBlocks>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kernel<<<static_cast<unsigned>(blocks), kFwdThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <int DQK>
cudaError_t forward_dv(const AttnArgs& a, cudaStream_t stream) {
  if (a.v_dim <= 64) return launch_forward<DQK, 64>(a, stream);
  if (a.v_dim <= 128) return launch_forward<DQK, 128>(a, stream);
  return launch_forward<DQK, 256>(a, stream);
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool strides_ok(AttnLayout l, const AttnArgs& a) {
  return (a.batch * a.seq <= 1 || l.row_stride % 8 == 0) && (a.heads <= 1 || l.head_stride % 8 == 0);
}

}  // namespace

bool attention_mma_supported(const AttnArgs& a, bool backward) {
  if (!a.bf16) return false;
  if (a.qk_dim % 8 != 0 || a.v_dim % 8 != 0 || a.qk_dim < 8 || a.v_dim < 8 || a.qk_dim > kAttnMaxDim ||
      a.v_dim > kAttnMaxDim)
    return false;
  const bool fwd = aligned(a.q) && aligned(a.k) && aligned(a.v) && aligned(a.o) && strides_ok(a.lq, a) &&
                   strides_ok(a.lk, a) && strides_ok(a.lv, a) && strides_ok(a.lo, a);
  if (!backward) return fwd;
  return fwd && aligned(a.dout) && aligned(a.dq) && aligned(a.dk) && aligned(a.dv) && strides_ok(a.ldout, a) &&
         strides_ok(a.ldq, a) && strides_ok(a.ldk, a) && strides_ok(a.ldv, a);
}

cudaError_t launch_attention_forward_mma(const AttnArgs& a, cudaStream_t stream) {
  if (a.qk_dim <= 64) return forward_dv<64>(a, stream);
  if (a.qk_dim <= 96) return forward_dv<96>(a, stream);
  if (a.qk_dim <= 128) return forward_dv<128>(a, stream);
  if (a.qk_dim <= 192) return forward_dv<192>(a, stream);
  return forward_dv<256>(a, stream);
}

}  // namespace fp8train::ops::cuda::detail

namespace fp8train::ops::cuda::detail {

cudaError_t launch_attention_backward_mma(const AttnArgs& a, cudaStream_t stream) {
  cudaError_t e = launch_attention_delta(a, stream);
  if (e != cudaSuccess) return e;
  if (a.qk_dim <= 64) return backward_dv<64>(a, stream);
  if (a.qk_dim <= 96) return backward_dv<96>(a, stream);
  if (a.qk_dim <= 128) return backward_dv<128>(a, stream);
  if (a.qk_dim <= 192) return backward_dv<192>(a, stream);
  return backward_dv<256>(a, stream);
}

}  // namespace fp8train::ops::cuda::detail
