// Exhaustive code round-trips of the scalar formats: every code of E4M3 and E5M2 (256 each), E5M6 (4096,
// the low 12 bits of a uint16) and BF16 (65536) is decoded to float32 and encoded back under every
// saturation and NaN mode. Finite codes must come back unchanged (including -0 = sign bit only); NaN codes
// must decode to NaN and re-encode to the NaN the mode prescribes; Inf codes come back as Inf in
// non-saturating mode and as ±max in satfinite mode. Decoded values of the non-negative finite codes must
// also be strictly increasing, so the code order is the value order the encoders rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "numerics/formats.h"

using namespace fp8train::num;

namespace {

constexpr Saturation kSatModes[] = {Saturation::SatFinite, Saturation::NonSat};
constexpr NanMode kNanModes[] = {NanMode::Nvidia, NanMode::MlDtypes};

const char* name(Saturation s) { return s == Saturation::SatFinite ? "satfinite" : "nonsat"; }
const char* name(NanMode n) { return n == NanMode::Nvidia ? "nvidia" : "ml_dtypes"; }

}  // namespace

TEST(FormatsRoundTrip, E4M3AllCodes) {
  int nan_codes = 0;
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    const float v = e4m3_decode(c);
    const bool is_nan_code = (c & 0x7F) == 0x7F;  // S.1111.111 is the only NaN; e4m3fn has no Inf
    EXPECT_EQ(std::isnan(v), is_nan_code) << "code 0x" << std::hex << code;
    EXPECT_FALSE(std::isinf(v)) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code 0x" << std::hex << code;
    nan_codes += is_nan_code;
    for (Saturation sat : kSatModes) {
      for (NanMode nan : kNanModes) {
        const uint8_t back = e4m3_encode(v, sat, nan);
        const uint8_t back_generic = fp8_encode(Fp8Format::E4M3, v, sat, nan);
        EXPECT_EQ(back, back_generic);
        if (is_nan_code) {
          const uint8_t want = nan == NanMode::Nvidia ? 0x7F : c;  // ml_dtypes keeps the sign
          EXPECT_EQ(back, want) << "NaN code 0x" << std::hex << code << " " << name(sat) << " " << name(nan);
        } else {
          EXPECT_EQ(back, c) << "code 0x" << std::hex << code << " " << name(sat) << " " << name(nan);
        }
      }
    }
  }
  EXPECT_EQ(nan_codes, 2);
  EXPECT_EQ(e4m3_encode(e4m3_decode(0x80)), 0x80);  // -0 keeps its sign bit
  EXPECT_EQ(e4m3_decode(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
}

TEST(FormatsRoundTrip, E5M2AllCodes) {
  int nan_codes = 0, inf_codes = 0;
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    const float v = e5m2_decode(c);
    const bool is_inf_code = (c & 0x7F) == 0x7C;
    const bool is_nan_code = (c & 0x7F) > 0x7C;
    EXPECT_EQ(std::isnan(v), is_nan_code) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::isinf(v), is_inf_code) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code 0x" << std::hex << code;
    nan_codes += is_nan_code;
    inf_codes += is_inf_code;
    for (Saturation sat : kSatModes) {
      for (NanMode nan : kNanModes) {
        const uint8_t back = e5m2_encode(v, sat, nan);
        EXPECT_EQ(back, fp8_encode(Fp8Format::E5M2, v, sat, nan));
        uint8_t want = c;
        if (is_nan_code) {
          want = nan == NanMode::Nvidia ? 0x7F : static_cast<uint8_t>(0x7E | (c & 0x80));
        } else if (is_inf_code && sat == Saturation::SatFinite) {
          want = static_cast<uint8_t>(kE5M2MaxCode | (c & 0x80));  // satfinite clamps ±Inf to ±max
        }
        EXPECT_EQ(back, want) << "code 0x" << std::hex << code << " " << name(sat) << " " << name(nan);
      }
    }
  }
  EXPECT_EQ(nan_codes, 6);
  EXPECT_EQ(inf_codes, 2);
  EXPECT_EQ(e5m2_encode(e5m2_decode(0x80)), 0x80);
}

