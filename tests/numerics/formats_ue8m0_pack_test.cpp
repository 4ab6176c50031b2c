// UE8M0 power-of-two scales and E5M6 packing (numerics/formats.h), checked against plain definitions:
//   - ue8m0_ceil(x): the smallest code whose value 2^(code-127) is >= x, 0xFF when none is (x > 2^127,
//     Inf, NaN); ue8m0_nearest(x): the code nearest in value, ties to the larger power, 0xFF when that is
//     2^128. Both on every code value, on every binade edge of float32, and on random floats;
//   - e5m6_pack8 / e5m6_unpack8: value i at bits [12i, 12i+12) of the 96-bit little-endian integer formed by
//     the three words, round-trip, and bits above the 12-bit code ignored.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "numerics/formats.h"

using namespace fp8train::num;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double code_value(int code) { return std::ldexp(1.0, code - 127); }  // exact in double

// By search over the 255 finite codes, in double (exact for every float32 and every 2^k here).
uint8_t reference_ceil(float x) {
  if (std::isnan(x) || std::isinf(x)) return 0xFF;
  const double v = std::fabs(static_cast<double>(x));
  for (int c = 0; c <= 254; ++c)
    if (code_value(c) >= v) return static_cast<uint8_t>(c);
  return 0xFF;
}

uint8_t reference_nearest(float x) {
  if (std::isnan(x) || std::isinf(x)) return 0xFF;
  const double v = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_distance = std::fabs(code_value(0) - v);
  for (int c = 1; c <= 255; ++c) {  // c = 255 stands for 2^128, which is not a scale: 0xFF
    const double d = std::fabs(code_value(c) - v);
    if (d <= best_distance) {  // ties go to the larger power
      best = c;
      best_distance = d;
    }
  }
  return static_cast<uint8_t>(best);
}

std::vector<float> ue8m0_inputs() {
  std::vector<float> xs;
  for (uint32_t exp = 0; exp <= 255; ++exp) {
    for (uint32_t man : {0u, 1u, 0x3FFFFFu, 0x400000u, 0x400001u, 0x5FFFFFu, 0x600000u, 0x600001u, 0x7FFFFFu}) {
      xs.push_back(bits_float((exp << 23) | man));
    }
  }
  for (uint64_t i = 0; i < 50000; ++i) {
    const uint64_t r = splitmix64(i);
    xs.push_back(bits_float(static_cast<uint32_t>(((r & 0xFF) << 23) | ((r >> 8) & 0x7FFFFF))));
  }
  return xs;
}

}  // namespace

TEST(FormatsUE8M0, EveryCodeRoundTrips) {
  for (int c = 0; c <= 254; ++c) {
    const float v = ue8m0_decode(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), code_value(c)) << c;
    EXPECT_EQ(ue8m0_ceil(v), c) << c;
    EXPECT_EQ(ue8m0_nearest(v), c) << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xFF)));
  EXPECT_EQ(ue8m0_ceil(ue8m0_decode(0xFF)), 0xFF);
  EXPECT_EQ(ue8m0_nearest(ue8m0_decode(0xFF)), 0xFF);
}

TEST(FormatsUE8M0, CeilIsSmallestPowerOfTwoAbove) {
  int checked = 0;
  for (float x : ue8m0_inputs()) {
    ASSERT_EQ(ue8m0_ceil(x), reference_ceil(x)) << "x = " << x << " (bits 0x" << std::hex << float_bits(x) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 50000);
  // The subnormal scales: everything up to 2^-127 has code 0, just above it code 1.
  EXPECT_EQ(ue8m0_ceil(0.0f), 0);
  EXPECT_EQ(ue8m0_ceil(std::ldexp(1.0f, -130)), 0);
  EXPECT_EQ(ue8m0_ceil(std::ldexp(1.0f, -127)), 0);
  EXPECT_EQ(ue8m0_ceil(std::nextafter(std::ldexp(1.0f, -127), 1.0f)), 1);
  EXPECT_EQ(ue8m0_ceil(std::ldexp(1.0f, 127)), 254);
  // Just above 2^127 the ceiling would be 2^128, which is not a scale.
  EXPECT_EQ(ue8m0_ceil(std::nextafter(std::ldexp(1.0f, 127), std::numeric_limits<float>::infinity())), 0xFF);
  EXPECT_EQ(ue8m0_ceil(-3.0f), 129);  // the sign is ignored
}

TEST(FormatsUE8M0, NearestIsNearestInValue) {
  for (float x : ue8m0_inputs()) {
    ASSERT_EQ(ue8m0_nearest(x), reference_nearest(x)) << "x = " << x << " (bits 0x" << std::hex << float_bits(x)
                                                      << ")";
  }
  EXPECT_EQ(ue8m0_nearest(1.4999999f), 127);
  EXPECT_EQ(ue8m0_nearest(1.5f), 128);  // the midpoint in value goes up
  EXPECT_EQ(ue8m0_nearest(0.75f), 127);
  EXPECT_EQ(ue8m0_nearest(0.7499999f), 126);
}

TEST(FormatsE5M6Packing, BitPositionsAndRoundTrip) {
  for (uint64_t trial = 0; trial < 10000; ++trial) {
    uint16_t codes[8];
    for (int i = 0; i < 8; ++i) codes[i] = static_cast<uint16_t>(splitmix64(trial * 8 + i) & 0xFFF);
    uint32_t words[3];
    e5m6_pack8(codes, words);
    // Bit j of code i is bit 12i + j of the 96-bit integer: word (12i + j) / 32, bit (12i + j) % 32.
    uint32_t want[3] = {0, 0, 0};
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 12; ++j)
        if ((codes[i] >> j) & 1) want[(12 * i + j) / 32] |= 1u << ((12 * i + j) % 32);
    ASSERT_EQ(words[0], want[0]) << trial;
    ASSERT_EQ(words[1], want[1]) << trial;
    ASSERT_EQ(words[2], want[2]) << trial;
    uint16_t back[8];
    e5m6_unpack8(words, back);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(back[i], codes[i]) << trial << " " << i;
  }
  // Bits above the 12-bit code are ignored when packing.
  const uint16_t dirty[8] = {0xF7BF, 0x1001, 0x2FFF, 0x8800, 0x43C0, 0x5123, 0x6ABC, 0x75A5};
  const uint16_t clean[8] = {0x7BF, 0x001, 0xFFF, 0x800, 0x3C0, 0x123, 0xABC, 0x5A5};
  uint32_t w_dirty[3], w_clean[3];
  e5m6_pack8(dirty, w_dirty);
  e5m6_pack8(clean, w_clean);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w_dirty[i], w_clean[i]);
}
