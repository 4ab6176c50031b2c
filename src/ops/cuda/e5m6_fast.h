// Fast paths of the E5M6 codec (numerics/formats.h) for the CUDA kernels: the normal range is handled with a
// few integer operations on the float32 bits; zero, subnormals, Inf and NaN fall back to num::e5m6_encode /
// num::e5m6_decode. Same results as the reference on every input (tests/cuda/encoder_exhaustive_test.cpp
// checks all 2^32 floats and all 4096 codes). FP8T_HD so the host can check them too.
#pragma once
#include <cstdint>

#include "common/hd.h"
#include "numerics/formats.h"

namespace fp8train::ops::cuda::detail {

// num::e5m6_encode(x, SatFinite).
FP8T_HD uint16_t e5m6_encode_fast(float x) {
  const uint32_t bits = num::float_bits(x);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x38800000u && abs < 0x7F800000u) {  // |x| >= 2^-14 (E5M6's smallest normal) and finite
    // Round to nearest even at bit 17 (keep 6 of 23 mantissa bits); a carry moves into the exponent field.
    const uint32_t rounded = (abs + 0xFFFFu + ((abs >> 17) & 1u)) >> 17;
    uint32_t mag = rounded - ((127u - 15u) << 6);  // re-bias the exponent from float32's 127 to 15
    if (mag > num::kE5M6MaxCode) mag = num::kE5M6MaxCode;  // satfinite
    return static_cast<uint16_t>(((bits >> 20) & 0x800u) | mag);
  }
  return num::e5m6_encode(x);
}

// The normal-range branch of e5m6_encode_fast alone, for callers that check the range of a whole group first
// (e5m6_normal_range) and take num::e5m6_encode for the group otherwise: no per-element branch.
FP8T_HD bool e5m6_normal_range(float x) {
  const uint32_t abs = num::float_bits(x) & 0x7FFFFFFFu;
  return abs - 0x38800000u < 0x7F800000u - 0x38800000u;  // 2^-14 <= |x| < Inf (unsigned wrap for smaller)
}
FP8T_HD uint16_t e5m6_encode_normal(float x) {
  const uint32_t bits = num::float_bits(x);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  const uint32_t rounded = (abs + 0xFFFFu + ((abs >> 17) & 1u)) >> 17;
  uint32_t mag = rounded - ((127u - 15u) << 6);
  mag = mag > num::kE5M6MaxCode ? num::kE5M6MaxCode : mag;
  return static_cast<uint16_t>(((bits >> 20) & 0x800u) | mag);
}
// e5m6_encode_normal without the saturation, for 2^-14 <= |x| <= kE5M6Max (no rounding can pass the largest
// finite code there); callers check the group's range with e5m6_unsaturated_range.
FP8T_HD bool e5m6_unsaturated_range(float x) {
  const uint32_t abs = num::float_bits(x) & 0x7FFFFFFFu;
  return abs - 0x38800000u <= 0x477E0000u - 0x38800000u;  // 0x477E0000: the bits of kE5M6Max (65024)
}
FP8T_HD uint32_t e5m6_encode_unsaturated(float x) {
  // On the signed bits (the sign cannot be reached by a carry or a borrow in this range): round to nearest
  // even at bit 17 and re-bias the exponent from 127 to 15 in one three-operand add, shift the 15-bit result
  // (sign at bit 14, E5M6 magnitude in bits 0-10, bits 11-13 zero) and move the sign from bit 14 to bit 11.
  const uint32_t bits = num::float_bits(x);
  const uint32_t u = (bits + (0xFFFFu - ((127u - 15u) << 23)) + ((bits >> 17) & 1u)) >> 17;
  return u - (u >> 14) * 0x3800u;
}

// num::e5m6_pack8 for codes already below 4096 (no masking; sums of disjoint bit fields, which the compiler
// turns into shift-and-add instructions).
FP8T_HD void e5m6_pack8_12bit(const uint32_t c[8], uint32_t words[3]) {
  words[0] = c[0] + (c[1] << 12) + (c[2] << 24);
  words[1] = (c[2] >> 8) + (c[3] << 4) + (c[4] << 16) + (c[5] << 28);
  words[2] = (c[5] >> 4) + (c[6] << 8) + (c[7] << 20);
}

// num::e5m6_decode(code).
FP8T_HD float e5m6_decode_fast(uint16_t code) {
  const uint32_t mag = code & 0x7FFu;
  if (mag >= 0x40u && mag < 0x7C0u)  // normal: exponent field 1..30
    return num::bits_float((static_cast<uint32_t>(code & 0x800u) << 20) | ((mag << 17) + ((127u - 15u) << 23)));
  return num::e5m6_decode(code);
}

}  // namespace fp8train::ops::cuda::detail
