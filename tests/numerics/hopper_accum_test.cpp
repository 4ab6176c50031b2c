// The Hopper FP8 accumulator model (numerics/hopper_accum.h) and the captured-vector reader
// (numerics/accum_vectors.h):
//   - every captured H200 GEMM in tests/data/hopper-fp8-accum reproduced bit for bit through the library;
//   - hand-made blocks whose expected results were worked out by hand from the FP22 rules: truncation of
//     terms and of the sum toward zero, the unnormalised product exponent, subnormal operands, swamping,
//     chaining through c, promotion every 128 vs never, NaN/Inf, E5M2 x E4M3 mixing;
//   - argument validation and rejection of malformed vector files with an Error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "numerics/accum_vectors.h"
#include "numerics/hopper_accum.h"

using namespace fp8train::num;
namespace fs = std::filesystem;

namespace {

constexpr Fp8Format kE4 = Fp8Format::E4M3;
constexpr Fp8Format kE5 = Fp8Format::E5M2;

// The code of a value that must be exactly representable (the hand-made cases rely on exact operands).
uint8_t code_of(Fp8Format f, float x) {
  const uint8_t c = fp8_encode(f, x);
  EXPECT_EQ(fp8_decode(f, c), x) << x << " is not exactly representable";
  return c;
}

std::vector<uint8_t> codes_of(Fp8Format f, std::initializer_list<float> xs) {
  std::vector<uint8_t> out;
  for (float x : xs) out.push_back(code_of(f, x));
  return out;
}

float block(Fp8Format fa, const std::vector<uint8_t>& a, Fp8Format fb, const std::vector<uint8_t>& b, float c = 0.0f) {
  EXPECT_EQ(a.size(), b.size());
  return hopper_block(a.data(), fa, b.data(), fb, static_cast<int>(a.size()), c);
}

// Deterministic pseudo-random finite codes (no NaN/Inf) of a format.
std::vector<uint8_t> random_codes(Fp8Format f, size_t n, uint64_t seed) {
  std::vector<uint8_t> out;
  uint64_t s = seed;
  while (out.size() < n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint8_t c = static_cast<uint8_t>(s >> 56);
    if (!std::isnan(fp8_decode(f, c)) && !std::isinf(fp8_decode(f, c))) out.push_back(c);
  }
  return out;
}

std::string hopper_data_dir() { return std::string(FP8TRAIN_TEST_DATA) + "/hopper-fp8-accum"; }

}  // namespace

// ---- captured H200 vectors -----------------------------------------------------------------------
TEST(HopperAccum, EveryCapturedVectorIsExact) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(hopper_data_dir()))
    if (entry.path().extension() == ".bin") files.push_back(entry.path());
  ASSERT_GE(files.size(), 15u) << "expected the 15 shared H200 vectors in " << hopper_data_dir();
  int mixed = 0, promoted = 0;
  for (const auto& f : files) {
    const AccumVector v = read_accum_vector(f.string());
    const AccumCheck c = check_accum_vector(v);
    EXPECT_EQ(c.total, uint64_t{v.m} * v.n) << f.filename();
    EXPECT_EQ(c.matched, c.total) << f.filename();
    mixed += v.format_a != v.format_b;
    promoted += v.promote;
  }
  EXPECT_GE(mixed, 2);     // the e5m2 x e4m3 files are among them
  EXPECT_GE(promoted, 7);  // and both modes
}

// The vectors discriminate: the same inputs under the other mode do not match, so the exact match above is
// not an accident of easy data.
TEST(HopperAccum, CapturedVectorsRejectTheWrongMode) {
  for (const char* name : {"rand_pos_e4m3_m64_n64_k4096_default.bin", "rand_pos_e4m3_m64_n64_k4096_fast.bin",
                           "randn_e4m3_m64_n64_k1024_fast.bin"}) {
    AccumVector v = read_accum_vector(hopper_data_dir() + "/" + name);
    v.promote = !v.promote;
    const AccumCheck c = check_accum_vector(v);
    EXPECT_LT(c.matched, c.total / 2) << name;
  }
}

