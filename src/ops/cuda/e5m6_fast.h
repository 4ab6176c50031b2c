// Fast paths of the E5M6 codec (numerics/formats.h) for the CUDA kernels: the normal range is handled with a
// few integer operations on the float32 bits; zero, subnormals, Inf, NaN and saturation take num::e5m6_encode /
// num::e5m6_decode. Same results as the reference (tests/cuda/encoder_exhaustive_test.cpp checks all 2^32 floats
// and all 4096 codes on the GPU, tests/ops/e5m6_fast_test.cpp a sweep on the CPU). FP8T_HD for the host tests.
#pragma once
#include <cstdint>

#include "common/hd.h"
#include "numerics/formats.h"

namespace fp8train::ops::cuda::detail {

// num::e5m6_encode(x) for 2^-14 <= |x| <= kE5M6Max, where no rounding can underflow or pass the largest
// finite code; callers check a group's range with e5m6_unsaturated_range and take num::e5m6_encode otherwise.
FP8T_HD bool e5m6_unsaturated_range(float x) {
  const uint32_t abs = num::float_bits(x) & 0x7FFFFFFFu;
  return abs - 0x38800000u <= 0x477E0000u - 0x38800000u;  // 0x38800000: 2^-14; 0x477E0000: kE5M6Max (65024)
}
FP8T_HD uint32_t e5m6_encode_unsaturated(float x) {
  // On the signed bits (the sign cannot be reached by a carry or a borrow in this range): round to nearest
  // even at bit 17 and re-bias the exponent from 127 to 15 in one three-operand add, shift the 15-bit result
  // (sign at bit 14, E5M6 magnitude in bits 0-10, bits 11-13 zero) and move the sign from bit 14 to bit 11.
  const uint32_t bits = num::float_bits(x);
  const uint32_t u = (bits + (0xFFFFu - ((127u - 15u) << 23)) + ((bits >> 17) & 1u)) >> 17;
  return u - (u >> 14) * 0x3800u;
}

// num::e5m6_decode(code).
FP8T_HD float e5m6_decode_fast(uint16_t code) {
  const uint32_t mag = code & 0x7FFu;
  if (mag >= 0x40u && mag < 0x7C0u)  // normal: exponent field 1..30
    return num::bits_float((static_cast<uint32_t>(code & 0x800u) << 20) | ((mag << 17) + ((127u - 15u) << 23)));
  return num::e5m6_decode(code);
}

}  // namespace fp8train::ops::cuda::detail
