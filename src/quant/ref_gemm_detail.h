// Internals shared by the reference GEMM's translation units (ref_gemm.cpp: validation, exact/fp32/int8
// paths, scalar Hopper path, epilogue; ref_gemm_simd.cpp: the AVX2 kernels). Not part of the API.
//   a codes: [m, k] row-major bytes; b codes: [n, k] row-major bytes; acc / out: [m, n] row-major float32.
#pragma once
#include <cstdint>

#include "numerics/formats.h"

namespace fp8train::quant::detail {

// The scale layout of one operand along K: row r, K-group g -> scales[(r / block_rows) * cols + g].
// Per-tensor operands read as unit scales during accumulation (their scale is applied in the epilogue).
struct ScaleView {
  const float* scales = nullptr;
  int64_t block_rows = 1;
  int64_t cols = 1;
  bool unit = true;
  float at(int64_t r, int64_t g) const { return unit ? 1.0f : scales[(r / block_rows) * cols + g]; }
};

struct HopperProblem {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;
  const uint8_t* b = nullptr;
  num::Fp8Format fa = num::Fp8Format::E4M3, fb = num::Fp8Format::E4M3;
  ScaleView sa, sb;
  bool per_tensor = true;  // one K-group spanning all of K, unit scales
  int64_t group_k = 0;     // G (block scales); equals k when per_tensor
  int promote = 128;       // num::kNeverPromote or a multiple of 32 (dividing G, or a multiple of G)
  // SIMD kernel only: blocks whose exponent E stays <= this take the exponent-add path, others the
  // multiply path (same bits). Real blocks have E in [-41, ~60]; tests lower it to reach both paths.
  int fast_max_exp = 58;
};

// The full Hopper-model dot product of row i of A and row j of B (scalar, through num::hopper_block): the
// specification the SIMD kernel must match, also used for rows holding NaN/Inf codes. Returns acc before
// the epilogue.
float hopper_element(const HopperProblem& p, int64_t i, int64_t j);

// The AVX2 kernel: fills acc [m, n] for every (i, j) (rows holding special codes are recomputed by the
// caller). Returns false, touching nothing, when the CPU lacks AVX2 + FMA.
bool hopper_gemm_simd(const HopperProblem& p, float* acc);

// Plain FP32 GEMM over dequantized operands: acc[i][j] = fma chain over k in order. a_values [m, k],
// b_values [n, k]. Returns false when the CPU lacks AVX2 + FMA.
bool fp32_gemm_simd(int64_t m, int64_t n, int64_t k, const float* a_values, const float* b_values, float* acc);

// Promotion of one output row: acc[j] = fma(sa * sb[j], float(partial[j]), acc[j]) for j < n (float(): RNE).
// Returns false when the CPU lacks AVX2 + FMA.
bool promote_row_simd(int64_t n, float sa, const float* sb, const double* partial, float* acc);

}  // namespace fp8train::quant::detail
