// Scalar number formats with explicit rounding, saturation and NaN modes:
//   E4M3 (OCP e4m3fn: bias 7, no Inf, NaN = S.1111.111, max 448)
//   E5M2 (OCP/IEEE-like: bias 15, Inf = S.11111.00, max 57344)
//   E5M6 (the top 12 bits of an IEEE fp16: bias 15, max 65024 = 0x7BF), stored in the low 12 bits of a uint16
//   UE8M0 (unsigned power-of-two scale 2^(code-127); 0xFF = NaN)
//   BF16 (round to nearest even, NaN kept a NaN)
//   INT8 symmetric (round to nearest even, or stochastic from a counter-based generator), range [-127, 127]
// All encoders are branch-light functions of the float32 bits, usable from CUDA kernels (FP8T_HD), so the
// GPU quantization kernels produce exactly the codes of the CPU reference.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/hd.h"

namespace fp8train::num {

enum class Fp8Format : uint8_t { E4M3 = 0, E5M2 = 1 };

// What happens to finite values that round beyond the largest finite code, and to ±Inf.
enum class Saturation : uint8_t {
  SatFinite,  // NVIDIA __NV_SATFINITE / cvt.satfinite: clamp to ±max (±Inf too)
  NonSat,     // NVIDIA __NV_NOSAT: E4M3 → NaN, E5M2/E5M6 → ±Inf
};

// Which NaN code a NaN (or an E4M3 non-saturating overflow) becomes.
enum class NanMode : uint8_t {
  Nvidia,    // canonical 0x7F whatever the sign (as cvt.rn.*.e4m3x2/e5m2x2 produce)
  MlDtypes,  // sign kept: E4M3 0x7F|sign, E5M2 0x7E|sign (ml_dtypes' quiet NaN)
};

FP8T_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
FP8T_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

namespace detail {

// Rounds |x| (float32 bits without sign, finite, non-NaN) to a binary format with `ebits` exponent bits,
// `mbits` mantissa bits and bias `bias`, round-to-nearest-even, with gradual underflow. Returns the
// magnitude code as if the exponent field were unbounded above (the caller compares it with its largest
// finite code, so overflow is decided after rounding).
FP8T_HD uint32_t round_magnitude(uint32_t abs_bits, int mbits, int bias) {
  const int fexp = static_cast<int>(abs_bits >> 23);  // biased float32 exponent
  if (fexp == 0) return 0;                             // float32 subnormals are far below every min subnormal here
  const int e = fexp - 127;                            // unbiased exponent of x
  const uint32_t sig = (abs_bits & 0x7FFFFFu) | 0x800000u;  // 24-bit significand, value = sig * 2^(e-23)
  const int emin = 1 - bias;                           // smallest normal exponent of the target
  const int e_eff = e < emin ? emin : e;
  const int shift = 23 - mbits + (e_eff - e);          // bits of sig below the target's quantum
  if (shift > 24) return 0;                            // below half the smallest subnormal
  uint32_t rounded = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (rounded & 1u))) ++rounded;
  // `rounded` carries the implicit bit (2^mbits) for normals; a carry out of the mantissa moves into the
  // exponent field by plain addition, and a subnormal rounding up to 2^mbits becomes the smallest normal.
  return (static_cast<uint32_t>(e_eff + bias - 1) << mbits) + rounded;
}

}  // namespace detail

// ---- E4M3 (e4m3fn) -------------------------------------------------------------------------------
inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint8_t kE4M3MaxCode = 0x7E;

FP8T_HD uint8_t e4m3_encode(float x, Saturation sat = Saturation::SatFinite, NanMode nan = NanMode::Nvidia) {
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint8_t nan_code = nan == NanMode::Nvidia ? uint8_t{0x7F} : static_cast<uint8_t>(0x7F | sign);
  if (abs > 0x7F800000u) return nan_code;
  uint32_t mag = abs == 0x7F800000u ? 0xFFFFu : detail::round_magnitude(abs, 3, 7);
  if (mag > kE4M3MaxCode) {
    if (sat == Saturation::NonSat) return nan_code;
    mag = kE4M3MaxCode;
  }
  return static_cast<uint8_t>(sign | mag);
}

