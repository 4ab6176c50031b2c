// AVX2 kernels of the reference GEMM, compiled for avx2+fma through function attributes and chosen at run
// time (the library itself is built for baseline x86-64). They compute the same bits as the scalar paths
// in ref_gemm.cpp; tests compare them with GemmConfig::force_scalar and with num::hopper_dot*.
//
// Hopper kernel: 32 output columns (four 8-lane float vectors) per panel.
//   B panel p: int8 operand exponents [K][32] of columns 32p..32p+31 and their decoded values [K][32]
//   (float, pre-scaled, below);   A row i: int8 exponents [K] and float values [K].
// The exponent is the FP8 operand exponent of num::fp8_parts (subnormals carry the minimum exponent);
// zero codes get kZeroExp so that zero products never set the block maximum (saturating int8 adds keep
// zero + zero at -128). For one block of n <= 32 products and the chain value c of each lane:
//   E     = max(max over products of expA + expB, exponent of c (when c != 0), kMinBlockExp)
//   term  = trunc(a * b * 2^(13 - E)): the exact product in units of 2^(E - 13), truncated toward zero by
//           vcvttps2dq. B's values are stored pre-scaled, b' = b * 2^(13 - T) (T =
//           HopperProblem::fast_max_exp), so the exact product a * b' only needs 2^(T - E): when every
//           lane has E <= T this is an integer add of
//           (T - E) << 23 to the float's exponent field (no FP multiply; a zero product becomes a value
//           below 2^-27 that truncates to 0, which is why T - E is clamped to 100), otherwise an exact
//           multiply by 2^(T - E).
//   c     = trunc(c * 2^(13 - E)) in the same units
//   sum   = exact int32 sum (|sum| < 2^22); result = (float(sum) with its low 10 mantissa bits cleared)
//           * 2^(E - 13): the FP22 normalise-and-truncate of num::hopper_block.
// Every chain value is an FP22 number >= 2^-41 (FP8 products are >= 2^-32), far above kMinBlockExp.
// NaN/Inf codes are treated as zeros here; the caller recomputes rows holding them with the scalar model.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "numerics/hopper_accum.h"
#include "quant/ref_gemm.h"
#include "quant/ref_gemm_detail.h"

#define FP8T_SIMD __attribute__((target("avx2,fma")))
#define FP8T_SIMD_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace fp8train::quant::detail {
namespace {

bool cpu_has_avx2_fma() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
}

constexpr int kLanes = 16;        // fp32 kernel panel width
constexpr int kHopperLanes = 32;  // hopper kernel panel width
constexpr int8_t kZeroExp = -100;   // zero codes: zero products stay <= -85, below every real exponent
constexpr int32_t kNoExp = -100000;
constexpr int32_t kMinBlockExp = -100;

struct CodeTable {
  int8_t exp[256];
  float value[256];
};

// value_scale: a power of two applied to every decoded value (exact).
CodeTable make_table(num::Fp8Format f, float value_scale) {
  CodeTable t{};
  for (int c = 0; c < 256; ++c) {
    const num::Fp8Parts parts = num::fp8_parts(f, static_cast<uint8_t>(c));
    const bool zero = parts.special || parts.sig == 0;
    t.exp[c] = zero ? kZeroExp : static_cast<int8_t>(parts.exp);
    t.value[c] = zero ? 0.0f : num::fp8_decode(f, static_cast<uint8_t>(c)) * value_scale;
  }
  return t;
}