// ---- operand decomposition and FP22 --------------------------------------------------------------
TEST(HopperAccum, Fp8Parts) {
  auto expect = [](Fp8Format f, uint8_t code, int sig, int exp, bool special) {
    const Fp8Parts p = fp8_parts(f, code);
    EXPECT_EQ(p.special, special) << int(code);
    if (special) return;
    EXPECT_EQ(p.sig, sig) << int(code);
    EXPECT_EQ(p.exp, exp) << int(code);
    const int mbits = f == kE4 ? 3 : 2;
    EXPECT_EQ(std::ldexp(static_cast<float>(p.sig), p.exp - mbits), fp8_decode(f, code)) << int(code);
  };
  expect(kE4, 0x7E, 14, 8, false);   // 448 = 14 * 2^(8-3)
  expect(kE4, 0x01, 1, -6, false);   // subnormal: minimum exponent
  expect(kE4, 0x00, 0, -6, false);
  expect(kE4, 0xFE, -14, 8, false);
  expect(kE4, 0x38, 8, 0, false);
  expect(kE4, 0x7F, 0, 0, true);
  expect(kE4, 0xFF, 0, 0, true);
  expect(kE5, 0x7B, 7, 15, false);   // 57344 = 7 * 2^(15-2)
  expect(kE5, 0x01, 1, -14, false);
  expect(kE5, 0x7C, 0, 0, true);     // Inf
  expect(kE5, 0x7D, 0, 0, true);     // NaN
  // Every finite code of both formats decomposes exactly.
  for (int c = 0; c < 256; ++c) {
    for (Fp8Format f : {kE4, kE5}) {
      const Fp8Parts p = fp8_parts(f, static_cast<uint8_t>(c));
      const float v = fp8_decode(f, static_cast<uint8_t>(c));
      EXPECT_EQ(p.special, std::isnan(v) || std::isinf(v)) << c;
      if (!p.special) {
        EXPECT_EQ(std::ldexp(static_cast<float>(p.sig), p.exp - (f == kE4 ? 3 : 2)), v) << c;
      }
    }
  }
}

TEST(HopperAccum, TruncateToFp22) {
  EXPECT_EQ(truncate_to_fp22(1.0f + std::ldexp(1.0f, -13) + std::ldexp(1.0f, -14)), 1.0f + std::ldexp(1.0f, -13));
  EXPECT_EQ(truncate_to_fp22(-(1.0f + 3 * std::ldexp(1.0f, -14))), -(1.0f + std::ldexp(1.0f, -13)));
  EXPECT_EQ(float_bits(truncate_to_fp22(bits_float(0x3FFFFFFFu))), 0x3FFFFC00u);
}

// ---- FP22 rules by hand --------------------------------------------------------------------------
// Terms are truncated toward zero at 13 fraction bits below the block's largest exponent E.
TEST(HopperAccum, TermsTruncateTowardZero) {
  const float small = 1.875f * std::ldexp(1.0f, -6);  // small^2 = 3.515625 * 2^-12 = 7.03125 units of 2^-13
  // E = 0: 1 + 7.03125 units -> 1 + 7 units.
  EXPECT_EQ(block(kE4, codes_of(kE4, {1.0f, small}), kE4, codes_of(kE4, {1.0f, small})),
            1.0f + 7 * std::ldexp(1.0f, -13));
  EXPECT_NE(1.0f + 7 * std::ldexp(1.0f, -13), 1.0f + small * small);  // plain FP32 would keep the fraction
  // E = 1 (the product 2*1), units of 2^-12: -3.515625 units truncates toward zero to -3 (floor would be -4).
  EXPECT_EQ(block(kE4, codes_of(kE4, {2.0f, small}), kE4, codes_of(kE4, {1.0f, -small})),
            2.0f - 3 * std::ldexp(1.0f, -12));
}

