// Re-tiling 1×128 → 128×1 (the Wgrad path) and what is exact about it (quant.h, retile):
//   with power-of-two scales, dequantize(retile(q)) == dequantize(q) element by element exactly when the
//   element's value divided by its new block's scale is a value of the format (no bits lost below the
//   smallest subnormal); with amax (non-power-of-two) scales values change.
//   x: [tokens, channels] row-major; q 1×128 (per token per 128 channels), retiled 128×1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "quant/quant.h"
#include "../common/random_data.h"

using namespace fp8train::quant;

namespace {

using fp8train::test_data::randn;

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Every finite value of the format, as a set of float bit patterns (the independent representability test).
std::set<uint32_t> format_values(Format f) {
  std::set<uint32_t> out;
  const uint32_t ncodes = f == Format::E5M6 ? 4096u : 256u;
  for (uint32_t c = 0; c < ncodes; ++c) {
    const float v = decode(f, c);
    if (std::isfinite(v)) out.insert(bits(v == 0.0f ? 0.0f : v));
  }
  return out;
}

QuantSpec pow2(Format f, Granularity g) {
  QuantSpec c;
  c.format = f;
  c.granularity = g;
  c.scale_mode = ScaleMode::PowerOfTwo;
  return c;
}

struct RetileCheck {
  int64_t representable = 0, equal = 0, equal_when_representable = 0, total = 0;
};

// Checks the if-and-only-if statement element by element.
RetileCheck check_retile(const std::vector<float>& x, int64_t rows, int64_t cols, Format f) {
  const QTensor q = quantize(x, rows, cols, pow2(f, Granularity::tile_1x128()));
  const QTensor t = retile(q, pow2(f, Granularity::tile_128x1()));
  EXPECT_EQ(t.granularity(), Granularity::tile_128x1());
  EXPECT_TRUE(t.pow2_scales);
  const std::vector<float> before = dequantize(q), after = dequantize(t);
  const std::set<uint32_t> values = format_values(f);
  RetileCheck r;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t idx = static_cast<size_t>(i * cols + c);
      const float shifted = before[idx] / t.scale_of(i, c);  // exact: a power-of-two division
      const bool representable = values.count(bits(shifted == 0.0f ? 0.0f : shifted)) > 0;
      const bool equal = bits(before[idx]) == bits(after[idx]);
      r.representable += representable;
      r.equal += equal;
      r.equal_when_representable += representable && equal;
      ++r.total;
      EXPECT_EQ(equal, representable) << format_name(f) << " at (" << i << ", " << c << "): " << before[idx]
                                      << " -> " << after[idx];
    }
  return r;
}

}  // namespace

TEST(Retile, PowerOfTwoOneByOneTwentyEightToOneTwentyEightByOneIsLossless) {
  // Moderate dynamic range (as activations have): nothing underflows, so every element is preserved.
  const int64_t rows = 300, cols = 256;  // ragged along tokens
  const std::vector<float> x = randn(rows * cols, 11);
  for (Format f : {Format::E4M3, Format::E5M2, Format::E5M6}) {
    const RetileCheck r = check_retile(x, rows, cols, f);
    EXPECT_EQ(r.representable, r.total) << format_name(f);
    EXPECT_EQ(r.equal, r.total) << format_name(f);
  }
}

TEST(Retile, UnderflowIsTheOnlyLoss) {
  // Token 1 is 2^-12 times smaller than token 0: in the 128×1 blocks its values move to a 2^12 larger
  // scale and their low bits fall below E4M3's smallest subnormal. Equality must fail exactly there.
  const int64_t rows = 128, cols = 128;
  std::vector<float> x = randn(rows * cols, 12);
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(cols + c)] *= std::ldexp(1.0f, -12);
  for (Format f : {Format::E4M3, Format::INT8}) {
    const RetileCheck r = check_retile(x, rows, cols, f);
    EXPECT_LT(r.equal, r.total) << format_name(f) << ": the counterexample must lose something";
    EXPECT_EQ(r.equal, r.representable) << format_name(f);
  }
}

TEST(Retile, AmaxScalesAreNotLossless) {
  const int64_t rows = 256, cols = 256;
  const std::vector<float> x = randn(rows * cols, 13);
  QuantSpec a;
  a.format = Format::E4M3;
  a.granularity = Granularity::tile_1x128();
  const QTensor q = quantize(x, rows, cols, a);
  a.granularity = Granularity::tile_128x1();
  const QTensor t = retile(q, a);
  const std::vector<float> before = dequantize(q), after = dequantize(t);
  int64_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i) changed += bits(before[i]) != bits(after[i]);
  EXPECT_GT(changed, 0) << "non-power-of-two scales re-round values";
  // A concrete counterexample: token 0 holds 3 and 1 (scale 3/448; 1 becomes code 144, i.e. 0.964...);
  // channel 1's 128×1 block holds that 0.964... and token 1's 2.5, so it is re-divided by 2.5/448 and
  // re-rounded (172.8 -> 176 in E4M3 units), which changes its value.
  std::vector<float> small(2 * 128, 0.0f);
  small[0] = 3.0f;
  small[1] = 1.0f;
  small[128 + 1] = 2.5f;
  QuantSpec c1;
  c1.format = Format::E4M3;
  c1.granularity = Granularity::tile_1x128();
  const QTensor q1 = quantize(small, 2, 128, c1);
  c1.granularity = Granularity::tile_128x1();
  const QTensor t1 = retile(q1, c1);
  EXPECT_NE(bits(q1.value_at(0, 1)), bits(t1.value_at(0, 1)))
      << q1.value_at(0, 1) << " vs " << t1.value_at(0, 1);
}
