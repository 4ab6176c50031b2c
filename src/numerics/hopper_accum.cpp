// The scalar Hopper accumulator model (see hopper_accum.h). This is the specification the fast reference
// GEMM and the CUDA kernels are tested against; it favours plainness over speed.
#include "numerics/hopper_accum.h"

#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace fp8train::num {

Fp8Parts fp8_parts(Fp8Format f, uint8_t code) {
  const int mbits = f == Fp8Format::E4M3 ? 3 : 2;
  const int ebits = f == Fp8Format::E4M3 ? 4 : 5;
  const int bias = f == Fp8Format::E4M3 ? 7 : 15;
  const int exp_field = (code >> mbits) & ((1 << ebits) - 1);
  const int man = code & ((1 << mbits) - 1);
  const bool special = f == Fp8Format::E4M3 ? (exp_field == 15 && man == 7) : (exp_field == 31);
  const int sign = (code & 0x80) ? -1 : 1;
  if (exp_field == 0) return {sign * man, 1 - bias, special};
  return {sign * ((1 << mbits) | man), exp_field - bias, special};
}

namespace {

int mantissa_bits(Fp8Format f) { return f == Fp8Format::E4M3 ? 3 : 2; }

// Exponent of a finite non-zero float as floor(log2|x|).
int float_exponent(float x) {
  int e;
  std::frexp(x, &e);  // x = m * 2^e with m in [0.5, 1)
  return e - 1;
}

}  // namespace

float hopper_block(const uint8_t* a, Fp8Format fa, const uint8_t* b, Fp8Format fb, int n, float c) {
  FP8T_CHECK(n >= 0 && n <= kHopperBlockK, "hopper_block takes at most {} products, got {}", kHopperBlockK, n);
  // Products as exact integers: value_i = psig[i] * 2^(pexp[i] - ma - mb).
  int64_t psig[kHopperBlockK];
  int pexp[kHopperBlockK];
  const int frac_bits = mantissa_bits(fa) + mantissa_bits(fb);
  bool any_special = false;
  float special_sum = 0.0f;
  bool have_e = false;
  int e_max = 0;
  for (int i = 0; i < n; ++i) {
    const Fp8Parts pa = fp8_parts(fa, a[i]);
    const Fp8Parts pb = fp8_parts(fb, b[i]);
    if (pa.special || pb.special) {
      any_special = true;
      special_sum += fp8_decode(fa, a[i]) * fp8_decode(fb, b[i]);
      psig[i] = 0;
      pexp[i] = 0;
      continue;
    }
    psig[i] = static_cast<int64_t>(pa.sig) * pb.sig;
    pexp[i] = pa.exp + pb.exp;
    if (psig[i] != 0 && (!have_e || pexp[i] > e_max)) {
      e_max = pexp[i];
      have_e = true;
    }
  }
  if (any_special || !std::isfinite(c)) return special_sum + c;
  if (c != 0.0f) {
    const int ec = float_exponent(c);
    if (!have_e || ec > e_max) e_max = ec;
    have_e = true;
  }
  if (!have_e) return c;  // all products zero and c == 0 (keeps the sign of c)

  // Sum of terms in units of 2^(E - 13), each truncated toward zero.
  const int unit_exp = e_max - kFp22FractionBits;
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    if (psig[i] == 0) continue;
    // term = psig * 2^(pexp - frac_bits - unit_exp); the shift is <= frac_bits + 13 to the left side.
    const int shift = pexp[i] - frac_bits - unit_exp;
    const int64_t mag = std::llabs(psig[i]);
    int64_t t;
    if (shift >= 0) {
      t = mag << shift;
    } else {
      t = -shift >= 63 ? 0 : (mag >> -shift);
    }
    sum += psig[i] < 0 ? -t : t;
  }
  if (c != 0.0f) {
    // c = m * 2^(ec - 23) with a 24-bit integer m; shifted to units of 2^unit_exp, truncated.
    const int ec = float_exponent(c);
    const double m = std::ldexp(std::fabs(static_cast<double>(c)), 23 - ec);  // exact 24-bit integer
    const int shift = ec - 23 - unit_exp;
    int64_t t;
    const int64_t mi = static_cast<int64_t>(m);
    if (shift >= 0) {
      t = mi << shift;
    } else {
      t = -shift >= 63 ? 0 : (mi >> -shift);
    }
    sum += c < 0 ? -t : t;
  }
  if (sum == 0) return 0.0f;
  // Normalise and truncate to 14 significant bits (1 + 13 fraction bits).
  int64_t mag = std::llabs(sum);
  int msb = 63 - __builtin_clzll(static_cast<unsigned long long>(mag));
  if (msb > kFp22FractionBits) {
    const int drop = msb - kFp22FractionBits;
    mag = (mag >> drop) << drop;
  }
  const double v = std::ldexp(static_cast<double>(mag), unit_exp);  // exact: 14 significant bits
  return static_cast<float>(sum < 0 ? -v : v);
}