// The exact sum is normalised and truncated to 14 significant bits.
TEST(HopperAccum, SumTruncatesTowardZero) {
  const float tiny_a = std::ldexp(1.0f, -7), tiny_b = std::ldexp(1.0f, -6);  // product 2^-13: one unit at E = 0
  // 1.875^2 = 3.515625 = 28800 units; + 3 units = 28803 needs 15 bits -> 28802 (RNE would give 28804).
  const float got = block(kE4, codes_of(kE4, {1.875f, tiny_a, tiny_a, tiny_a}), kE4,
                          codes_of(kE4, {1.875f, tiny_b, tiny_b, tiny_b}));
  EXPECT_EQ(got, 28802 * std::ldexp(1.0f, -13));
  // Negative sums truncate toward zero too.
  const float neg = block(kE4, codes_of(kE4, {-1.875f, -tiny_a, -tiny_a, -tiny_a}), kE4,
                          codes_of(kE4, {1.875f, tiny_b, tiny_b, tiny_b}));
  EXPECT_EQ(neg, -28802 * std::ldexp(1.0f, -13));
}

// A product's exponent is the sum of its operands' exponents; its significand stays unnormalised in [0, 4).
TEST(HopperAccum, ProductExponentIsUnnormalised) {
  const float tiny_a = std::ldexp(1.0f, -7), tiny_b = std::ldexp(1.0f, -6);
  // 1.875 * 1.875 = 3.515625 has exponent 0 (not 1), so the unit is 2^-13 and the two 2^-13 products survive:
  // 28800 + 2 = 28802 units. With a normalised exponent (E = 1) they would each be half a unit and vanish.
  EXPECT_EQ(block(kE4, codes_of(kE4, {1.875f, tiny_a, tiny_a}), kE4, codes_of(kE4, {1.875f, tiny_b, tiny_b})),
            3.515625f + std::ldexp(1.0f, -12));
}

// A subnormal operand counts with the format's minimum exponent: 2^-9 (E4M3 0x01 = 1 * 2^(-6-3)) times 448
// has exponent -6 + 8 = 2 although its value is 0.875, so E = 2, the unit is 2^-11, and the product
// 0.054931640625 = 112.5 units loses its half unit.
TEST(HopperAccum, SubnormalOperandUsesMinimumExponent) {
  const std::vector<uint8_t> a = {0x01, code_of(kE4, 1.875f * 0.125f)};
  const std::vector<uint8_t> b = {code_of(kE4, 448.0f), code_of(kE4, 1.875f * 0.125f)};
  EXPECT_EQ(block(kE4, a, kE4, b), 0.9296875f);  // 1904 * 2^-11
  EXPECT_NE(0.9296875f, 0.875f + 0.054931640625f);
}

// One large product swamps small ones: 448 * 448 = 200704 sets E = 16, units of 2^3, and each 1 * 1 is an
// eighth of a unit, truncated away.
TEST(HopperAccum, SwampingBySmallTerms) {
  std::vector<uint8_t> a(32, code_of(kE4, 1.0f)), b(32, code_of(kE4, 1.0f));
  a[0] = b[0] = code_of(kE4, 448.0f);
  EXPECT_EQ(block(kE4, a, kE4, b), 200704.0f);  // exact sum: 200735
  // Across blocks through c: 200704 (exponent 17, units 2^4) then 32 ones, all lost.
  std::vector<uint8_t> a2(64, code_of(kE4, 1.0f)), b2(64, code_of(kE4, 1.0f));
  for (int i = 0; i < 32; ++i) a2[i] = b2[i] = code_of(kE4, 0.0f);
  a2[0] = b2[0] = code_of(kE4, 448.0f);
  EXPECT_EQ(hopper_dot(a2.data(), kE4, b2.data(), kE4, 64, kNeverPromote), 200704.0f);
  // The same 32 ones on their own sum exactly.
  EXPECT_EQ(hopper_dot(a2.data() + 32, kE4, b2.data() + 32, kE4, 32, kNeverPromote), 32.0f);
}

