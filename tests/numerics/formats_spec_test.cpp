// Spec values of every scalar format: each format's table of encodings plus the edges of each range.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "numerics/formats.h"

using namespace fp8train::num;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST(FormatsSpec, E4M3Table) {
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);  // tie between 448 and 480 rounds to even (448): not an overflow
  EXPECT_EQ(e4m3_encode(464.0001f, Saturation::SatFinite), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0001f, Saturation::NonSat), 0x7F);
  EXPECT_EQ(e4m3_encode(465.0f, Saturation::SatFinite), 0x7E);
  EXPECT_EQ(e4m3_encode(465.0f, Saturation::NonSat), 0x7F);
  EXPECT_EQ(e4m3_encode(-465.0f, Saturation::SatFinite), 0xFE);
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: tie to even zero
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f + std::ldexp(1.0f, -13), -10)), 0x01);
  EXPECT_EQ(e4m3_encode(std::ldexp(3.0f, -10)), 0x02);  // 1.5 * 2^-9: tie to even (2)
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);
  EXPECT_EQ(e4m3_encode(1.1875f), 0x3A);
  EXPECT_EQ(e4m3_encode(1.0f), 0x38);
  EXPECT_EQ(e4m3_encode(-2.0f), 0xC0);
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(e4m3_encode(std::ldexp(7.0f, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
  EXPECT_EQ(e4m3_encode(kInf, Saturation::SatFinite), 0x7E);
  EXPECT_EQ(e4m3_encode(-kInf, Saturation::SatFinite), 0xFE);
  EXPECT_EQ(e4m3_encode(kInf, Saturation::NonSat), 0x7F);
  EXPECT_EQ(e4m3_encode(kNaN, Saturation::SatFinite, NanMode::Nvidia), 0x7F);
  EXPECT_EQ(e4m3_encode(-kNaN, Saturation::SatFinite, NanMode::Nvidia), 0x7F);
  EXPECT_EQ(e4m3_encode(-kNaN, Saturation::SatFinite, NanMode::MlDtypes), 0xFF);
  EXPECT_EQ(e4m3_encode(-1000.0f, Saturation::NonSat, NanMode::MlDtypes), 0xFF);
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
}

TEST(FormatsSpec, E5M2Table) {
  EXPECT_EQ(e5m2_encode(57344.0f), 0x7B);
  EXPECT_EQ(e5m2_encode(61440.0f, Saturation::SatFinite), 0x7B);  // tie rounds to even = 65536: overflow
  EXPECT_EQ(e5m2_encode(61440.0f, Saturation::NonSat), 0x7C);
  EXPECT_EQ(e5m2_encode(61439.0f, Saturation::NonSat), 0x7B);
  EXPECT_EQ(e5m2_encode(-kInf, Saturation::NonSat), 0xFC);
  EXPECT_EQ(e5m2_encode(kInf, Saturation::SatFinite), 0x7B);
  EXPECT_EQ(e5m2_encode(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(e5m2_encode(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(e5m2_encode(1.0f), 0x3C);
  EXPECT_EQ(e5m2_encode(1.125f), 0x3C);  // tie to even
  EXPECT_EQ(e5m2_encode(1.375f), 0x3E);  // tie to even
  EXPECT_EQ(e5m2_encode(kNaN, Saturation::SatFinite, NanMode::Nvidia), 0x7F);
  EXPECT_EQ(e5m2_encode(-kNaN, Saturation::SatFinite, NanMode::MlDtypes), 0xFE);
  EXPECT_EQ(e5m2_decode(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_decode(0x7C), kInf);
  EXPECT_EQ(e5m2_decode(0xFC), -kInf);
  EXPECT_TRUE(std::isnan(e5m2_decode(0x7D)));
}

TEST(FormatsSpec, E5M6Table) {
  EXPECT_EQ(e5m6_encode(65024.0f), 0x7BF);
  EXPECT_EQ(e5m6_encode(65280.0f, Saturation::SatFinite), 0x7BF);  // midpoint to 65536 ties to even: overflow
  EXPECT_EQ(e5m6_encode(65280.0f, Saturation::NonSat), 0x7C0);
  EXPECT_EQ(e5m6_encode(1.0f), 0x3C0);
  EXPECT_EQ(e5m6_encode(-1.0f), 0xBC0);
  EXPECT_EQ(e5m6_encode(std::ldexp(1.0f, -20)), 0x001);
  EXPECT_EQ(e5m6_decode(0x7BF), 65024.0f);
  EXPECT_EQ(e5m6_decode(0x001), std::ldexp(1.0f, -20));
  // E5M6 is fp16 with its low 4 mantissa bits dropped: 1 + 2^-6 is representable, 1 + 2^-7 ties to 1.
  EXPECT_EQ(e5m6_decode(e5m6_encode(1.0f + std::ldexp(1.0f, -6))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(e5m6_decode(e5m6_encode(1.0f + std::ldexp(1.0f, -7))), 1.0f);
}

TEST(FormatsSpec, E5M6Specials) {
  EXPECT_EQ(e5m6_encode(kInf, Saturation::SatFinite), 0x7BF);
  EXPECT_EQ(e5m6_encode(-kInf, Saturation::SatFinite), 0xFBF);
  EXPECT_EQ(e5m6_encode(kInf, Saturation::NonSat), 0x7C0);
  EXPECT_EQ(e5m6_encode(-kInf, Saturation::NonSat), 0xFC0);
  EXPECT_EQ(e5m6_encode(kNaN), 0x7E0);
  EXPECT_EQ(e5m6_encode(-kNaN), 0xFE0);
  EXPECT_EQ(e5m6_encode(-0.0f), 0x800);
  EXPECT_EQ(e5m6_encode(std::ldexp(1.0f, -21)), 0x000);                   // half the smallest subnormal: even
  EXPECT_EQ(e5m6_encode(std::ldexp(3.0f, -21)), 0x002);                   // 1.5 * 2^-20: tie to even (2)
  EXPECT_EQ(e5m6_encode(std::ldexp(127.0f, -21)), 0x040);                 // 63.5 * 2^-20 ties up to 2^-14
  EXPECT_EQ(e5m6_decode(0x040), std::ldexp(1.0f, -14));                   // smallest normal
  EXPECT_EQ(e5m6_decode(0x7C0), kInf);
  EXPECT_TRUE(std::isnan(e5m6_decode(0x7C1)));
  EXPECT_EQ(fp8_max(Fp8Format::E4M3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::E5M2), 57344.0f);
}

TEST(FormatsSpec, E5M6Packing) {
  uint16_t codes[8] = {0x7BF, 0x001, 0xFFF, 0x800, 0x3C0, 0x123, 0xABC, 0x5A5};
  uint32_t words[3];
  e5m6_pack8(codes, words);
  EXPECT_EQ(words[0] & 0xFFFu, 0x7BFu);
  EXPECT_EQ(words[2] >> 20, 0x5A5u);
  uint16_t back[8];
  e5m6_unpack8(words, back);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(back[i], codes[i]) << i;
}

TEST(FormatsSpec, UE8M0) {
  EXPECT_EQ(ue8m0_decode(ue8m0_ceil(1.5f)), 2.0f);
  EXPECT_EQ(ue8m0_decode(ue8m0_ceil(2.0f)), 2.0f);
  EXPECT_EQ(ue8m0_decode(ue8m0_ceil(2.0001f)), 4.0f);
  EXPECT_EQ(ue8m0_decode(ue8m0_ceil(0.3f)), 0.5f);
  EXPECT_EQ(ue8m0_decode(ue8m0_nearest(1.4f)), 1.0f);
  EXPECT_EQ(ue8m0_decode(ue8m0_nearest(1.5f)), 2.0f);
  EXPECT_EQ(ue8m0_ceil(1.0f), 127);
  EXPECT_EQ(ue8m0_ceil(kInf), 0xFF);
  EXPECT_EQ(ue8m0_ceil(kNaN), 0xFF);
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xFF)));
  EXPECT_EQ(ue8m0_decode(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(ue8m0_decode(254), std::ldexp(1.0f, 127));
}

TEST(FormatsSpec, BF16) {
  EXPECT_EQ(bf16_encode(1.0f), 0x3F80);
  EXPECT_EQ(bf16_encode(1.0f + std::ldexp(1.0f, -8)), 0x3F80);                          // tie to even
  EXPECT_EQ(bf16_encode(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);  // above the tie
  EXPECT_EQ(bf16_encode(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);                      // tie to even (up)
  EXPECT_TRUE(std::isnan(bf16_decode(bf16_encode(kNaN))));
  // A NaN whose payload sits only in the low 16 bits must not become Inf.
  float low_payload_nan;
  uint32_t bits = 0x7F800001u;
  std::memcpy(&low_payload_nan, &bits, 4);
  EXPECT_TRUE(std::isnan(bf16_decode(bf16_encode(low_payload_nan))));
  EXPECT_EQ(bf16_decode(bf16_encode(kInf)), kInf);
}

TEST(FormatsSpec, Int8) {
  EXPECT_EQ(int8_encode_rne(2.5f), 2);
  EXPECT_EQ(int8_encode_rne(3.5f), 4);
  EXPECT_EQ(int8_encode_rne(-2.5f), -2);
  EXPECT_EQ(int8_encode_rne(-2.6f), -3);
  EXPECT_EQ(int8_encode_rne(200.0f), 127);
  EXPECT_EQ(int8_encode_rne(-200.0f), -127);
  EXPECT_EQ(int8_encode_rne(kNaN), 0);
  EXPECT_EQ(int8_encode_stochastic(3.0f, 0xFFFFFFFFu), 3);  // integers never move
  EXPECT_EQ(int8_encode_stochastic(-3.0f, 0u), -3);
  EXPECT_EQ(int8_encode_stochastic(2.25f, 0u), 3);           // u = 0 < 0.25: up
  EXPECT_EQ(int8_encode_stochastic(2.25f, 0xFFFFFFFFu), 2);  // u ~ 1: down
  EXPECT_EQ(int8_encode_stochastic(-2.25f, 0u), -2);         // floor is -3, frac 0.75
}
