// Grouped GEMMs over the experts of a MoE layer (gemm_launch.h GroupedGemmArgs), reading the expert offsets on
// the device (no host synchronization):
//   M kind  one CTA per (BM rows of the R expert-ordered rows, BN columns). The rows of a tile may straddle
//           experts (the BF16 recipe aligns experts to 1 row), so the CTA walks the experts overlapping its rows:
//           for each, the tile product with that expert's b block, A rows outside the expert loaded as zero and
//           only the expert's rows stored. Tile rows at or past offsets[E] are written with zeros.
//   K kind  one CTA per (expert, BM rows of m, BN columns of n), looping over the expert's rows (the K
//           dimension) in order: deterministic, no split-K. An empty expert gets c_e = beta·c_e.
// Engines: BF16 × BF16 on tensor cores (mma.sync.m16n8k16 bf16 -> f32; 128×128×32 tiles, 8 warps of 64×32;
// global -> shared through registers, 16-byte loads where the operand's pointer and row stride allow (else
// masked element loads), the next k-tile's loads issued before the current tile's MMAs); any F32 operand on
// FP32 FMA (64×64×16 tiles, 4×4 outputs per thread, element loads). Loads follow each operand's layout
// (k-contiguous or row-contiguous) so they coalesce, and are zero-filled outside the matrix: any row stride and
// alignment works; fragments come from shared memory through ldmatrix. A first version: no cp.async / TMA
// pipeline, no wgmma.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/gemm_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void from_f(float& d, float x) { d = x; }
__device__ __forceinline__ void from_f(__nv_bfloat16& d, float x) { d = __float2bfloat16_rn(x); }

// One operand tile's source: element (x, kk) — x the tile-local row of A (or column of B), kk the k index from
// the start of this product — at p[x * ld + kk] (kcontig) or p[kk * ld + x]. Valid for x in [x_lo, x_hi) and
// kk < klen; everything else reads as zero.
template <class T>
struct Src {
  const T* p;
  int64_t ld;
  bool kcontig;
  int x_lo, x_hi;
  int64_t klen;
};

