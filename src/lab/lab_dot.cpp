// Dot products of block-scaled quantized vectors (see lab_dot.h): the Hopper accumulator adapter, FP32 and
// exact-integer INT8 accumulation.
#include "lab/lab_dot.h"

#include <cmath>

#include "common/error.h"
#include "numerics/hopper_accum.h"

namespace fp8train::lab {
namespace {

constexpr int64_t kInt8PerTensorGroup = 128;  // quant::kExactBlockK: the reference GEMM's per-tensor groups

void check_group(int64_t k, int64_t group) {
  FP8T_CHECK(k >= 0, "dot product length must be non-negative, got {}", k);
  FP8T_CHECK(group >= 1, "scale group must hold at least one element, got {}", group);
}

}  // namespace

float hopper_dot_grouped(const Fp8Operand& a, const Fp8Operand& b, int64_t k, int64_t group, int promote_interval) {
  check_group(k, group);
  FP8T_CHECK(promote_interval == num::kNeverPromote ||
                 (promote_interval > 0 && promote_interval % num::kHopperBlockK == 0),
             "promotion interval must be a positive multiple of {} or 'never', got {}", num::kHopperBlockK,
             promote_interval);
  FP8T_CHECK(k <= INT32_MAX, "dot product length {} is too long for the accumulator model", k);
  const int kk = static_cast<int>(k);
  if (group >= k) {  // per-tensor: the scales are applied once, in the epilogue
    const float r = num::hopper_dot(a.codes, a.format, b.codes, b.format, kk, promote_interval);
    return (a.scales[0] * b.scales[0]) * r;
  }
  FP8T_CHECK(group % num::kHopperBlockK == 0,
             "scale groups smaller than the vector must be a multiple of {} elements, got {}", num::kHopperBlockK,
             group);
  float acc = 0.0f, chain = 0.0f;
  int64_t current_group = 0;
  float s_current = a.scales[0] * b.scales[0];
  for (int64_t k0 = 0; k0 < k; k0 += num::kHopperBlockK) {
    const int n = static_cast<int>(k - k0 < num::kHopperBlockK ? k - k0 : num::kHopperBlockK);
    const int64_t g = k0 / group;
    if (g != current_group) {
      const float s_next = a.scales[g] * b.scales[g];
      // The carried chain: re-express the running value in the next group's scale (see lab_dot.h).
      if (chain != 0.0f) chain = (chain * s_current) / s_next;
      s_current = s_next;
      current_group = g;
    }
    chain = num::hopper_block(a.codes + k0, a.format, b.codes + k0, b.format, n, chain);
    const int64_t end = k0 + n;
    if (promote_interval != num::kNeverPromote && (end % promote_interval == 0 || end == k)) {
      acc = std::fma(s_current, chain, acc);
      chain = 0.0f;
    }
  }
  if (promote_interval == num::kNeverPromote) acc = std::fma(s_current, chain, acc);
  return acc;
}

float fp32_dot_grouped(const Fp8Operand& a, const Fp8Operand& b, int64_t k, int64_t group) {
  check_group(k, group);
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t g = group >= k ? 0 : i / group;
    const float av = num::fp8_decode(a.format, a.codes[i]) * a.scales[g];
    const float bv = num::fp8_decode(b.format, b.codes[i]) * b.scales[g];
    acc = std::fma(av, bv, acc);
  }
  return acc;
}

float int8_dot_grouped(const Int8Operand& a, const Int8Operand& b, int64_t k, int64_t group) {
  check_group(k, group);
  if (group >= k) {  // per-tensor: exact groups of 128 with unit scale, the scales in the epilogue
    float acc = 0.0f;
    for (int64_t g0 = 0; g0 < k; g0 += kInt8PerTensorGroup) {
      int32_t partial = 0;
      const int64_t end = g0 + kInt8PerTensorGroup < k ? g0 + kInt8PerTensorGroup : k;
      for (int64_t i = g0; i < end; ++i) partial += static_cast<int32_t>(a.codes[i]) * static_cast<int32_t>(b.codes[i]);
      acc = std::fma(1.0f, static_cast<float>(partial), acc);
    }
    return (a.scales[0] * b.scales[0]) * acc;
  }
  float acc = 0.0f;
  for (int64_t g0 = 0, g = 0; g0 < k; g0 += group, ++g) {
    int64_t partial = 0;  // exact (int32 suffices for groups up to 133k elements)
    const int64_t end = g0 + group < k ? g0 + group : k;
    for (int64_t i = g0; i < end; ++i) partial += static_cast<int32_t>(a.codes[i]) * static_cast<int32_t>(b.codes[i]);
    acc = std::fma(a.scales[g] * b.scales[g], static_cast<float>(partial), acc);
  }
  return acc;
}

double exact_dot(const float* a, const float* b, int64_t k) {
  // Pairwise products of floats are exact in double; a compensated (Neumaier) sum keeps the reference
  // accurate to ~1 ulp of double even for strongly correlated inputs of length 16384.
  double sum = 0.0, comp = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double p = static_cast<double>(a[i]) * static_cast<double>(b[i]);
    const double t = sum + p;
    comp += std::fabs(sum) >= std::fabs(p) ? (sum - t) + p : (p - t) + sum;
    sum = t;
  }
  return sum + comp;
}

}  // namespace fp8train::lab