// The FP32 result of one block is the addend c of the next, and c is truncated like any other term.
TEST(HopperAccum, ChainingThroughC) {
  const std::vector<uint8_t> one = codes_of(kE4, {1.0f}), nine_eighths = codes_of(kE4, {1.125f});
  EXPECT_EQ(block(kE4, one, kE4, one, 1.0f + 3 * std::ldexp(1.0f, -23)), 2.0f);  // FP32 would give 2 + 2^-22
  EXPECT_EQ(block(kE4, one, kE4, nine_eighths, 1024.0f), 1025.125f);  // c sets E = 10: units of 2^-3, exact
  EXPECT_EQ(block(kE4, one, kE4, nine_eighths, 4096.0f), 4097.0f);    // E = 12: units of 2^-1, 1.125 -> 1
  EXPECT_EQ(block(kE4, one, kE4, nine_eighths, -4096.0f), -4095.0f);  // toward zero for negative terms too
  EXPECT_EQ(block(kE4, {}, kE4, {}, 3.0f), 3.0f);                      // no products: c unchanged
  // hopper_dot chains blocks exactly like this, for every block count.
  const std::vector<uint8_t> a = random_codes(kE4, 96, 1), b = random_codes(kE4, 96, 2);
  float c = 0.0f;
  for (int k0 = 0; k0 < 96; k0 += 32) c = hopper_block(a.data() + k0, kE4, b.data() + k0, kE4, 32, c);
  EXPECT_EQ(float_bits(hopper_dot(a.data(), kE4, b.data(), kE4, 96, kNeverPromote)), float_bits(c));
  // A ragged tail (k = 80) is a short last block.
  c = 0.0f;
  c = hopper_block(a.data(), kE4, b.data(), kE4, 32, c);
  c = hopper_block(a.data() + 32, kE4, b.data() + 32, kE4, 32, c);
  c = hopper_block(a.data() + 64, kE4, b.data() + 64, kE4, 16, c);
  EXPECT_EQ(float_bits(hopper_dot(a.data(), kE4, b.data(), kE4, 80, kNeverPromote)), float_bits(c));
}

// 128 products of 448 * 448 then 128 of 1 * 1. Without promotion the chain is at 25690112 (units of 2^11)
// when the ones arrive and they all vanish; promoting every 128 sums the ones (128) in a fresh chain and
// adds them in FP32.
TEST(HopperAccum, PromotionEvery128VersusNever) {
  std::vector<uint8_t> a(256, code_of(kE4, 1.0f));
  for (int i = 0; i < 128; ++i) a[i] = code_of(kE4, 448.0f);
  const std::vector<uint8_t>& b = a;
  EXPECT_EQ(hopper_dot(a.data(), kE4, b.data(), kE4, 256, kNeverPromote), 25690112.0f);
  EXPECT_EQ(hopper_dot(a.data(), kE4, b.data(), kE4, 256, 128), 25690240.0f);
  EXPECT_EQ(hopper_dot(a.data(), kE4, b.data(), kE4, 256, 64), 25690240.0f);
  // General rule: the result is the FP32 sum, group by group, of each group's chained blocks.
  const std::vector<uint8_t> x = random_codes(kE5, 1000, 3), y = random_codes(kE4, 1000, 4);
  for (int interval : {32, 64, 128, 256}) {
    float acc = 0.0f, chain = 0.0f;
    for (int k0 = 0; k0 < 1000; k0 += 32) {
      const int n = std::min(32, 1000 - k0);
      chain = hopper_block(x.data() + k0, kE5, y.data() + k0, kE4, n, chain);
      if ((k0 + n) % interval == 0 || k0 + n == 1000) {
        acc += chain;
        chain = 0.0f;
      }
    }
    EXPECT_EQ(float_bits(hopper_dot(x.data(), kE5, y.data(), kE4, 1000, interval)), float_bits(acc)) << interval;
  }
}

