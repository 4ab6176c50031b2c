// Dot products of two block-scaled quantized vectors, computed the way the hardware (or the reference GEMM)
// would: the lab's adapter around the bit-faithful Hopper accumulator of numerics/hopper_accum.h.
//
// Operands: codes a[0..k), b[0..k) and one scale per group of `group` consecutive elements along K:
//   scale_a[g], scale_b[g] for g = 0 .. ceil(k / group) - 1; group >= k means one scale for the whole vector
//   (per-tensor). value(i) = decode(code(i)) * scale[i / group].
//
// hopper_dot_grouped(..., promote_interval P): products in blocks of 32 through num::hopper_block (FP22,
// truncating), chained through the accumulator; every P elements (P a multiple of 32) the chain is promoted,
// acc = fma(s_g, chain, acc) with s_g = scale_a[g] * scale_b[g], and restarts at zero.
//   * Per-tensor (group >= k): num::hopper_dot(P), then (scale_a * scale_b) * result — the reference GEMM's
//     per-tensor epilogue (bit-identical to quant::ref_gemm).
//   * P divides the group (e.g. 1×128 tiles, P = 32..128): exactly num::hopper_dot_scaled with the group's
//     scale at each promotion (bit-identical to quant::ref_gemm with P | G).
//   * P > group, or P = never, with several scales (e.g. 1×32 tiles with P = 128; 1×128 tiles with no
//     promotion) — no Hopper kernel can do this, since the scale changes inside one tensor-core chain. The lab
//     models it as the "carried chain": the tensor core keeps chaining blocks of 32 across the scale change,
//     and at the boundary the running chain value is re-expressed in the next group's scale,
//     chain = (chain * s_prev) / s_next (two float32 roundings, 2^-24 relative, far below the FP22
//     truncation that the next block applies to it). This keeps the physics that limits no-promotion
//     accumulation — every product truncated relative to the large running sum — identical to the per-tensor
//     case, so scaling and accumulation effects stay separable. (quant::ref_gemm models this case
//     differently: each scale group restarts at zero and the scaled partials meet in an FP22 adder, which
//     truncates only once per group; see the report's methods section.)
// fp32_dot_grouped: acc = fma(a_value, b_value, acc) over k in order on the dequantized values — a plain FP32
//   GEMM of dequantized inputs (quant::ref_gemm's Fp32 mode).
// int8_dot_grouped: each group's integer dot product is exact in int32 (the INT8 tensor-core path), then
//   acc = fma(s_g, float(partial), acc); per-tensor: exact groups of 128 summed with unit scale, then
//   (scale_a * scale_b) * acc (quant::ref_gemm's INT8 rule).
#pragma once
#include <cstdint>

#include "numerics/formats.h"

namespace fp8train::lab {

struct Fp8Operand {
  const uint8_t* codes;
  num::Fp8Format format;
  const float* scales;  // one per group
};

struct Int8Operand {
  const int8_t* codes;
  const float* scales;  // one per group
};

// promote_interval: a positive multiple of 32, or num::kNeverPromote. group >= 1 (a multiple of 32 when it is
// smaller than k).
float hopper_dot_grouped(const Fp8Operand& a, const Fp8Operand& b, int64_t k, int64_t group, int promote_interval);
float fp32_dot_grouped(const Fp8Operand& a, const Fp8Operand& b, int64_t k, int64_t group);
float int8_dot_grouped(const Int8Operand& a, const Int8Operand& b, int64_t k, int64_t group);

// FP64 dot product of two float vectors (the reference every SNR is measured against).
double exact_dot(const float* a, const float* b, int64_t k);

}  // namespace fp8train::lab
