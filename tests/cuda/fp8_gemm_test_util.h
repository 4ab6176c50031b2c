// Helpers of the FP8 GEMM kernel tests (fp8_gemm_{dense,grouped,wgrad}_test.cpp): random operands quantized
// by the CPU reference quantizer (quant::quantize, E4M3), the CPU reference GEMM in `hopper` mode with
// promotion every 128 (quant::ref_gemm: bit-faithful to num::hopper_dot_scaled), and a bitwise comparison
// that names the first differing element as (row, column).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "ops/cuda/fp8_gemm.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"

namespace fp8train::gputest {

// An E4M3 operand [rows, k]: codes and row-major scales, quantized from fresh random values whose rows and
// 128-column bands span six decades (so block scales differ everywhere).
inline quant::QTensor random_e4m3(int64_t rows, int64_t k, quant::Granularity g, uint64_t seed,
                                      bool pow2_scales = false) {
  quant::QuantSpec config;
  config.format = quant::Format::E4M3;
  config.granularity = g;
  config.scale_mode = pow2_scales ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  return quant::quantize(random_matrix(rows, k, seed), rows, k, config);
}

inline quant::GemmConfig hopper_config(bool accumulate = false) {
  quant::GemmConfig config;
  config.mode = quant::AccumMode::Hopper;
  config.promote_interval = 128;
  config.accumulate = accumulate;
  return config;
}

// Bitwise comparison of [rows, cols] outputs; on a mismatch, a message with the count and the first
// differing element's coordinates and values (BF16 as hex codes).
inline ::testing::AssertionResult same_bits_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                                 int64_t cols) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld of %zu BF16 outputs differ; first at (%lld, %lld): got 0x%04x want 0x%04x",
                static_cast<long long>(bad), want.size(), static_cast<long long>(first / cols),
                static_cast<long long>(first % cols), got[first], want[first]);
  return ::testing::AssertionFailure() << buf;
}

inline ::testing::AssertionResult same_bits_f32(const std::vector<float>& got, const std::vector<float>& want,
                                                int64_t cols) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!same_float(got[i], want[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  char buf[200];
  std::snprintf(buf, sizeof buf, "%lld of %zu FP32 outputs differ; first at (%lld, %lld): got %.9g want %.9g",
                static_cast<long long>(bad), want.size(), static_cast<long long>(first / cols),
                static_cast<long long>(first % cols), got[first], want[first]);
  return ::testing::AssertionFailure() << buf;
}

// The transpose of a row-major [rows, cols] float grid (row-major QTensor scales -> "MN-major").
inline std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

}  // namespace fp8train::gputest
