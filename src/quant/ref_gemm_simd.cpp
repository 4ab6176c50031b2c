// AVX2 kernels of the reference GEMM, compiled for avx2+fma through function attributes and chosen at run
// time (the library itself is built for baseline x86-64). They compute the same bits as the scalar paths
// in ref_gemm.cpp; tests compare them with GemmConfig::force_scalar and with num::hopper_dot*.
//
// Hopper kernel layout: 16 output columns (two 8-lane int32/float vectors) per panel.
//   B panel p, element k: 32 int32 = [exp of columns 16p..16p+15][sig << (14 - F) of the same columns]
//   A row i, element k:    2 int32 = [exp, sig]
// exp is the FP8 operand exponent (kZeroExp for a zero code, so zero products never set the block
// maximum), sig the signed integer significand (num::fp8_parts), F = mantissa bits of A + B. For one block
// of n <= 32 products and chain value c (per lane):
//   E    = max(max over products of expA + expB, exponent of c (if c != 0), -100)
//   term = |sigA * (sigB << (14 - F))| >> (E + 1 - expA - expB)  = the product in units of 2^(E - 13),
//          truncated toward zero (vpsrlvd gives 0 for counts >= 32), then given the product's sign
//   c    = its 24-bit significand >> (E - exp(c) + 10), signed
//   sum  = exact int32 sum (|sum| < 2^22); result = (float(sum) with the low 10 mantissa bits cleared)
//          * 2^(E - 13): the FP22 normalise-and-truncate of num::hopper_block.
// NaN/Inf codes are treated as zeros here; the caller recomputes rows holding them with the scalar model.
#include <immintrin.h>

#include <algorithm>
#include <vector>

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

constexpr int kLanes = 16;
constexpr int32_t kZeroExp = -200;    // exponent given to zero codes: far below every real product
constexpr int32_t kNoExp = -100000;   // "no term" for the block maximum
constexpr int32_t kMinBlockExp = -100;

int mantissa_bits(num::Fp8Format f) { return f == num::Fp8Format::E4M3 ? 3 : 2; }

struct CodeTable {
  int32_t exp[256];
  int32_t sig[256];
};

CodeTable make_table(num::Fp8Format f, int sig_shift) {
  CodeTable t{};
  for (int c = 0; c < 256; ++c) {
    const num::Fp8Parts parts = num::fp8_parts(f, static_cast<uint8_t>(c));
    const int32_t sig = parts.special ? 0 : parts.sig;
    t.sig[c] = sig * (1 << sig_shift);
    t.exp[c] = sig == 0 ? kZeroExp : parts.exp;
  }
  return t;
}

