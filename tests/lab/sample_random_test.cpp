// The lab's reproducible data: the exact-correlation construction (measured Pearson ρ within 0.01 of the
// target at n = 10^5, for every ρ of the study), the published construction's different correlation,
// normal moments, stream determinism, outliers and the emulated roundings of experiment 7.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "lab/sample_random.h"
#include "lab/snr_method_checks.h"
#include "lab/snr_study.h"
#include "numerics/formats.h"

using namespace fp8train;

TEST(SampleRandom, CorrelationConstructionHitsTheTargetAtOneHundredThousand) {
  for (double rho : lab::study_correlations()) {
    lab::CounterRng rng(lab::stream_key(2026, {static_cast<uint64_t>(rho * 1000)}));
    const std::vector<float> a = lab::normal_vector(rng, 100000);
    const std::vector<float> b = lab::correlated_with(rng, a, rho);
    EXPECT_NEAR(lab::pearson(a, b), rho, 0.01) << "target rho " << rho;
  }
}

TEST(SampleRandom, PublishedConstructionHasADifferentCorrelation) {
  // b = ρ·z1 + (1−ρ)·z2 — the published construction — has correlation ρ/√(ρ²+(1−ρ)²), e.g. 0.707 for 0.5.
  lab::CounterRng rng(99);
  const double rho = 0.5;
  const std::vector<float> z1 = lab::normal_vector(rng, 100000), z2 = lab::normal_vector(rng, 100000);
  std::vector<float> b(z1.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rho * z1[i] + (1 - rho) * z2[i]);
  const double measured = lab::pearson(z1, b);
  EXPECT_NEAR(measured, rho / std::sqrt(rho * rho + (1 - rho) * (1 - rho)), 0.01);
  EXPECT_GT(measured, rho + 0.15);
}

TEST(SampleRandom, NormalMomentsAndStudentTails) {
  lab::CounterRng rng(7);
  const std::vector<float> z = lab::normal_vector(rng, 200000);
  double mean = 0, var = 0;
  for (float x : z) mean += x;
  mean /= static_cast<double>(z.size());
  for (float x : z) var += (x - mean) * (x - mean);
  var /= static_cast<double>(z.size());
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  // Student-t with ν = 3: far heavier tails than the normal (P(|t| > 5) ≈ 1.5 %, normal ≈ 6e-7).
  const std::vector<float> t = lab::student_t3_vector(rng, 200000);
  int beyond = 0;
  for (float x : t) beyond += std::fabs(x) > 5.0f;
  EXPECT_NEAR(beyond / 200000.0, 0.0154, 0.003);
}

TEST(SampleRandom, StreamsAreReproducibleAndDistinct) {
  const uint64_t k1 = lab::stream_key(1, {3, 4}), k2 = lab::stream_key(1, {4, 3}), k3 = lab::stream_key(2, {3, 4});
  EXPECT_NE(k1, k2);
  EXPECT_NE(k1, k3);
  lab::CounterRng r1(k1), r1again(k1), r2(k2);
  const auto v1 = lab::normal_vector(r1, 1000), v1again = lab::normal_vector(r1again, 1000), v2 = lab::normal_vector(r2, 1000);
  EXPECT_EQ(v1, v1again);
  EXPECT_NE(v1, v2);
  for (int i = 0; i < 1000; ++i) {
    const double u = r2.uniform();
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(SampleRandom, OutlierChannelsAreScaledColumns) {
  lab::CounterRng a(5), b(5);
  std::vector<int64_t> channels;
  const auto x = lab::outlier_activations(a, 16, 256, 4, 100.0, &channels);
  const auto plain = lab::outlier_activations(b, 16, 256, 4, 1.0);
  ASSERT_EQ(channels.size(), 4u);
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 256; ++c) {
      const bool outlier = std::find(channels.begin(), channels.end(), c) != channels.end();
      EXPECT_EQ(x[r * 256 + c], outlier ? static_cast<float>(plain[r * 256 + c] * 100.0) : plain[r * 256 + c]);
    }
  EXPECT_THROW(lab::outlier_activations(a, 2, 8, 9, 10.0), Error);
  EXPECT_THROW(lab::correlated_with(a, x, 1.5), Error);
}

TEST(MethodChecks, EmulatedE4M3AgreesWithTheOcpEncoder) {
  // round_e4m3_variant(x, 448, RNE) must be the OCP encoder's value inside the range, ties included.
  lab::CounterRng rng(8);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(std::ldexp(rng.uniform() * 2 - 1, static_cast<int>(rng.below(24)) - 14));
    ASSERT_EQ(static_cast<float>(lab::round_e4m3_variant(x, 448.0, false)), num::e4m3_decode(num::e4m3_encode(x)))
        << x;
  }
  for (float tie : {1.0625f, 1.1875f, 0.0029296875f /* 1.5 * 2^-9 */, 232.0f})
    EXPECT_EQ(static_cast<float>(lab::round_e4m3_variant(tie, 448.0, false)), num::e4m3_decode(num::e4m3_encode(tie)));
  // Ties away from zero differ exactly on ties; the IEEE-style range clamps at 240.
  EXPECT_EQ(lab::round_e4m3_variant(1.0625, 448.0, true), 1.125);
  EXPECT_EQ(lab::round_e4m3_variant(-1.0625, 448.0, true), -1.125);
  EXPECT_EQ(lab::round_e4m3_variant(300.0, 240.0, true), 240.0);
  EXPECT_EQ(lab::round_to_mantissa_bits(1.0625, 3), 1.0);    // tie to even
  EXPECT_EQ(lab::round_to_mantissa_bits(1.1875, 3), 1.25);   // tie to even (up)
  EXPECT_EQ(lab::round_to_mantissa_bits(1000.0, 3), 1024.0); // no range limit
}