float hopper_dot(const uint8_t* a, Fp8Format fa, const uint8_t* b, Fp8Format fb, int k, int promote_interval) {
  FP8T_CHECK(promote_interval == kNeverPromote || (promote_interval > 0 && promote_interval % kHopperBlockK == 0),
             "promotion interval must be a positive multiple of {} or 'never', got {}", kHopperBlockK,
             promote_interval);
  FP8T_CHECK(k >= 0, "hopper_dot: the dot-product length k must be >= 0, got {}", k);
  float acc = 0.0f;
  float chain = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kHopperBlockK) {
    const int n = k - k0 < kHopperBlockK ? k - k0 : kHopperBlockK;
    chain = hopper_block(a + k0, fa, b + k0, fb, n, chain);
    const bool group_end = promote_interval != kNeverPromote && ((k0 + n) % promote_interval == 0 || k0 + n == k);
    if (group_end) {
      acc = acc + chain;
      chain = 0.0f;
    }
  }
  return promote_interval == kNeverPromote ? chain : acc;
}

float hopper_dot_scaled(const uint8_t* a, Fp8Format fa, const float* scale_a, const uint8_t* b, Fp8Format fb,
                        const float* scale_b, int k, int promote_interval) {
  FP8T_CHECK(promote_interval > 0 && promote_interval % kHopperBlockK == 0,
             "scaled accumulation needs a positive promotion interval that is a multiple of {}, got {}",
             kHopperBlockK, promote_interval);
  FP8T_CHECK(k >= 0, "hopper_dot_scaled: the dot-product length k must be >= 0, got {}", k);
  float acc = 0.0f;
  float chain = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kHopperBlockK) {
    const int n = k - k0 < kHopperBlockK ? k - k0 : kHopperBlockK;
    chain = hopper_block(a + k0, fa, b + k0, fb, n, chain);
    if ((k0 + n) % promote_interval == 0 || k0 + n == k) {
      const int g = k0 / promote_interval;
      acc = std::fma(scale_a[g] * scale_b[g], chain, acc);
      chain = 0.0f;
    }
  }
  return acc;
}

float hopper_dot_scaled_split(const uint8_t* a, Fp8Format fa, const float* scale_a, const uint8_t* b, Fp8Format fb,
                              const float* scale_b, int k, int promote_interval, int splits) {
  FP8T_CHECK(promote_interval > 0 && promote_interval % kHopperBlockK == 0,
             "split accumulation needs a positive promotion interval that is a multiple of {}, got {}", kHopperBlockK,
             promote_interval);
  FP8T_CHECK(k >= 0, "hopper_dot_scaled_split: the dot-product length k must be >= 0, got {}", k);
  const int groups = (k + promote_interval - 1) / promote_interval;
  FP8T_CHECK(splits >= 1 && splits <= (groups > 0 ? groups : 1),
             "hopper_dot_scaled_split: splits = {} must be in [1, {}] (one K group per range at least)", splits,
             groups > 0 ? groups : 1);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const int g0 = static_cast<int>(split_range_begin(groups, splits, s));
    const int g1 = static_cast<int>(split_range_begin(groups, splits, s + 1));
    const int k0 = g0 * promote_interval;
    const int k1 = g1 * promote_interval < k ? g1 * promote_interval : k;
    const float r = hopper_dot_scaled(a + k0, fa, scale_a + g0, b + k0, fb, scale_b + g0, k1 - k0, promote_interval);
    total = s == 0 ? r : total + r;
  }
  return total;
}

}  // namespace fp8train::num
