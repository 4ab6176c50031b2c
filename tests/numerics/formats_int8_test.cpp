// INT8 symmetric codec (numerics/formats.h): round-to-nearest-even against std::nearbyint, clamping to
// [-127, 127], and stochastic rounding: exactly unbiased over all 2^24 values of its random input,
// unbiased in the mean with the seeded counter generator, deterministic per (seed, index), and different
// indices/seeds giving different draws.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "numerics/formats.h"

using namespace fp8train::num;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Independent reference: the C library's round-to-nearest-even (the default rounding mode), then clamp.
int reference_rne(float x) {
  if (std::isnan(x)) return 0;
  const double r = std::nearbyint(static_cast<double>(x));
  return r > 127.0 ? 127 : (r < -127.0 ? -127 : static_cast<int>(r));
}
}  // namespace

TEST(FormatsInt8, RneTable) {
  struct Case {
    float x;
    int want;
  };
  const Case cases[] = {
      {0.0f, 0},      {-0.0f, 0},     {0.5f, 0},           {-0.5f, 0},         {1.5f, 2},
      {-1.5f, -2},    {2.5f, 2},      {-2.5f, -2},         {3.5f, 4},          {0.49999997f, 0},
      {0.50000006f, 1}, {-0.50000006f, -1}, {126.5f, 126}, {-126.5f, -126},   {126.50001f, 127},
      {127.0f, 127},  {-127.0f, -127}, {127.4f, 127},      {127.5f, 127},      {-127.5f, -127},
      {128.0f, 127},  {-128.0f, -127}, {1e30f, 127},       {-1e30f, -127},     {kInf, 127},
      {-kInf, -127},  {kNaN, 0},      {-kNaN, 0},          {1e-30f, 0},        {-1e-45f, 0},
  };
  for (const Case& c : cases) EXPECT_EQ(int8_encode_rne(c.x), c.want) << "x = " << c.x;
}

// Every multiple of 2^-8 in [-130, 130] and the floats just above and below it, against nearbyint.
TEST(FormatsInt8, RneMatchesNearbyint) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  int checked = 0;
  for (int i = -130 * 256; i <= 130 * 256; ++i) {
    const float x = static_cast<float>(i) / 256.0f;
    for (float y : {x, std::nextafter(x, kInf), std::nextafter(x, -kInf)}) {
      ASSERT_EQ(int8_encode_rne(y), reference_rne(y)) << "x = " << y;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * (2 * 130 * 256 + 1));
}

// Stochastic rounding reads the top 24 random bits as u in [0, 1) and rounds up when u < frac(x). Running
// all 2^24 values of u gives the exact expectation: it must equal x when frac(x) is a multiple of 2^-24,
// and be within 2^-24 (the resolution of 24 random bits) of x otherwise.
TEST(FormatsInt8, StochasticExactlyUnbiasedOverAllRandomInputs) {
  const float xs[] = {2.25f, -2.75f, 0.5f, -0.5f, 126.375f, -126.875f, 0.1f, -0.1f, 3.0f, 1e-7f, -1e-7f};
  for (float x : xs) {
    int64_t sum = 0;
    int lo = 1000, hi = -1000;
#pragma omp parallel for reduction(+ : sum) reduction(min : lo) reduction(max : hi)
    for (int64_t j = 0; j < (int64_t{1} << 24); ++j) {
      const int r = int8_encode_stochastic(x, static_cast<uint32_t>(j) << 8 | 0xA5u);
      sum += r;
      lo = r < lo ? r : lo;
      hi = r > hi ? r : hi;
    }
    const double mean = static_cast<double>(sum) / static_cast<double>(int64_t{1} << 24);
    EXPECT_EQ(lo, static_cast<int>(std::floor(x))) << x;  // only the two neighbours occur
    EXPECT_EQ(hi, static_cast<int>(std::ceil(x))) << x;
    const double frac_units = (static_cast<double>(x) - std::floor(static_cast<double>(x))) * 16777216.0;
    if (frac_units == std::floor(frac_units)) {
      EXPECT_EQ(mean, static_cast<double>(x)) << x;
    } else {
      EXPECT_LT(std::fabs(mean - static_cast<double>(x)), std::ldexp(1.0, -24)) << x;
    }
  }
}