// Loads the BX × BK tile at k offset k0 of `s` into shared memory through store(x, kk, value).
template <int BX, int BK, int NT, class T, class Store>
__device__ __forceinline__ void load_tile(const Src<T>& s, int64_t k0, Store store) {
  for (int i = threadIdx.x; i < BX * BK; i += NT) {
    int x, kk;
    if (s.kcontig) {
      x = i / BK;
      kk = i % BK;
    } else {
      kk = i / BX;
      x = i % BX;
    }
    const int64_t kg = k0 + kk;
    T v{};
    bool ok = x >= s.x_lo && x < s.x_hi && kg < s.klen;
    if (ok) v = s.kcontig ? s.p[x * s.ld + kg] : s.p[kg * s.ld + x];
    store(x, kk, ok ? v : T(0.0f));
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");  // reads what put() stored: keep it after the barrier
}

// ---- tensor-core engine (BF16 × BF16) ------------------------------------------------------------------------
struct MmaEngine {
  static constexpr int BM = 128, BN = 128, BK = 32, NT = 256, PAD = 8, MIN_CTAS = 2;
  struct Smem {
    // [row][k] and [col][k]; rows of 80 bytes keep the 16-byte stores and ldmatrix rows aligned and the eight
    // row addresses of an ldmatrix phase on distinct bank groups
    __align__(16) __nv_bfloat16 a[BM][BK + PAD];
    __align__(16) __nv_bfloat16 b[BN][BK + PAD];
  };
  float acc[4][4][4];  // [m16 block][n8 block][c0..c3]

  __device__ void zero() {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
  }

  // A tile's slice of one thread: VPT vectors of 8 BF16 (16 bytes), read from global memory while the tensor
  // cores work on the previous tile (register prefetch), stored to shared memory after.
  template <int BX>
  struct Staged {
    static constexpr int VPT = BX * BK / 8 / NT;
    uint4 v[VPT];
  };

  // Vector i of the BX × BK tile: 8 elements along k (k-contiguous source: row x, k kk..kk+7) or along x
  // (row-contiguous source: k kk, x..x+7). One 16-byte load when the source allows it (aligned, ld a multiple of
  // 8, the 8 elements all inside), else 8 masked element loads. Row-contiguous: the 32 lanes of a warp take 16
  // k rows × 2 neighbouring x vectors (32 contiguous bytes, one sector, per row), so that the transposing
  // shared stores of put() land on 2 rows × 8 words (a 2-way bank conflict rather than 16-way).
  template <int BX>
  __device__ static void vector_at(int i, bool kcontig, int& x, int& kk) {
    static_assert(BK % 16 == 0 && BX % 16 == 0, "tile shape");
    if (kcontig) {
      x = i / (BK / 8);
      kk = (i % (BK / 8)) * 8;
    } else {
      kk = i % 16 + 16 * (i / (16 * (BX / 8)));
      x = ((i / 16) % (BX / 8)) * 8;
    }
  }

  template <int BX>
  __device__ static void fetch(const Src<__nv_bfloat16>& s, bool vec, int64_t k0, Staged<BX>& st) {
#pragma unroll
    for (int u = 0; u < Staged<BX>::VPT; ++u) {
      const int i = threadIdx.x + u * NT;
      int x, kk;
      vector_at<BX>(i, s.kcontig, x, kk);
      const int64_t kg = k0 + kk;
      const bool full =
          s.kcontig ? (x >= s.x_lo && x < s.x_hi && kg + 8 <= s.klen) : (kg < s.klen && x >= s.x_lo && x + 8 <= s.x_hi);
      if (vec && full) {
        const __nv_bfloat16* src = s.kcontig ? s.p + x * s.ld + kg : s.p + kg * s.ld + x;
        st.v[u] = *reinterpret_cast<const uint4*>(src);
        continue;
      }
      __align__(16) __nv_bfloat16 e[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int xj = s.kcontig ? x : x + j;
        const int64_t kj = s.kcontig ? kg + j : kg;
        const bool ok = xj >= s.x_lo && xj < s.x_hi && kj < s.klen;
        e[j] = ok ? s.p[s.kcontig ? xj * s.ld + kj : kj * s.ld + xj] : __float2bfloat16_rn(0.0f);
      }
      st.v[u] = *reinterpret_cast<const uint4*>(e);
    }
  }

  template <int BX>
  __device__ static void put(const Src<__nv_bfloat16>& s, const Staged<BX>& st, __nv_bfloat16 (*dst)[BK + PAD]) {
#pragma unroll
    for (int u = 0; u < Staged<BX>::VPT; ++u) {
      const int i = threadIdx.x + u * NT;
      int x, kk;
      vector_at<BX>(i, s.kcontig, x, kk);
      if (s.kcontig) {
        // row pitch (BK + PAD)·2 = 80 bytes and kk a multiple of 8: a 16-byte aligned store
        *reinterpret_cast<uint4*>(&dst[x][kk]) = st.v[u];
      } else {
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&st.v[u]);
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[x + j][kk] = e[j];
      }
    }
  }

  static __device__ bool vectorizable(const Src<__nv_bfloat16>& s) {
    return reinterpret_cast<uintptr_t>(s.p) % 16 == 0 && s.ld % 8 == 0;
  }

  template <class TA, class TB>
  __device__ void accumulate(Smem& sm, const Src<TA>& sa, const Src<TB>& sb, int64_t klen) {
    static_assert(sizeof(TA) == 2 && sizeof(TB) == 2, "the tensor-core engine takes BF16 operands");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    const bool va = vectorizable(sa), vb = vectorizable(sb);
    Staged<BM> ra;
    Staged<BN> rb;
    fetch<BM>(sa, va, 0, ra);
    fetch<BN>(sb, vb, 0, rb);
    for (int64_t k0 = 0; k0 < klen; k0 += BK) {
      __syncthreads();  // the previous tile's readers are done
      put<BM>(sa, ra, sm.a);
      put<BN>(sb, rb, sm.b);
      __syncthreads();
      if (k0 + BK < klen) {  // the next tile's loads overlap this tile's MMAs
        fetch<BM>(sa, va, k0 + BK, ra);
        fetch<BN>(sb, vb, k0 + BK, rb);
      }
#pragma unroll
      for (int ks = 0; ks < BK; ks += 16) {
        // ldmatrix.x4: lane l gives the address of row l % 8 of 8x8 matrix l / 8; lane T receives, of each
        // matrix, row T / 4, columns 2(T % 4) and +1 — the mma fragments' layout.
        uint32_t af[4][4], bfr[4][2];
        const int q = lane / 8, r8 = lane % 8;
#pragma unroll
        for (int i = 0; i < 4; ++i)  // matrices: rows 0-7 / 8-15 x k 0-7 / 8-15 = a0..a3
          ldmatrix_x4(af[i], &sm.a[wm + i * 16 + r8 + (q & 1) * 8][ks + (q >> 1) * 8]);
#pragma unroll
        for (int j = 0; j < 4; j += 2) {  // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, ...) of blocks j, j+1
          uint32_t r[4];
          ldmatrix_x4(r, &sm.b[wn + j * 8 + r8 + (q >> 1) * 8][ks + (q & 1) * 8]);
          bfr[j][0] = r[0];
          bfr[j][1] = r[1];
          bfr[j + 1][0] = r[2];
          bfr[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bfr[j][0]), "r"(bfr[j][1]));
      }
    }
  }

  // c[x * ldc + y] = alpha·acc + beta·c for tile rows x in [x_lo, x_hi) and columns y < y_hi.
  template <class TC>
  __device__ void store(TC* c, int64_t ldc, int x_lo, int x_hi, int y_hi, float alpha, float beta) const {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int x = wm + i * 16 + g + (r >= 2 ? 8 : 0), y = wn + j * 8 + 2 * t + (r & 1);
          if (x < x_lo || x >= x_hi || y >= y_hi) continue;
          TC& d = c[x * ldc + y];
          float v = alpha * acc[i][j][r];
          if (beta != 0.0f) v += beta * to_f(d);
          from_f(d, v);
        }
  }
};