// hopper_dot_scaled multiplies each group's partial sum by its two scales at promotion: with power-of-two
// scales this is exact, so it equals the unscaled partials times the scales.
TEST(HopperAccum, ScaledPromotion) {
  const std::vector<uint8_t> a = random_codes(kE4, 256, 5), b = random_codes(kE4, 256, 6);
  const float sa[2] = {2.0f, 0.25f}, sb[2] = {4.0f, 1.0f};
  const float p0 = hopper_dot(a.data(), kE4, b.data(), kE4, 128, 128);
  const float p1 = hopper_dot(a.data() + 128, kE4, b.data() + 128, kE4, 128, 128);
  const float want = std::fma(0.25f, p1, std::fma(8.0f, p0, 0.0f));
  EXPECT_EQ(hopper_dot_scaled(a.data(), kE4, sa, b.data(), kE4, sb, 256, 128), want);
  const float ones[2] = {1.0f, 1.0f};
  EXPECT_EQ(hopper_dot_scaled(a.data(), kE4, ones, b.data(), kE4, ones, 256, 128),
            hopper_dot(a.data(), kE4, b.data(), kE4, 256, 128));
}

TEST(HopperAccum, PromoteIntervalValidation) {
  const std::vector<uint8_t> a = random_codes(kE4, 64, 7);
  const float ones[2] = {1.0f, 1.0f};
  for (int bad : {100, 16, -32, -1, 1}) {
    try {
      (void)hopper_dot(a.data(), kE4, a.data(), kE4, 64, bad);
      ADD_FAILURE() << "promote_interval " << bad << " accepted";
    } catch (const fp8train::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)hopper_dot_scaled(a.data(), kE4, ones, a.data(), kE4, ones, 64, bad), fp8train::Error);
  }
  EXPECT_NO_THROW((void)hopper_dot(a.data(), kE4, a.data(), kE4, 64, 32));
  EXPECT_NO_THROW((void)hopper_dot(a.data(), kE4, a.data(), kE4, 64, kNeverPromote));
  EXPECT_THROW((void)hopper_dot_scaled(a.data(), kE4, ones, a.data(), kE4, ones, 64, kNeverPromote),
               fp8train::Error);
  EXPECT_THROW((void)hopper_block(a.data(), kE4, a.data(), kE4, 33, 0.0f), fp8train::Error);
  EXPECT_THROW((void)hopper_block(a.data(), kE4, a.data(), kE4, -1, 0.0f), fp8train::Error);
  EXPECT_THROW((void)hopper_dot(a.data(), kE4, a.data(), kE4, -5, 128), fp8train::Error);
  EXPECT_EQ(hopper_dot(a.data(), kE4, a.data(), kE4, 0, 128), 0.0f);
}

TEST(HopperAccum, NaNAndInfPropagate) {
  const float inf = std::numeric_limits<float>::infinity();
  const uint8_t e4_one = code_of(kE4, 1.0f), e4_zero = 0x00, e4_nan = 0x7F;
  const uint8_t e5_one = code_of(kE5, 1.0f), e5_inf = 0x7C, e5_ninf = 0xFC, e5_nan = 0x7E;
  std::vector<uint8_t> a(32, e4_one), b(32, e4_one);
  a[3] = e4_nan;
  EXPECT_TRUE(std::isnan(block(kE4, a, kE4, b)));
  std::vector<uint8_t> x(32, e5_one), y(32, e4_one);
  x[5] = e5_inf;
  EXPECT_EQ(block(kE5, x, kE4, y), inf);
  x[5] = e5_ninf;
  EXPECT_EQ(block(kE5, x, kE4, y), -inf);
  x[5] = e5_inf;
  y[5] = e4_zero;  // Inf * 0
  EXPECT_TRUE(std::isnan(block(kE5, x, kE4, y)));
  y[5] = e4_one;
  x[6] = e5_ninf;  // +Inf + -Inf
  EXPECT_TRUE(std::isnan(block(kE5, x, kE4, y)));
  x[6] = e5_nan;
  EXPECT_TRUE(std::isnan(block(kE5, x, kE4, y)));
  // A non-finite addend c propagates as well.
  const std::vector<uint8_t> finite(32, e4_one);
  EXPECT_EQ(block(kE4, finite, kE4, finite, inf), inf);
  EXPECT_EQ(block(kE4, finite, kE4, finite, -inf), -inf);
  EXPECT_TRUE(std::isnan(block(kE4, finite, kE4, finite, std::numeric_limits<float>::quiet_NaN())));
  // Through the chain and through promotion.
  std::vector<uint8_t> p(256, e5_one), q(256, e4_one);
  p[5] = e5_inf;
  EXPECT_EQ(hopper_dot(p.data(), kE5, q.data(), kE4, 256, kNeverPromote), inf);
  EXPECT_EQ(hopper_dot(p.data(), kE5, q.data(), kE4, 256, 128), inf);
  p[200] = e5_ninf;  // another group: +Inf + -Inf at promotion
  EXPECT_TRUE(std::isnan(hopper_dot(p.data(), kE5, q.data(), kE4, 256, 128)));
  EXPECT_TRUE(std::isnan(hopper_dot(p.data(), kE5, q.data(), kE4, 256, kNeverPromote)));
}

