// The Hopper (sm_90) FP8 tensor-core accumulator, modelled bit for bit.
//
// Measured on an H200 (tests/data/hopper-fp8-accum reproduces it):
//  1. K is consumed in blocks of 32 products; the FP32 result of one block is the addend `c` of the next.
//  2. Inside a block every FP8×FP8 product is exact. E = the largest exponent among the non-zero products
//     and c, where a product's exponent is the sum of its operands' exponents (significand left
//     unnormalised in [0, 4); a subnormal operand counts with the format's minimum exponent).
//  3. Each term (products and c) is shifted to E and truncated toward zero to 13 fraction bits; the terms
//     are added exactly; the sum is normalised and truncated toward zero to 13 fraction bits ("FP22":
//     an FP32 whose low 10 mantissa bits are zero).
//  4. Promotion every N_C elements of K (cuBLASLt's default FP8 mode, DeepSeek-V3's recipe, N_C = 128):
//     the chain restarts at zero, and the N_C-element partial sum is added into an FP32 accumulator with
//     an ordinary round-to-nearest-even operation, after multiplying by the two operand scales:
//     acc = fma(scale_a * scale_b, partial, acc). With unit scales this is acc + partial.
//     N_C = kNeverPromote chains all of K (cuBLASLt's "fast accumulation").
#pragma once
#include <cstdint>

#include "numerics/formats.h"

namespace fp8train::num {

inline constexpr int kHopperBlockK = 32;     // products per tensor-core accumulation step
inline constexpr int kNeverPromote = 0;      // promote_interval value meaning "no promotion"
inline constexpr int kFp22FractionBits = 13;

// Truncates an FP32 value toward zero to FP22 (13 fraction bits).
inline float truncate_to_fp22(float x) { return bits_float(float_bits(x) & 0xFFFFFC00u); }

// An FP8 operand split as value = sig * 2^(exp - mbits): `sig` is the integer significand with the
// implicit bit for normals (E4M3: 0..15, E5M2: 0..7) and `exp` the operand's exponent (subnormals and
// zero carry the minimum exponent). NaN/Inf codes are flagged.
struct Fp8Parts {
  int32_t sig;
  int32_t exp;
  bool special;  // NaN or Inf
};
Fp8Parts fp8_parts(Fp8Format f, uint8_t code);

// One accumulation step: c + sum of n <= 32 products a[i]*b[i] (FP8 codes) in the FP22 model.
// Any NaN/Inf operand makes the result the FP32 sum of the specials (NaN or ±Inf), like the hardware.
float hopper_block(const uint8_t* a, Fp8Format fa, const uint8_t* b, Fp8Format fb, int n, float c);

// A dot product of length k in the full model: blocks of 32 chained, partial sums promoted every
// `promote_interval` elements (a multiple of 32, or kNeverPromote), scaled by scale_a*scale_b at each
// promotion. `scale_a_at(kb)`-style per-128 scales are handled by hopper_dot_scaled below.
float hopper_dot(const uint8_t* a, Fp8Format fa, const uint8_t* b, Fp8Format fb, int k, int promote_interval);

// The same with one scale per promotion group g (group = promote_interval elements of K): the partial sum
// of group g is added as acc = fma(scale_a[g] * scale_b[g], partial, acc). Requires promote_interval > 0.
float hopper_dot_scaled(const uint8_t* a, Fp8Format fa, const float* scale_a, const uint8_t* b, Fp8Format fb,
                        const float* scale_b, int k, int promote_interval);

// Split-K: the K groups 0..G-1 (G = ceil(k / promote_interval)) cut into `splits` contiguous ranges,
// range s = [floor(s * G / splits), floor((s + 1) * G / splits)); each range is hopper_dot_scaled on its own
// (its chain and accumulator start from zero) and the range results are added in order in FP32:
// total = r_0, total = total + r_s. splits = 1 is hopper_dot_scaled. Requires 1 <= splits <= max(G, 1).
// (The dense FP8 GEMM kernel's split-K for few-row problems: ops/cuda/fp8_gemm.h.)
inline int64_t split_range_begin(int64_t groups, int splits, int s) { return s * groups / splits; }
float hopper_dot_scaled_split(const uint8_t* a, Fp8Format fa, const float* scale_a, const uint8_t* b, Fp8Format fb,
                              const float* scale_b, int k, int promote_interval, int splits);

}  // namespace fp8train::num