FP8T_HD float e4m3_decode(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t exp = (code >> 3) & 0xF, man = code & 0x7;
  if (exp == 0xF && man == 0x7) return bits_float(0x7FC00000u | sign);
  if (exp == 0) {  // subnormal: man * 2^-9, exact in float32
    const float v = static_cast<float>(man) * 0.001953125f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - 7 + 127) << 23) | (man << 20));
}

// ---- E5M2 ----------------------------------------------------------------------------------------
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr uint8_t kE5M2MaxCode = 0x7B;

FP8T_HD uint8_t e5m2_encode(float x, Saturation sat = Saturation::SatFinite, NanMode nan = NanMode::Nvidia) {
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return nan == NanMode::Nvidia ? uint8_t{0x7F} : static_cast<uint8_t>(0x7E | sign);
  uint32_t mag = abs == 0x7F800000u ? 0xFFFFu : detail::round_magnitude(abs, 2, 15);
  if (mag > kE5M2MaxCode) mag = sat == Saturation::NonSat ? 0x7Cu : kE5M2MaxCode;
  return static_cast<uint8_t>(sign | mag);
}

FP8T_HD float e5m2_decode(uint8_t code) {
  // E5M2 is the top byte of an IEEE fp16: widen through the fp16 layout.
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t exp = (code >> 2) & 0x1F, man = code & 0x3;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 21) | (man ? 0x400000u : 0u));
  if (exp == 0) {  // man * 2^-16
    const float v = static_cast<float>(man) * 1.52587890625e-05f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - 15 + 127) << 23) | (man << 21));
}

// ---- branch-free host encoders for the CPU quantizers ---------------------------------------------
// e4m3_encode(x) / e5m2_encode(x) with their defaults (SatFinite, canonical NaN), written so a compiler can
// vectorize a loop of them with baseline SSE2: no variable shifts, one select per range. Normal range of the
// target: the float's mantissa rounded to nearest even by an integer add of (half − 1 + the kept LSB), the
// carry moving into the exponent; below the smallest normal: |x| scaled to units of the smallest subnormal
// (exact, a power of two) and added to 2^23, where the float adder rounds it to an integer (RNE, the default
// rounding mode) that the sum's low mantissa bits then hold.
// Equal to the reference encoders for every float32 (tests/numerics/formats_reference_test.cpp).
inline uint8_t e4m3_encode_fast(float x) {
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint32_t r = abs + 0x7FFFFu + ((abs >> 20) & 1u);
  const int32_t normal = static_cast<int32_t>(r >> 20) - (120 << 3);               // re-biased 127 → 7
  const float small = bits_float(abs < 0x3C800000u ? abs : 0x3C800000u) * 512.0f;  // |x| < 2^-6 in units of 2^-9
  const int32_t sub = static_cast<int32_t>(float_bits(small + 8388608.0f) - 0x4B000000u);  // RNE: 2^23 + (0..8)
  int32_t mag = abs < 0x3C800000u ? sub : normal;
  mag = mag > kE4M3MaxCode ? kE4M3MaxCode : mag;  // finite overflow and ±Inf saturate
  return abs > 0x7F800000u ? uint8_t{0x7F} : static_cast<uint8_t>(sign | static_cast<uint32_t>(mag));
}

inline uint8_t e5m2_encode_fast(float x) {
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint32_t r = abs + 0xFFFFFu + ((abs >> 21) & 1u);
  const int32_t normal = static_cast<int32_t>(r >> 21) - (112 << 2);                 // re-biased 127 → 15
  const float small = bits_float(abs < 0x38800000u ? abs : 0x38800000u) * 65536.0f;  // |x| < 2^-14, units of 2^-16
  const int32_t sub = static_cast<int32_t>(float_bits(small + 8388608.0f) - 0x4B000000u);  // RNE: 2^23 + (0..4)
  int32_t mag = abs < 0x38800000u ? sub : normal;
  mag = mag > kE5M2MaxCode ? kE5M2MaxCode : mag;
  return abs > 0x7F800000u ? uint8_t{0x7F} : static_cast<uint8_t>(sign | static_cast<uint32_t>(mag));
}