// E5M2 x E4M3: 5 fraction bits in the product instead of 6, a wider exponent range, and symmetry in the
// operand order.
TEST(HopperAccum, MixedE5M2TimesE4M3) {
  // 57344 * 448: beyond any E4M3 x E4M3 product, exact.
  EXPECT_EQ(block(kE5, codes_of(kE5, {57344.0f}), kE4, codes_of(kE4, {448.0f})), 25690112.0f);
  // 1.75 * 2^-12 (E5M2) * 1.875 (E4M3) = 3.28125 * 2^-12 = 6.5625 units of 2^-13 at E = 0 -> 6 units.
  EXPECT_EQ(block(kE5, codes_of(kE5, {1.0f, 1.75f * std::ldexp(1.0f, -12)}), kE4, codes_of(kE4, {1.0f, 1.875f})),
            1.0f + 6 * std::ldexp(1.0f, -13));
  // E5M2 subnormal 2^-16 (exponent -14) times 448 (exponent 8): exponent -6, value 448 * 2^-16 exact.
  EXPECT_EQ(block(kE5, {0x01}, kE4, codes_of(kE4, {448.0f})), 448.0f * std::ldexp(1.0f, -16));
  // The operand order does not matter.
  for (uint64_t seed = 10; seed < 60; ++seed) {
    const std::vector<uint8_t> x = random_codes(kE5, 32, seed), y = random_codes(kE4, 32, seed + 1000);
    EXPECT_EQ(float_bits(block(kE5, x, kE4, y, 0.5f)), float_bits(block(kE4, y, kE5, x, 0.5f))) << seed;
  }
}

// ---- vector files --------------------------------------------------------------------------------
namespace {

class VectorFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("fp8train_accum_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A well-formed file: M=2, N=3, K=32, given formats and mode, D computed by the model.
  static std::vector<uint8_t> good_bytes(uint8_t format_a = 0, uint8_t format_b = 0, uint8_t mode = 1) {
    const uint32_t m = 2, n = 3, k = 32;
    std::vector<uint8_t> bytes(24);
    std::memcpy(bytes.data(), "FP8ACC01", 8);
    for (int i = 0; i < 4; ++i) {
      bytes[8 + i] = static_cast<uint8_t>(m >> (8 * i));
      bytes[12 + i] = static_cast<uint8_t>(n >> (8 * i));
      bytes[16 + i] = static_cast<uint8_t>(k >> (8 * i));
    }
    bytes[20] = format_a;
    bytes[21] = format_b;
    bytes[22] = mode;
    const Fp8Format fa = format_a == 1 ? kE5 : kE4, fb = format_b == 1 ? kE5 : kE4;
    const std::vector<uint8_t> a = random_codes(fa, m * k, 11), b = random_codes(fb, n * k, 12);
    bytes.insert(bytes.end(), a.begin(), a.end());
    bytes.insert(bytes.end(), b.begin(), b.end());
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        const float d = hopper_dot(&a[i * k], fa, &b[j * k], fb, k, mode ? 128 : kNeverPromote);
        uint8_t raw[4];
        std::memcpy(raw, &d, 4);  // little endian host
        bytes.insert(bytes.end(), raw, raw + 4);
      }
    }
    return bytes;
  }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

  // read_accum_vector must throw an Error whose message names the file and contains `problem`.
  static void expect_rejected(const std::string& path, const std::string& problem) {
    try {
      (void)read_accum_vector(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const fp8train::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << "message does not name the file: " << what;
      EXPECT_NE(what.find(problem), std::string::npos) << "message does not say '" << problem << "': " << what;
    }
  }

  fs::path dir_;
};

}  // namespace