// With the seeded counter generator: the mean of N draws is lo + (fraction of round-ups), each draw a
// Bernoulli(p ≈ frac) step, so the standard deviation of the mean is sqrt(p(1-p)/N) <= 0.5/sqrt(N) = 4.9e-4
// for N = 2^20. A tolerance of 6 sigma (plus the 2^-24 resolution) fails a correct generator with
// probability ~2e-9, while any systematic bias of the rounding rule (round-to-nearest: up to 0.5; floor:
// frac, >= 0.1 for these x) exceeds it by far.
TEST(FormatsInt8, StochasticUnbiasedInTheMean) {
  constexpr int64_t kDraws = int64_t{1} << 20;
  const float xs[] = {2.25f, -2.75f, 0.5f, 0.1f, -0.3f, 126.7f, -126.7f, 17.9f};
  uint64_t seed = 1234;
  for (float x : xs) {
    int64_t sum = 0;
#pragma omp parallel for reduction(+ : sum)
    for (int64_t i = 0; i < kDraws; ++i) sum += int8_encode_stochastic(x, counter_random_u32(seed, i));
    const double mean = static_cast<double>(sum) / static_cast<double>(kDraws);
    const double p = static_cast<double>(x) - std::floor(static_cast<double>(x));
    const double tolerance = 6.0 * std::sqrt(p * (1.0 - p) / static_cast<double>(kDraws)) + std::ldexp(1.0, -24);
    EXPECT_NEAR(mean, static_cast<double>(x), tolerance) << "x = " << x << ", seed " << seed;
    ++seed;
  }
}

TEST(FormatsInt8, StochasticDeterministicPerSeedAndIndex) {
  for (uint64_t seed : {0ull, 1ull, 0xDEADBEEFull}) {
    for (uint64_t i = 0; i < 1000; ++i) {
      const uint32_t a = counter_random_u32(seed, i), b = counter_random_u32(seed, i);
      ASSERT_EQ(a, b);
      ASSERT_EQ(int8_encode_stochastic(5.3f, a), int8_encode_stochastic(5.3f, b));
    }
  }
  // The same sequence in a different order gives the same draws (counter-based, no hidden state).
  std::vector<uint32_t> forward, backward(4096);
  for (uint64_t i = 0; i < 4096; ++i) forward.push_back(counter_random_u32(7, i));
  for (uint64_t i = 4096; i-- > 0;) backward[i] = counter_random_u32(7, i);
  EXPECT_EQ(forward, backward);
}

TEST(FormatsInt8, DifferentIndicesAndSeedsGiveDifferentDraws) {
  // 2^16 draws of 32 bits: the expected number of repeated values is 2^16·(2^16−1)/2 / 2^32 ≈ 0.5.
  constexpr int kN = 1 << 16;
  std::set<uint32_t> seen;
  for (int i = 0; i < kN; ++i) seen.insert(counter_random_u32(42, i));
  EXPECT_GE(seen.size(), static_cast<size_t>(kN - 4));
  // Another seed gives another sequence (element-wise equal with probability 2^-32 each).
  int same = 0;
  for (int i = 0; i < kN; ++i) same += counter_random_u32(42, i) == counter_random_u32(43, i);
  EXPECT_LE(same, 2);
  // Neighbouring indices are uncorrelated: lag-1 correlation of u = bits/2^32 within 10 sigma (1/sqrt(N)).
  double sum_uv = 0.0, sum_u = 0.0, sum_u2 = 0.0;
  for (int i = 0; i < kN; ++i) {
    const double u = counter_random_u32(9, i) * 0x1p-32, v = counter_random_u32(9, i + 1) * 0x1p-32;
    sum_uv += u * v;
    sum_u += u;
    sum_u2 += u * u;
  }
  const double mean = sum_u / kN, var = sum_u2 / kN - mean * mean;
  const double corr = (sum_uv / kN - mean * mean) / var;
  EXPECT_LT(std::fabs(corr), 10.0 / std::sqrt(static_cast<double>(kN))) << corr;
  // And the rounding decisions of one value across indices are not all the same.
  int ups = 0;
  for (int i = 0; i < 1000; ++i) ups += int8_encode_stochastic(0.5f, counter_random_u32(3, i)) == 1;
  EXPECT_GT(ups, 400);
  EXPECT_LT(ups, 600);
}

TEST(FormatsInt8, StochasticClamping) {
  for (uint32_t bits : {0u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x12345678u}) {
    EXPECT_EQ(int8_encode_stochastic(127.0f, bits), 127);
    EXPECT_EQ(int8_encode_stochastic(127.5f, bits), 127);
    EXPECT_EQ(int8_encode_stochastic(1e30f, bits), 127);
    EXPECT_EQ(int8_encode_stochastic(kInf, bits), 127);
    EXPECT_EQ(int8_encode_stochastic(-127.0f, bits), -127);
    EXPECT_EQ(int8_encode_stochastic(-127.9f, bits), -127);
    EXPECT_EQ(int8_encode_stochastic(-kInf, bits), -127);
    EXPECT_EQ(int8_encode_stochastic(kNaN, bits), 0);
    const int up = int8_encode_stochastic(126.5f, bits);
    EXPECT_TRUE(up == 126 || up == 127) << up;
    const int down = int8_encode_stochastic(-126.5f, bits);
    EXPECT_TRUE(down == -127 || down == -126) << down;  // never -128
  }
  EXPECT_EQ(int8_encode_stochastic(-126.5f, 0u), -126);           // u = 0 < 0.5: up from -127
  EXPECT_EQ(int8_encode_stochastic(-126.5f, 0xFFFFFFFFu), -127);  // u ~ 1: stays at the floor
}
