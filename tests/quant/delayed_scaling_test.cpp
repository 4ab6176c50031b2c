// Delayed (Transformer-Engine-style) scaling: the scale used for tensor t comes from the amax history of
// the tensors before it; `max` vs `most_recent`; the window drops the oldest entry; the margin; the
// power-of-two option; empty history -> scale 1; Inf/NaN tensors are reported and leave the history alone.
//   x: [rows, cols] float32, per-tensor scale.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "quant/quant.h"

using namespace fp8train;
using namespace fp8train::quant;

namespace {

// A 4×8 tensor whose amax is `amax` (one element), the rest smaller.
std::vector<float> tensor_with_amax(float amax) {
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = amax * 0.5f * static_cast<float>(i % 7) / 7.0f;
  x[13] = -amax;
  return x;
}

QuantSpec e4m3() {
  QuantSpec c;
  c.format = Format::E4M3;
  c.granularity = Granularity::tensor();
  return c;
}

}  // namespace

TEST(DelayedScaling, ScaleComesFromTheHistoryBeforeTheTensor) {
  AmaxHistory h(1024, AmaxAlgorithm::Max, 0);
  EXPECT_EQ(h.reference_amax(), 0.0f);
  const float amaxes[] = {2.0f, 8.0f, 4.0f, 1.0f};
  const float expected_ref[] = {0.0f, 2.0f, 8.0f, 8.0f};  // max over the tensors before
  for (int t = 0; t < 4; ++t) {
    const std::vector<float> x = tensor_with_amax(amaxes[t]);
    const BlockScale s = h.scale(Format::E4M3);
    const float want = expected_ref[t] == 0.0f ? 1.0f : expected_ref[t] / 448.0f;
    EXPECT_EQ(s.scale, want) << "tensor " << t;
    const QTensor q = quantize_delayed(x.data(), 4, 8, e4m3(), h);
    EXPECT_EQ(q.scale_ptr()[0], want);
    EXPECT_EQ(q.granularity(), Granularity::tensor());
    // Codes use the scale's inverse exactly as quant.h states.
    for (int64_t i = 0; i < 32; ++i)
      ASSERT_EQ(q.code_ptr()[static_cast<size_t>(i)], num::e4m3_encode(x[static_cast<size_t>(i)] * s.inverse));
    EXPECT_EQ(h.size(), static_cast<size_t>(t + 1));
    EXPECT_EQ(h.entries().back(), amaxes[t]);  // pushed after use
  }
}

TEST(DelayedScaling, MostRecentAndWindowLength) {
  AmaxHistory recent(1024, AmaxAlgorithm::MostRecent, 0);
  recent.push(8.0f);
  recent.push(2.0f);
  EXPECT_EQ(recent.reference_amax(), 2.0f);
  EXPECT_EQ(recent.scale(Format::E4M3).scale, 2.0f / 448.0f);

  AmaxHistory window(2, AmaxAlgorithm::Max, 0);
  window.push(8.0f);
  window.push(4.0f);
  EXPECT_EQ(window.reference_amax(), 8.0f);
  window.push(1.0f);  // 8 falls out of the window
  EXPECT_EQ(window.size(), 2u);
  EXPECT_EQ(window.reference_amax(), 4.0f);
}

TEST(DelayedScaling, MarginPowerOfTwoAndFormats) {
  AmaxHistory h(16, AmaxAlgorithm::Max, 2);
  h.push(3.0f);
  EXPECT_EQ(h.scale(Format::E4M3).scale, 12.0f / 448.0f);  // amax · 2^margin / fmax
  EXPECT_EQ(h.scale(Format::E4M3).inverse, 448.0f / 12.0f);
  EXPECT_EQ(h.scale(Format::E5M2).scale, 12.0f / 57344.0f);
  EXPECT_EQ(h.scale(Format::E4M3, ScaleMode::PowerOfTwo).scale, 0.03125f);  // 12/448 = 0.0268 -> 2^-5
  EXPECT_EQ(h.scale(Format::BF16).scale, 1.0f);
  AmaxHistory negative_margin(16, AmaxAlgorithm::Max, -1);
  negative_margin.push(3.0f);
  EXPECT_EQ(negative_margin.scale(Format::E4M3).scale, 1.5f / 448.0f);
  // A later, larger tensor saturates (satfinite) instead of overflowing.
  AmaxHistory small(4, AmaxAlgorithm::Max, 0);
  small.push(1.0f);
  const std::vector<float> big = tensor_with_amax(10.0f);
  const QTensor q = quantize_delayed(big.data(), 4, 8, e4m3(), small);
  EXPECT_EQ(q.code_ptr()[13], 0xFE);  // -448
  EXPECT_EQ(small.reference_amax(), 10.0f);
  // A zero tensor keeps the reference at 0, so the next scale is still 1.
  AmaxHistory zeros(4);
  const std::vector<float> z(32, 0.0f);
  quantize_delayed(z.data(), 4, 8, e4m3(), zeros);
  EXPECT_EQ(zeros.scale(Format::E4M3).scale, 1.0f);
}

TEST(DelayedScaling, InfOrNanTensorIsReportedAndHistoryUnchanged) {
  AmaxHistory h(8);
  h.push(5.0f);
  std::vector<float> x = tensor_with_amax(2.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_delayed(x.data(), 4, 8, e4m3(), h), Error);
  x[3] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_delayed(x.data(), 4, 8, e4m3(), h), Error);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.reference_amax(), 5.0f);
  EXPECT_THROW(h.push(-1.0f), Error);
  EXPECT_THROW(h.push(std::numeric_limits<float>::infinity()), Error);
  EXPECT_THROW(AmaxHistory(0), Error);
  EXPECT_THROW(AmaxHistory(16, AmaxAlgorithm::Max, 100), Error);
}