// ---- generic FP8 by format -------------------------------------------------------------------------
FP8T_HD uint8_t fp8_encode(Fp8Format f, float x, Saturation sat = Saturation::SatFinite,
                           NanMode nan = NanMode::Nvidia) {
  return f == Fp8Format::E4M3 ? e4m3_encode(x, sat, nan) : e5m2_encode(x, sat, nan);
}
FP8T_HD float fp8_decode(Fp8Format f, uint8_t code) {
  return f == Fp8Format::E4M3 ? e4m3_decode(code) : e5m2_decode(code);
}
FP8T_HD float fp8_max(Fp8Format f) { return f == Fp8Format::E4M3 ? kE4M3Max : kE5M2Max; }

// ---- E5M6: top 12 bits of an IEEE fp16 -----------------------------------------------------------
inline constexpr float kE5M6Max = 65024.0f;
inline constexpr uint16_t kE5M6MaxCode = 0x7BF;

FP8T_HD uint16_t e5m6_encode(float x, Saturation sat = Saturation::SatFinite) {
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 20) & 0x800u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(0x7E0u | sign);  // quiet NaN, sign kept
  uint32_t mag = abs == 0x7F800000u ? 0xFFFFu : detail::round_magnitude(abs, 6, 15);
  if (mag > kE5M6MaxCode) mag = sat == Saturation::NonSat ? 0x7C0u : kE5M6MaxCode;
  return static_cast<uint16_t>(sign | mag);
}

FP8T_HD float e5m6_decode(uint16_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x800) << 20;
  const uint32_t exp = (code >> 6) & 0x1F, man = code & 0x3F;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 17) | (man ? 0x400000u : 0u));
  if (exp == 0) {  // man * 2^-20
    const float v = static_cast<float>(man) * 9.5367431640625e-07f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp - 15 + 127) << 23) | (man << 17));
}

// Eight 12-bit E5M6 codes packed little-endian into three 32-bit words: value i occupies bits
// [12*i, 12*i+12) of the 96-bit little-endian integer words[0] | words[1] << 32 | words[2] << 64.
// The same for codes already below 4096: no masking, sums of disjoint bit fields (shift-and-add instructions;
// the CUDA E5M6 quantizer is instruction-bound). Codes 2 and 5 straddle words.
FP8T_HD void e5m6_pack8_12bit(const uint32_t c[8], uint32_t words[3]) {
  words[0] = c[0] + (c[1] << 12) + (c[2] << 24);
  words[1] = (c[2] >> 8) + (c[3] << 4) + (c[4] << 16) + (c[5] << 28);
  words[2] = (c[5] >> 4) + (c[6] << 8) + (c[7] << 20);
}
FP8T_HD void e5m6_pack8(const uint16_t codes[8], uint32_t words[3]) {
  uint32_t c[8];
  for (int i = 0; i < 8; ++i) c[i] = codes[i] & 0xFFFu;
  e5m6_pack8_12bit(c, words);
}

FP8T_HD void e5m6_unpack8(const uint32_t words[3], uint16_t codes[8]) {
  const uint64_t lo = words[0] | (static_cast<uint64_t>(words[1]) << 32);
  const uint64_t hi = words[2];
  for (int i = 0; i < 8; ++i) {
    const int pos = 12 * i;
    uint64_t c;
    if (pos + 12 <= 64) {
      c = lo >> pos;
    } else if (pos >= 64) {
      c = hi >> (pos - 64);
    } else {
      c = (lo >> pos) | (hi << (64 - pos));
    }
    codes[i] = static_cast<uint16_t>(c & 0xFFFu);
  }
}

// ---- UE8M0 power-of-two scales ---------------------------------------------------------------------
inline constexpr uint8_t kUE8M0NaN = 0xFF;