// One block of n <= 32 products for 32 lanes, updating the chain values c[0..3]. b_exp: [n][32] int8,
// b_val: [n][32] float (pre-scaled by 2^(13 - T)).
FP8T_SIMD_INLINE void hopper_block32(const int8_t* a_exp, const float* a_val, const int8_t* b_exp,
                                     const float* b_val, int n, int32_t fast_max_exp, __m256 c[4]) {
  __m256i m = _mm256_set1_epi8(-128);
  for (int t = 0; t < n; ++t) {
    const __m256i be = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b_exp + kHopperLanes * t));
    m = _mm256_max_epi8(m, _mm256_adds_epi8(_mm256_set1_epi8(a_exp[t]), be));
  }
  const __m128i m_lo = _mm256_castsi256_si128(m), m_hi = _mm256_extracti128_si256(m, 1);
  const __m256i pmax[4] = {_mm256_cvtepi8_epi32(m_lo), _mm256_cvtepi8_epi32(_mm_srli_si128(m_lo, 8)),
                           _mm256_cvtepi8_epi32(m_hi), _mm256_cvtepi8_epi32(_mm_srli_si128(m_hi, 8))};
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i e[4];
  __m256i sum[4];
  for (int v = 0; v < 4; ++v) {
    const __m256i cabs = _mm256_and_si256(_mm256_castps_si256(c[v]), abs_mask);
    const __m256i czero = _mm256_cmpeq_epi32(cabs, _mm256_setzero_si256());
    const __m256i ec = _mm256_blendv_epi8(_mm256_sub_epi32(_mm256_srli_epi32(cabs, 23), _mm256_set1_epi32(127)),
                                          _mm256_set1_epi32(kNoExp), czero);
    e[v] = _mm256_max_epi32(_mm256_max_epi32(pmax[v], ec), _mm256_set1_epi32(kMinBlockExp));
    // c in units of 2^(E - 13): c * 2^(13 - E), exact, truncated toward zero.
    const __m256 up = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127 + 13), e[v]), 23));
    sum[v] = _mm256_cvttps_epi32(_mm256_mul_ps(c[v], up));
  }
  const __m256i fast_max = _mm256_set1_epi32(fast_max_exp);
  int over = 0;
  for (int v = 0; v < 4; ++v) over |= _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(e[v], fast_max)));
  if (over == 0) {
    __m256i shift[4];  // (T - E) << 23, T - E clamped to 100 (only all-zero lanes reach the clamp)
    for (int v = 0; v < 4; ++v)
      shift[v] = _mm256_slli_epi32(_mm256_min_epi32(_mm256_sub_epi32(fast_max, e[v]), _mm256_set1_epi32(100)), 23);
    for (int t = 0; t < n; ++t) {
      const __m256 av = _mm256_set1_ps(a_val[t]);
      const float* bv = b_val + kHopperLanes * t;
      for (int v = 0; v < 4; ++v) {
        const __m256i prod = _mm256_castps_si256(_mm256_mul_ps(av, _mm256_loadu_ps(bv + 8 * v)));
        const __m256 scaled = _mm256_castsi256_ps(_mm256_add_epi32(prod, shift[v]));
        sum[v] = _mm256_add_epi32(sum[v], _mm256_cvttps_epi32(scaled));
      }
    }
  } else {
    __m256 rescale[4];  // 2^(T - E): E <= 127 keeps it a normal float for every allowed T
    for (int v = 0; v < 4; ++v)
      rescale[v] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127 + fast_max_exp), e[v]), 23));
    for (int t = 0; t < n; ++t) {
      const __m256 av = _mm256_set1_ps(a_val[t]);
      const float* bv = b_val + kHopperLanes * t;
      for (int v = 0; v < 4; ++v) {
        // a * b' is exact and normal; the rescale is exact unless the result is below 2^-126, where it
        // truncates to 0 either way.
        const __m256 prod = _mm256_mul_ps(_mm256_mul_ps(av, _mm256_loadu_ps(bv + 8 * v)), rescale[v]);
        sum[v] = _mm256_add_epi32(sum[v], _mm256_cvttps_epi32(prod));
      }
    }
  }
  const __m256 trunc_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0xFFFFFC00u)));
  for (int v = 0; v < 4; ++v) {
    const __m256 f = _mm256_and_ps(_mm256_cvtepi32_ps(sum[v]), trunc_mask);
    const __m256i unit = _mm256_slli_epi32(_mm256_add_epi32(e[v], _mm256_set1_epi32(127 - 13)), 23);
    c[v] = _mm256_mul_ps(f, _mm256_castsi256_ps(unit));
  }
}