// One block of n <= 32 products for 16 lanes, updating the chain values c0 (lanes 0-7) and c1 (8-15).
FP8T_SIMD_INLINE void hopper_block16(const int32_t* a, const int32_t* b, int n, __m256& c0, __m256& c1) {
  __m256i m0 = _mm256_set1_epi32(kNoExp), m1 = m0;
  for (int t = 0; t < n; ++t) {
    const __m256i ae = _mm256_set1_epi32(a[2 * t]);
    const int32_t* bt = b + 32 * t;
    m0 = _mm256_max_epi32(m0, _mm256_add_epi32(ae, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bt))));
    m1 = _mm256_max_epi32(m1, _mm256_add_epi32(ae, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bt + 8))));
  }
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i no_exp = _mm256_set1_epi32(kNoExp);
  const __m256i floor_exp = _mm256_set1_epi32(kMinBlockExp);
  const __m256i man_mask = _mm256_set1_epi32(0x7FFFFF), implicit = _mm256_set1_epi32(0x800000);
  const __m256i ten = _mm256_set1_epi32(10), one = _mm256_set1_epi32(1);
  __m256i e1[2], sum[2];
  const __m256i mx[2] = {m0, m1};
  __m256* cs[2] = {&c0, &c1};
  for (int v = 0; v < 2; ++v) {
    const __m256i cb = _mm256_castps_si256(*cs[v]);
    const __m256i cabs = _mm256_and_si256(cb, abs_mask);
    const __m256i czero = _mm256_cmpeq_epi32(cabs, _mm256_setzero_si256());
    __m256i ec = _mm256_sub_epi32(_mm256_srli_epi32(cabs, 23), _mm256_set1_epi32(127));
    ec = _mm256_blendv_epi8(ec, no_exp, czero);
    const __m256i e = _mm256_max_epi32(_mm256_max_epi32(mx[v], ec), floor_exp);
    const __m256i cm = _mm256_or_si256(_mm256_and_si256(cb, man_mask), implicit);
    const __m256i ct = _mm256_srlv_epi32(cm, _mm256_add_epi32(_mm256_sub_epi32(e, ec), ten));
    sum[v] = _mm256_sign_epi32(ct, cb);
    e1[v] = _mm256_add_epi32(e, one);
  }
  for (int t = 0; t < n; ++t) {
    const __m256i ae = _mm256_set1_epi32(a[2 * t]);
    const __m256i as = _mm256_set1_epi32(a[2 * t + 1]);
    const int32_t* bt = b + 32 * t;
    for (int v = 0; v < 2; ++v) {
      const __m256i be = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bt + 8 * v));
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bt + 16 + 8 * v));
      const __m256i cnt = _mm256_sub_epi32(_mm256_sub_epi32(e1[v], ae), be);
      const __m256i prod = _mm256_mullo_epi32(as, bs);
      const __m256i term = _mm256_srlv_epi32(_mm256_abs_epi32(prod), cnt);
      sum[v] = _mm256_add_epi32(sum[v], _mm256_sign_epi32(term, prod));
    }
  }
  const __m256 trunc_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0xFFFFFC00u)));
  for (int v = 0; v < 2; ++v) {
    const __m256 f = _mm256_and_ps(_mm256_cvtepi32_ps(sum[v]), trunc_mask);
    const __m256i unit = _mm256_slli_epi32(_mm256_add_epi32(e1[v], _mm256_set1_epi32(127 - 13 - 1)), 23);
    *cs[v] = _mm256_mul_ps(f, _mm256_castsi256_ps(unit));
  }
}

// The whole K loop of one output row and one 16-column panel. out receives `lanes` valid columns.
// sb_panel: [groups][16] scales of the panel's columns (block scales only).
FP8T_SIMD void hopper_row_panel(const HopperProblem& p, const int32_t* arow, const int32_t* bpanel,
                                const float* sb_panel, int64_t i, float* out, int lanes) {
  const int64_t K = p.k, P = p.promote, G = p.group_k;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, chain0 = acc0, chain1 = acc0;
  alignas(32) float pending[kLanes] = {};
  alignas(32) float tmp[kLanes];
  const bool pending_model = !p.per_tensor && (P == num::kNeverPromote || P > G);
  for (int64_t k0 = 0; k0 < K; k0 += num::kHopperBlockK) {
    const int n = static_cast<int>(std::min<int64_t>(num::kHopperBlockK, K - k0));
    hopper_block16(arow + 2 * k0, bpanel + 32 * k0, n, chain0, chain1);
    const int64_t end = k0 + n;
    if (p.per_tensor) {
      if (P != num::kNeverPromote && (end % P == 0 || end == K)) {
        acc0 = _mm256_add_ps(acc0, chain0);
        acc1 = _mm256_add_ps(acc1, chain1);
        chain0 = chain1 = _mm256_setzero_ps();
      }
    } else if (!pending_model) {
      if (end % P == 0 || end == K) {
        const int64_t g = k0 / G;
        const __m256 sa = _mm256_set1_ps(p.sa.at(i, g));
        const float* sb = sb_panel + g * kLanes;
        acc0 = _mm256_fmadd_ps(_mm256_mul_ps(sa, _mm256_loadu_ps(sb)), chain0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_mul_ps(sa, _mm256_loadu_ps(sb + 8)), chain1, acc1);
        chain0 = chain1 = _mm256_setzero_ps();
      }
    } else if (end % G == 0 || end == K) {
      const int64_t g = k0 / G;
      const __m256 sa = _mm256_set1_ps(p.sa.at(i, g));
      const float* sb = sb_panel + g * kLanes;
      _mm256_store_ps(tmp, _mm256_mul_ps(_mm256_mul_ps(sa, _mm256_loadu_ps(sb)), chain0));
      _mm256_store_ps(tmp + 8, _mm256_mul_ps(_mm256_mul_ps(sa, _mm256_loadu_ps(sb + 8)), chain1));
      for (int l = 0; l < kLanes; ++l) pending[l] = fp22_add(pending[l], tmp[l]);
      chain0 = chain1 = _mm256_setzero_ps();
      if ((P != num::kNeverPromote && end % P == 0) || end == K) {
        acc0 = _mm256_add_ps(acc0, _mm256_load_ps(pending));
        acc1 = _mm256_add_ps(acc1, _mm256_load_ps(pending + 8));
        std::fill(pending, pending + kLanes, 0.0f);
      }
    }
  }
  if (p.per_tensor && P == num::kNeverPromote) {
    acc0 = chain0;
    acc1 = chain1;
  }
  _mm256_store_ps(tmp, acc0);
  _mm256_store_ps(tmp + 8, acc1);
  std::copy(tmp, tmp + lanes, out);
}

