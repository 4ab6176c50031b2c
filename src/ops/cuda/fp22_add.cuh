// The tensor core's truncating FP22 adder on the device, bit for bit quant::fp22_add (quant/ref_gemm.cpp): the
// "never promote" model of the FP8 GEMM kernels adds each 128-block's scaled partial into a pending sum with it.
//   fp22_add(x, y): x or y not finite, or both zero: x + y (FP32, round to nearest). Otherwise both terms are
//   aligned to the larger exponent E (floor(log2|.|), subnormals included; a zero term takes the other's),
//   each truncated toward zero to units of 2^(E - 13), summed exactly; a zero sum is +0; else the sum's
//   magnitude is truncated to 14 significant bits and scaled back by 2^(E - 13), rounded to FP32 to nearest
//   (only a subnormal or overflowing result rounds: the CPU converts from double the same way).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8train::ops::cuda {

inline constexpr int kFp22Fraction = 13;  // num::kFp22FractionBits

// floor(log2|x|) of a finite non-zero float from its bits, and its significand as a 24-bit integer
// m = |x| * 2^(23 - e) (exact: subnormals are shifted up to put their leading one at bit 23).
__device__ __forceinline__ int fp22_exponent(uint32_t bits) {
  const uint32_t biased = (bits >> 23) & 0xFFu;
  if (biased != 0) return static_cast<int>(biased) - 127;
  return -118 - __clz(bits & 0x7FFFFFu);  // f * 2^-149 with f's top bit at 31 - clz
}

__device__ __forceinline__ uint32_t fp22_significand(uint32_t bits) {
  const uint32_t f = bits & 0x7FFFFFu;
  if ((bits & 0x7F800000u) != 0) return f | 0x800000u;
  return f << (__clz(f) - 8);
}

// v (finite) in units of 2^(e_max - 13), truncated toward zero, with v's sign.
__device__ __forceinline__ int fp22_term(float v, int e_max) {
  if (v == 0.0f) return 0;
  const uint32_t bits = __float_as_uint(v);
  const int right = e_max - fp22_exponent(bits) + 10;  // >= 10
  const int t = right >= 32 ? 0 : static_cast<int>(fp22_significand(bits) >> right);
  return (bits >> 31) != 0 ? -t : t;
}

__device__ __forceinline__ float fp22_add(float x, float y) {
  if (!isfinite(x) || !isfinite(y) || (x == 0.0f && y == 0.0f)) return __fadd_rn(x, y);
  int e_max;
  if (x == 0.0f) {
    e_max = fp22_exponent(__float_as_uint(y));
  } else if (y == 0.0f) {
    e_max = fp22_exponent(__float_as_uint(x));
  } else {
    e_max = max(fp22_exponent(__float_as_uint(x)), fp22_exponent(__float_as_uint(y)));
  }
  const int sum = fp22_term(x, e_max) + fp22_term(y, e_max);  // |sum| < 2^15
  if (sum == 0) return 0.0f;
  uint32_t mag = static_cast<uint32_t>(sum < 0 ? -sum : sum);
  const int msb = 31 - __clz(mag);
  if (msb > kFp22Fraction) {
    const int drop = msb - kFp22Fraction;
    mag = (mag >> drop) << drop;
  }
  const double v = ldexp(static_cast<double>(mag), e_max - kFp22Fraction);
  return __double2float_rn(sum < 0 ? -v : v);
}

}  // namespace fp8train::ops::cuda