// Accumulator state of one output row across a 32-column panel, kept in memory between K chunks.
struct alignas(32) RowState {
  float acc[kHopperLanes];
  float chain[kHopperLanes];
  float pending[kHopperLanes];
};

// Blocks [k_begin, k_end) of one output row and one 32-column panel (k_begin a multiple of 32), with the
// promotion rules of hopper_element. sb_panel: [groups][32] scales of the panel's columns.
FP8T_SIMD void hopper_row_chunk(const HopperProblem& p, const int8_t* a_exp, const float* a_val,
                                const int8_t* b_exp, const float* b_val, const float* sb_panel, int64_t i,
                                int64_t k_begin, int64_t k_end, RowState& st) {
  const int64_t K = p.k, P = p.promote, G = p.group_k;
  __m256 acc[4], chain[4];
  for (int v = 0; v < 4; ++v) {
    acc[v] = _mm256_load_ps(st.acc + 8 * v);
    chain[v] = _mm256_load_ps(st.chain + 8 * v);
  }
  alignas(32) float tmp[kHopperLanes];
  const bool pending_model = !p.per_tensor && (P == num::kNeverPromote || P > G);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += num::kHopperBlockK) {
    const int n = static_cast<int>(std::min<int64_t>(num::kHopperBlockK, K - k0));
    hopper_block32(a_exp + k0, a_val + k0, b_exp + kHopperLanes * k0, b_val + kHopperLanes * k0, n,
                   p.fast_max_exp, chain);
    const int64_t end = k0 + n;
    if (p.per_tensor) {
      if (P != num::kNeverPromote && (end % P == 0 || end == K)) {
        for (int v = 0; v < 4; ++v) {
          acc[v] = _mm256_add_ps(acc[v], chain[v]);
          chain[v] = _mm256_setzero_ps();
        }
      }
    } else if (!pending_model) {
      if (end % P == 0 || end == K) {
        const int64_t g = k0 / G;
        const __m256 sa = _mm256_set1_ps(p.sa.at(i, g));
        const float* sb = sb_panel + g * kHopperLanes;
        for (int v = 0; v < 4; ++v) {
          acc[v] = _mm256_fmadd_ps(_mm256_mul_ps(sa, _mm256_loadu_ps(sb + 8 * v)), chain[v], acc[v]);
          chain[v] = _mm256_setzero_ps();
        }
      }
    } else if (end % G == 0 || end == K) {
      const int64_t g = k0 / G;
      const __m256 sa = _mm256_set1_ps(p.sa.at(i, g));
      const float* sb = sb_panel + g * kHopperLanes;
      for (int v = 0; v < 4; ++v) {
        _mm256_store_ps(tmp + 8 * v, _mm256_mul_ps(_mm256_mul_ps(sa, _mm256_loadu_ps(sb + 8 * v)), chain[v]));
        chain[v] = _mm256_setzero_ps();
      }
      for (int l = 0; l < kHopperLanes; ++l) st.pending[l] = fp22_add(st.pending[l], tmp[l]);
      if ((P != num::kNeverPromote && end % P == 0) || end == K) {
        for (int v = 0; v < 4; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_load_ps(st.pending + 8 * v));
        std::fill(st.pending, st.pending + kHopperLanes, 0.0f);
      }
    }
  }
  for (int v = 0; v < 4; ++v) {
    _mm256_store_ps(st.acc + 8 * v, acc[v]);
    _mm256_store_ps(st.chain + 8 * v, chain[v]);
  }
}