TEST_F(VectorFiles, WellFormedFileReadsBack) {
  const std::vector<uint8_t> bytes = good_bytes(1, 0, 0);
  const AccumVector v = read_accum_vector(write("good.bin", bytes));
  EXPECT_EQ(v.m, 2u);
  EXPECT_EQ(v.n, 3u);
  EXPECT_EQ(v.k, 32u);
  EXPECT_EQ(v.format_a, kE5);
  EXPECT_EQ(v.format_b, kE4);
  EXPECT_FALSE(v.promote);
  ASSERT_EQ(v.a.size(), 64u);
  ASSERT_EQ(v.b.size(), 96u);
  ASSERT_EQ(v.d.size(), 6u);
  EXPECT_EQ(0, std::memcmp(v.a.data(), &bytes[24], 64));
  EXPECT_EQ(0, std::memcmp(v.b.data(), &bytes[24 + 64], 96));
  EXPECT_EQ(0, std::memcmp(v.d.data(), &bytes[24 + 64 + 96], 24));
  const AccumCheck c = check_accum_vector(v);
  EXPECT_EQ(c.matched, 6u);
  EXPECT_EQ(c.total, 6u);
}

TEST_F(VectorFiles, OneWrongOutputIsCounted) {
  std::vector<uint8_t> bytes = good_bytes();
  bytes[bytes.size() - 4] ^= 1;  // lowest mantissa bit of the last D element
  const AccumCheck c = check_accum_vector(read_accum_vector(write("off_by_one_ulp.bin", bytes)));
  EXPECT_EQ(c.matched, 5u);
  EXPECT_EQ(c.total, 6u);
}

TEST_F(VectorFiles, MalformedFilesAreRejectedByName) {
  const std::vector<uint8_t> good = good_bytes();
  expect_rejected((dir_ / "missing.bin").string(), "cannot open");
  expect_rejected(write("empty.bin", {}), "truncated header");
  expect_rejected(write("short_header.bin", std::vector<uint8_t>(good.begin(), good.begin() + 10)),
                  "truncated header");
  std::vector<uint8_t> bad_magic = good;
  bad_magic[7] = '2';
  expect_rejected(write("bad_magic.bin", bad_magic), "bad magic");
  expect_rejected(write("truncated.bin", std::vector<uint8_t>(good.begin(), good.end() - 1)), "truncated or padded");
  expect_rejected(write("header_only.bin", std::vector<uint8_t>(good.begin(), good.begin() + 24)),
                  "truncated or padded");
  std::vector<uint8_t> padded = good;
  padded.push_back(0);
  expect_rejected(write("padded.bin", padded), "truncated or padded");
  std::vector<uint8_t> zero_m = good;
  zero_m[8] = 0;
  expect_rejected(write("zero_m.bin", zero_m), "implausible shape");
  std::vector<uint8_t> huge_k = good;
  huge_k[19] = 0x7F;
  expect_rejected(write("huge_k.bin", huge_k), "implausible shape");
  std::vector<uint8_t> bad_format = good;
  bad_format[21] = 2;
  expect_rejected(write("bad_format.bin", bad_format), "operand format");
  std::vector<uint8_t> bad_mode = good;
  bad_mode[22] = 7;
  expect_rejected(write("bad_mode.bin", bad_mode), "unknown mode");
  // Random garbage with the right length is still caught by its magic.
  std::vector<uint8_t> garbage = random_codes(kE4, good.size(), 99);
  expect_rejected(write("garbage.bin", garbage), "bad magic");
}