// Smallest power of two >= x (DeepGEMM's ceil_to_ue8m0), for finite x >= 0 (the sign is ignored). Values
// up to 2^-127 (0 included) give code 0 (2^-127, the smallest scale); values above 2^127 and Inf/NaN give
// 0xFF.
FP8T_HD uint8_t ue8m0_ceil(float x) {
  const uint32_t bits = float_bits(x) & 0x7FFFFFFFu;
  if (bits >= 0x7F800000u) return kUE8M0NaN;
  uint32_t exp = bits >> 23;
  const uint32_t man = bits & 0x7FFFFFu;
  if (exp == 0) return man <= 0x400000u ? 0 : 1;  // subnormal man * 2^-149: 2^-127 is man = 2^22
  if (man != 0) ++exp;
  return exp >= 0xFF ? kUE8M0NaN : static_cast<uint8_t>(exp);
}

// The power of two nearest to x in value (significand >= 1.5 rounds up; 1.5 itself rounds up).
FP8T_HD uint8_t ue8m0_nearest(float x) {
  const uint32_t bits = float_bits(x) & 0x7FFFFFFFu;
  if (bits >= 0x7F800000u) return kUE8M0NaN;
  uint32_t exp = bits >> 23;
  const uint32_t man = bits & 0x7FFFFFu;
  if (exp == 0) return man >= 0x600000u ? 1 : 0;  // subnormal: value man*2^-149; 2^-127 vs 2^-126 midpoint
  if (man >= 0x400000u) ++exp;
  return exp >= 0xFF ? kUE8M0NaN : static_cast<uint8_t>(exp);
}

FP8T_HD float ue8m0_decode(uint8_t code) {
  if (code == kUE8M0NaN) return bits_float(0x7FC00000u);
  if (code == 0) return bits_float(0x00400000u);  // 2^-127, a float32 subnormal
  return bits_float(static_cast<uint32_t>(code) << 23);
}

// ---- BF16 ----------------------------------------------------------------------------------------
FP8T_HD uint16_t bf16_encode(float x) {
  const uint32_t bits = float_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // stay NaN
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
FP8T_HD float bf16_decode(uint16_t code) { return bits_float(static_cast<uint32_t>(code) << 16); }
FP8T_HD float bf16_round(float x) { return bf16_decode(bf16_encode(x)); }

// ---- INT8 symmetric --------------------------------------------------------------------------------
inline constexpr float kInt8Max = 127.0f;

// Round to nearest, ties to even, clamped to [-127, 127]; NaN maps to 0.
FP8T_HD int8_t int8_encode_rne(float x) {
  if (!(x == x)) return 0;
  if (x >= 127.0f) return 127;
  if (x <= -127.0f) return -127;
  // |x| < 127: adding and subtracting 1.5*2^23 rounds to an integer with ties to even in float32.
  const float magic = 12582912.0f;
  const float r = (x + magic) - magic;
  return static_cast<int8_t>(static_cast<int>(r));
}

// A counter-based generator (a 64-bit mix of seed and index, SplitMix64 finaliser): the same random bits
// for element `index` under `seed` on every device and in every order.
FP8T_HD uint32_t counter_random_u32(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z >> 32);
}

// Stochastic rounding: rounds x up with probability equal to its distance above floor(x) (24 random bits),
// so E[result] = x for |x| <= 127 up to the 2^-24 resolution of the random bits (exact when frac(x) is a
// multiple of 2^-24). Clamped to [-127, 127]; NaN maps to 0.
FP8T_HD int8_t int8_encode_stochastic(float x, uint32_t random_bits) {
  if (!(x == x)) return 0;
  if (x >= 127.0f) return 127;
  if (x <= -127.0f) return -127;
  const float lo = static_cast<float>(static_cast<int>(x) - (x < static_cast<float>(static_cast<int>(x)) ? 1 : 0));
  const float frac = x - lo;  // exact, except for -0.5 < x < 0: 1 + x rounds to the 2^-24 grid of [0.5, 1)
  const float u = static_cast<float>(random_bits >> 8) * 5.9604644775390625e-08f;  // [0, 1) in steps of 2^-24
  const float r = lo + (u < frac ? 1.0f : 0.0f);
  return static_cast<int8_t>(static_cast<int>(r));
}

}  // namespace fp8train::num