FP8T_SIMD void hopper_gemm_avx2(const HopperProblem& p, float* acc) {
  const int64_t M = p.m, N = p.n, K = p.k;
  // B values carry 2^(13 - T): exact, and normal for every FP8 value when T lies in [-60, 100].
  const CodeTable ta = make_table(p.fa, 1.0f), tb = make_table(p.fb, std::ldexp(1.0f, 13 - p.fast_max_exp));
  const int64_t panels = (N + kHopperLanes - 1) / kHopperLanes;
  const int64_t groups = p.per_tensor ? 1 : (K + p.group_k - 1) / p.group_k;
  // B panels: exponents [panels][K][32] int8 and values [panels][K][32] float (padding columns: zero codes).
  std::vector<int8_t> bexp(static_cast<size_t>(panels * K * kHopperLanes));
  std::vector<float> bval(static_cast<size_t>(panels * K * kHopperLanes));
  std::vector<float> sbpack(static_cast<size_t>(panels * groups * kHopperLanes), 1.0f);
#pragma omp parallel for schedule(static)
  for (int64_t pn = 0; pn < panels; ++pn) {
    int8_t* de = bexp.data() + pn * K * kHopperLanes;
    float* dv = bval.data() + pn * K * kHopperLanes;
    for (int l = 0; l < kHopperLanes; ++l) {
      const int64_t j = pn * kHopperLanes + l;
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t code = j < N ? p.b[j * K + k] : uint8_t{0};
        de[kHopperLanes * k + l] = tb.exp[code];
        dv[kHopperLanes * k + l] = tb.value[code];
      }
      if (!p.per_tensor && j < N)
        for (int64_t g = 0; g < groups; ++g)
          sbpack[static_cast<size_t>((pn * groups + g) * kHopperLanes + l)] = p.sb.at(j, g);
    }
  }
  // Row blocks × panels; inside, K in chunks of kChunkK so a panel chunk (kChunkK · 160 bytes) stays in L1
  // while every row of the block walks over it.
  constexpr int64_t kRowBlock = 8, kChunkK = 128;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
#pragma omp parallel
  {
    std::vector<int8_t> a_exp(static_cast<size_t>(kRowBlock * K));
    std::vector<float> a_val(static_cast<size_t>(kRowBlock * K));
    std::vector<RowState> state(kRowBlock);
#pragma omp for schedule(dynamic, 1)
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
      const int64_t i0 = rb * kRowBlock, i1 = std::min(M, i0 + kRowBlock);
      for (int64_t i = i0; i < i1; ++i) {
        const uint8_t* src = p.a + i * K;
        const int64_t off = (i - i0) * K;
        for (int64_t k = 0; k < K; ++k) {
          a_exp[static_cast<size_t>(off + k)] = ta.exp[src[k]];
          a_val[static_cast<size_t>(off + k)] = ta.value[src[k]];
        }
      }
      for (int64_t pn = 0; pn < panels; ++pn) {
        const int8_t* pe = bexp.data() + pn * K * kHopperLanes;
        const float* pv = bval.data() + pn * K * kHopperLanes;
        const float* sb = sbpack.data() + pn * groups * kHopperLanes;
        for (auto& st : state) st = RowState{};
        for (int64_t kc = 0; kc < K; kc += kChunkK) {
          const int64_t kc_end = std::min(K, kc + kChunkK);
          for (int64_t i = i0; i < i1; ++i)
            hopper_row_chunk(p, a_exp.data() + (i - i0) * K, a_val.data() + (i - i0) * K, pe, pv, sb, i, kc, kc_end,
                             state[static_cast<size_t>(i - i0)]);
        }
        const int lanes = static_cast<int>(std::min<int64_t>(kHopperLanes, N - pn * kHopperLanes));
        const bool chain_only = p.per_tensor && p.promote == num::kNeverPromote;
        for (int64_t i = i0; i < i1; ++i) {
          const RowState& st = state[static_cast<size_t>(i - i0)];
          std::copy(chain_only ? st.chain : st.acc, (chain_only ? st.chain : st.acc) + lanes, acc + i * N + pn * kHopperLanes);
        }
      }
    }
  }
}