// ---- FP32 SIMT engine (any F32 operand) ---------------------------------------------------------------------
struct SimtEngine {
  static constexpr int BM = 64, BN = 64, BK = 16, NT = 256, MIN_CTAS = 2;
  struct Smem {
    float a[BK][BM + 1];  // [k][row]; the pad spreads the transposing stores of a k-contiguous source over banks
    float b[BK][BN + 1];  // [k][col]
  };
  float acc[4][4];

  __device__ void zero() {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  }

  template <class TA, class TB>
  __device__ void accumulate(Smem& sm, const Src<TA>& sa, const Src<TB>& sb, int64_t klen) {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    for (int64_t k0 = 0; k0 < klen; k0 += BK) {
      __syncthreads();
      load_tile<BM, BK, NT>(sa, k0, [&](int x, int kk, TA v) { sm.a[kk][x] = to_f(v); });
      load_tile<BN, BK, NT>(sb, k0, [&](int x, int kk, TB v) { sm.b[kk][x] = to_f(v); });
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = sm.a[kk][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = sm.b[kk][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
  }

  template <class TC>
  __device__ void store(TC* c, int64_t ldc, int x_lo, int x_hi, int y_hi, float alpha, float beta) const {
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int x = ty * 4 + i, y = tx * 4 + j;
        if (x < x_lo || x >= x_hi || y >= y_hi) continue;
        TC& d = c[x * ldc + y];
        float v = alpha * acc[i][j];
        if (beta != 0.0f) v += beta * to_f(d);
        from_f(d, v);
      }
  }
};

// c[x * ldc + y] = beta·c (zeros for beta 0, c not read) over tile rows [x_lo, x_hi), columns < y_hi.
template <int NT, class TC>
__device__ void scale_tile(TC* c, int64_t ldc, int x_lo, int x_hi, int y_hi, float beta) {
  const int rows = x_hi - x_lo;
  if (rows <= 0 || y_hi <= 0) return;
  for (int i = threadIdx.x; i < rows * y_hi; i += NT) {
    TC& d = c[(x_lo + i / y_hi) * ldc + i % y_hi];
    from_f(d, beta == 0.0f ? 0.0f : beta * to_f(d));
  }
}

template <class E, class TA, class TB, class TC>
__global__ void __launch_bounds__(E::NT, E::MIN_CTAS) grouped_m_kernel(GroupedGemmArgs g) {
  __shared__ typename E::Smem sm;
  E eng;
  const TA* a = static_cast<const TA*>(g.a);
  const TB* b = static_cast<const TB*>(g.b);
  TC* c = static_cast<TC*>(g.c);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * E::BM, n0 = static_cast<int64_t>(blockIdx.y) * E::BN;
  const int64_t t1 = t0 + E::BM < g.rows ? t0 + E::BM : g.rows;
  const int y_hi = static_cast<int>(g.n - n0 < E::BN ? g.n - n0 : E::BN);
  TC* c_tile = c + t0 * g.ldc + n0;
  const int64_t end = g.offsets[g.groups];
  for (int64_t e = 0; e < g.groups; ++e) {
    const int64_t r0 = g.offsets[e], r1 = g.offsets[e + 1];
    if (r0 >= t1) break;  // offsets are non-decreasing: no later expert reaches this tile
    const int64_t lo = r0 > t0 ? r0 : t0, hi = r1 < t1 ? r1 : t1;
    if (lo >= hi) continue;  // uniform across the CTA
    const Src<TA> sa{a + t0 * g.lda, g.lda, true, static_cast<int>(lo - t0), static_cast<int>(hi - t0), g.k};
    Src<TB> sb;
    if (g.trans_b) {
      sb = {b + (e * g.n + n0) * g.ldb, g.ldb, true, 0, y_hi, g.k};
    } else {
      sb = {b + e * g.k * g.ldb + n0, g.ldb, false, 0, y_hi, g.k};
    }
    eng.zero();
    eng.accumulate(sm, sa, sb, g.k);
    eng.store(c_tile, g.ldc, static_cast<int>(lo - t0), static_cast<int>(hi - t0), y_hi, g.alpha, g.beta);
  }
  // Rows at or past the last expert's end: zeros.
  const int64_t z0 = end > t0 ? end : t0;
  if (z0 < t1) scale_tile<E::NT>(c_tile, g.ldc, static_cast<int>(z0 - t0), static_cast<int>(t1 - t0), y_hi, 0.0f);
}

template <class E, class TA, class TB, class TC>
__global__ void __launch_bounds__(E::NT, E::MIN_CTAS) grouped_k_kernel(GroupedGemmArgs g) {
  __shared__ typename E::Smem sm;
  E eng;
  const TA* a = static_cast<const TA*>(g.a);
  const TB* b = static_cast<const TB*>(g.b);
  TC* c = static_cast<TC*>(g.c);
  const int64_t e = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * E::BM, n0 = static_cast<int64_t>(blockIdx.x) * E::BN;
  const int x_hi = static_cast<int>(g.m - m0 < E::BM ? g.m - m0 : E::BM);
  const int y_hi = static_cast<int>(g.n - n0 < E::BN ? g.n - n0 : E::BN);
  TC* c_tile = c + (e * g.m + m0) * g.ldc + n0;
  // Offsets outside [0, rows] (not diagnosed here: that would need a synchronization) are clamped, so a bad
  // plan never reads out of bounds.
  int64_t r0 = g.offsets[e], r1 = g.offsets[e + 1];
  r0 = r0 < 0 ? 0 : (r0 > g.rows ? g.rows : r0);
  r1 = r1 < 0 ? 0 : (r1 > g.rows ? g.rows : r1);
  if (r1 <= r0) {  // an empty expert: c_e = beta·c_e (beta 1 leaves it as it is)
    if (g.beta != 1.0f) scale_tile<E::NT>(c_tile, g.ldc, 0, x_hi, y_hi, g.beta);
    return;
  }
  const Src<TA> sa{a + r0 * g.lda + m0, g.lda, false, 0, x_hi, r1 - r0};
  const Src<TB> sb{b + r0 * g.ldb + n0, g.ldb, false, 0, y_hi, r1 - r0};
  eng.zero();
  eng.accumulate(sm, sa, sb, r1 - r0);
  eng.store(c_tile, g.ldc, 0, x_hi, y_hi, g.alpha, g.beta);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class E, class TA, class TB, class TC>
cudaError_t launch_typed(const GroupedGemmArgs& g, cudaStream_t stream) {
  if (g.kind == 0) {
    if (g.rows == 0 || g.n == 0) return cudaSuccess;
    const int64_t gx = ceil_div(g.rows, E::BM), gy = ceil_div(g.n, E::BN);
    if (gx > 0x7fffffff || gy > 65535) return cudaErrorInvalidConfiguration;
    grouped_m_kernel<E, TA, TB, TC>
        <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), E::NT, 0, stream>>>(g);
  } else {
    if (g.m == 0 || g.n == 0 || g.groups == 0) return cudaSuccess;
    const int64_t gx = ceil_div(g.n, E::BN), gy = ceil_div(g.m, E::BM);
    if (gx > 0x7fffffff || gy > 65535 || g.groups > 65535) return cudaErrorInvalidConfiguration;
    grouped_k_kernel<E, TA, TB, TC>
        <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(g.groups)), E::NT, 0,
           stream>>>(g);
  }
  return cudaGetLastError();
}

template <class TA, class TB>
cudaError_t launch_simt(const GroupedGemmArgs& g, cudaStream_t stream) {
  return g.c_bf16 ? launch_typed<SimtEngine, TA, TB, __nv_bfloat16>(g, stream)
                  : launch_typed<SimtEngine, TA, TB, float>(g, stream);
}

}  // namespace

cudaError_t launch_gemm_grouped(const GroupedGemmArgs& g, cudaStream_t stream) {
  using bf = __nv_bfloat16;
  if (g.a_bf16 && g.b_bf16)
    return g.c_bf16 ? launch_typed<MmaEngine, bf, bf, bf>(g, stream)
                    : launch_typed<MmaEngine, bf, bf, float>(g, stream);
  if (g.a_bf16) return launch_simt<bf, float>(g, stream);
  if (g.b_bf16) return launch_simt<float, bf>(g, stream);
  return launch_simt<float, float>(g, stream);
}

}  // namespace fp8train::ops::cuda::detail