FP8T_SIMD void hopper_gemm_avx2(const HopperProblem& p, float* acc) {
  const int64_t M = p.m, N = p.n, K = p.k;
  const int F = mantissa_bits(p.fa) + mantissa_bits(p.fb);
  const CodeTable ta = make_table(p.fa, 0), tb = make_table(p.fb, 14 - F);
  const int64_t panels = (N + kLanes - 1) / kLanes;
  const int64_t groups = p.per_tensor ? 1 : (K + p.group_k - 1) / p.group_k;
  std::vector<int32_t> bpack(static_cast<size_t>(panels * K * 32));
  std::vector<float> sbpack(static_cast<size_t>(panels * groups * kLanes), 1.0f);
#pragma omp parallel for schedule(static)
  for (int64_t pn = 0; pn < panels; ++pn) {
    int32_t* dst = bpack.data() + pn * K * 32;
    for (int l = 0; l < kLanes; ++l) {
      const int64_t j = pn * kLanes + l;
      if (j >= N) {
        for (int64_t k = 0; k < K; ++k) {
          dst[32 * k + l] = kZeroExp;
          dst[32 * k + 16 + l] = 0;
        }
        continue;
      }
      const uint8_t* src = p.b + j * K;
      for (int64_t k = 0; k < K; ++k) {
        dst[32 * k + l] = tb.exp[src[k]];
        dst[32 * k + 16 + l] = tb.sig[src[k]];
      }
      if (!p.per_tensor)
        for (int64_t g = 0; g < groups; ++g) sbpack[static_cast<size_t>((pn * groups + g) * kLanes + l)] = p.sb.at(j, g);
    }
  }
  constexpr int64_t kRowBlock = 8;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
#pragma omp parallel
  {
    std::vector<int32_t> arows(static_cast<size_t>(kRowBlock * K * 2));
#pragma omp for schedule(dynamic, 1)
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
      const int64_t i0 = rb * kRowBlock, i1 = std::min(M, i0 + kRowBlock);
      for (int64_t i = i0; i < i1; ++i) {
        const uint8_t* src = p.a + i * K;
        int32_t* dst = arows.data() + (i - i0) * K * 2;
        for (int64_t k = 0; k < K; ++k) {
          dst[2 * k] = ta.exp[src[k]];
          dst[2 * k + 1] = ta.sig[src[k]];
        }
      }
      for (int64_t pn = 0; pn < panels; ++pn) {
        const int lanes = static_cast<int>(std::min<int64_t>(kLanes, N - pn * kLanes));
        for (int64_t i = i0; i < i1; ++i)
          hopper_row_panel(p, arows.data() + (i - i0) * K * 2, bpack.data() + pn * K * 32,
                           sbpack.data() + pn * groups * kLanes, i, acc + i * N + pn * kLanes, lanes);
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