// FP32: R rows × 16 columns of fma chains over k in order.
template <int R>
FP8T_SIMD_INLINE void fp32_rows_panel(const float* a, int64_t k, const float* bpanel, float* out, int64_t ldo,
                                      int lanes) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t t = 0; t < k; ++t) {
    const __m256 b0 = _mm256_loadu_ps(bpanel + 16 * t), b1 = _mm256_loadu_ps(bpanel + 16 * t + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_set1_ps(a[r * k + t]);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  alignas(32) float tmp[kLanes];
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(tmp, acc[r][0]);
    _mm256_store_ps(tmp + 8, acc[r][1]);
    std::copy(tmp, tmp + lanes, out + r * ldo);
  }
}

FP8T_SIMD void fp32_gemm_avx2(int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* acc) {
  const int64_t panels = (N + kLanes - 1) / kLanes;
  std::vector<float> bpack(static_cast<size_t>(panels * K * kLanes), 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t pn = 0; pn < panels; ++pn)
    for (int l = 0; l < kLanes && pn * kLanes + l < N; ++l) {
      const float* src = b + (pn * kLanes + l) * K;
      float* dst = bpack.data() + pn * K * kLanes + l;
      for (int64_t t = 0; t < K; ++t) dst[t * kLanes] = src[t];
    }
  constexpr int64_t kRows = 4, kRowBlock = 32;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t i0 = rb * kRowBlock, i1 = std::min(M, i0 + kRowBlock);
    for (int64_t pn = 0; pn < panels; ++pn) {
      const int lanes = static_cast<int>(std::min<int64_t>(kLanes, N - pn * kLanes));
      const float* bp = bpack.data() + pn * K * kLanes;
      int64_t i = i0;
      for (; i + kRows <= i1; i += kRows) fp32_rows_panel<kRows>(a + i * K, K, bp, acc + i * N + pn * kLanes, N, lanes);
      for (; i < i1; ++i) fp32_rows_panel<1>(a + i * K, K, bp, acc + i * N + pn * kLanes, N, lanes);
    }
  }
}

FP8T_SIMD void promote_row_avx2(int64_t n, float sa, const float* sb, const double* partial, float* acc) {
  const __m256 sav = _mm256_set1_ps(sa);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 part = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(partial + j + 4)),
                                        _mm256_cvtpd_ps(_mm256_loadu_pd(partial + j)));
    const __m256 s = _mm256_mul_ps(sav, _mm256_loadu_ps(sb + j));
    _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(s, part, _mm256_loadu_ps(acc + j)));
  }
  for (; j < n; ++j) {
    const __m128 s = _mm_set_ss(sa * sb[j]);
    const __m128 part = _mm_set_ss(static_cast<float>(partial[j]));
    acc[j] = _mm_cvtss_f32(_mm_fmadd_ss(s, part, _mm_set_ss(acc[j])));
  }
}

}  // namespace

bool hopper_gemm_simd(const HopperProblem& p, float* acc) {
  if (!cpu_has_avx2_fma()) return false;
  FP8T_CHECK(p.fast_max_exp >= -60 && p.fast_max_exp <= 100, "hopper kernel: fast_max_exp {} outside [-60, 100]",
             p.fast_max_exp);
  hopper_gemm_avx2(p, acc);
  return true;
}

bool fp32_gemm_simd(int64_t m, int64_t n, int64_t k, const float* a_values, const float* b_values, float* acc) {
  if (!cpu_has_avx2_fma()) return false;
  fp32_gemm_avx2(m, n, k, a_values, b_values, acc);
  return true;
}

bool promote_row_simd(int64_t n, float sa, const float* sb, const double* partial, float* acc) {
  if (!cpu_has_avx2_fma()) return false;
  promote_row_avx2(n, sa, sb, partial, acc);
  return true;
}

}  // namespace fp8train::quant::detail