TEST(FormatsRoundTrip, E5M6AllCodes) {
  int nan_codes = 0, inf_codes = 0;
  for (int code = 0; code < 4096; ++code) {
    const uint16_t c = static_cast<uint16_t>(code);
    const float v = e5m6_decode(c);
    const bool is_inf_code = (c & 0x7FF) == 0x7C0;
    const bool is_nan_code = (c & 0x7FF) > 0x7C0;
    EXPECT_EQ(std::isnan(v), is_nan_code) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::isinf(v), is_inf_code) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(v), (c & 0x800) != 0) << "code 0x" << std::hex << code;
    nan_codes += is_nan_code;
    inf_codes += is_inf_code;
    for (Saturation sat : kSatModes) {
      const uint16_t back = e5m6_encode(v, sat);
      uint16_t want = c;
      if (is_nan_code) {
        want = static_cast<uint16_t>(0x7E0 | (c & 0x800));  // the quiet NaN, sign kept
      } else if (is_inf_code && sat == Saturation::SatFinite) {
        want = static_cast<uint16_t>(kE5M6MaxCode | (c & 0x800));
      }
      EXPECT_EQ(back, want) << "code 0x" << std::hex << code << " " << name(sat);
    }
  }
  EXPECT_EQ(nan_codes, 2 * 63);
  EXPECT_EQ(inf_codes, 2);
  // E5M6 is the top 12 bits of an IEEE fp16: the code shifted left by 4 is the fp16 pattern of the value.
  EXPECT_EQ(e5m6_decode(0x3C0), 1.0f);                  // fp16 0x3C00
  EXPECT_EQ(e5m6_decode(0x7BF), 65024.0f);              // fp16 0x7BF0
  EXPECT_EQ(e5m6_decode(0x001), std::ldexp(1.0f, -20));  // fp16 0x0010 = 16 * 2^-24
}

TEST(FormatsRoundTrip, BF16AllCodes) {
  int nan_codes = 0;
  for (int code = 0; code < 65536; ++code) {
    const uint16_t c = static_cast<uint16_t>(code);
    const float v = bf16_decode(c);
    const bool is_nan_code = (c & 0x7FFF) > 0x7F80;
    EXPECT_EQ(std::isnan(v), is_nan_code) << "code 0x" << std::hex << code;
    nan_codes += is_nan_code;
    const uint16_t back = bf16_encode(v);
    if (is_nan_code) {
      // NaN-preserving: sign and payload kept, the quiet bit set so a signalling NaN cannot become Inf.
      EXPECT_EQ(back, static_cast<uint16_t>(c | 0x0040)) << "NaN code 0x" << std::hex << code;
      EXPECT_TRUE(std::isnan(bf16_decode(back)));
    } else {
      EXPECT_EQ(back, c) << "code 0x" << std::hex << code;  // Inf and -0 included
      EXPECT_EQ(bf16_round(v), v);
    }
  }
  EXPECT_EQ(nan_codes, 2 * 127);
}

// Decoding the non-negative finite codes in code order gives strictly increasing values, and each negative
// code decodes to exactly minus its positive twin: the encoders' "round the magnitude, then OR the sign"
// construction relies on both.
TEST(FormatsRoundTrip, CodeOrderIsValueOrder) {
  auto check = [](const char* fmt, int max_code, int sign_bit, auto decode) {
    for (int c = 1; c <= max_code; ++c)
      EXPECT_LT(decode(c - 1), decode(c)) << fmt << " code 0x" << std::hex << c;
    for (int c = 0; c <= max_code; ++c) EXPECT_EQ(decode(c | sign_bit), -decode(c)) << fmt << " code " << c;
  };
  check("e4m3", kE4M3MaxCode, 0x80, [](int c) { return e4m3_decode(static_cast<uint8_t>(c)); });
  check("e5m2", kE5M2MaxCode, 0x80, [](int c) { return e5m2_decode(static_cast<uint8_t>(c)); });
  check("e5m6", kE5M6MaxCode, 0x800, [](int c) { return e5m6_decode(static_cast<uint16_t>(c)); });
  check("bf16", 0x7F7F, 0x8000, [](int c) { return bf16_decode(static_cast<uint16_t>(c)); });
  EXPECT_EQ(e4m3_decode(kE4M3MaxCode), kE4M3Max);
  EXPECT_EQ(e5m2_decode(kE5M2MaxCode), kE5M2Max);
  EXPECT_EQ(e5m6_decode(kE5M6MaxCode), kE5M6Max);
}
