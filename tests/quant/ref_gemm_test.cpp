// Reference block-scaled GEMM: hopper mode against num::hopper_dot_scaled / num::hopper_dot element by
// element (ragged M/N, K not a multiple of 128 or 32), the "promotion interval > scale block" model against
// an independent implementation, exact mode against an FP64 product, fp32 mode, INT8, BF16 output,
// accumulate-into-C, SIMD == scalar paths, and bad input.
//   A: [M, K], B: [N, K] (row-major, K-major), D: [M, N].
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"
#include "quant/ref_gemm_detail.h"
#include "../common/random_data.h"

using namespace fp8train;
using namespace fp8train::quant;

namespace {

using fp8train::test_data::randn;

// Random matrix whose rows/blocks have very different magnitudes, so block scales differ.
std::vector<float> randn_wide(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v = randn(rows * cols, seed);
  std::mt19937_64 rng(seed ^ 0xABCDEF);
  std::uniform_int_distribution<int> e(-6, 6);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += 64) {
      const float s = std::ldexp(1.0f, e(rng));
      for (int64_t c = c0; c < std::min(cols, c0 + 64); ++c) v[static_cast<size_t>(r * cols + c)] *= s;
    }
  }
  return v;
}

QTensor q(const std::vector<float>& x, int64_t rows, int64_t cols, Format f, Granularity g,
              ScaleMode mode = ScaleMode::Amax) {
  QuantSpec c;
  c.format = f;
  c.granularity = g;
  c.scale_mode = mode;
  return quantize(x, rows, cols, c);
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

num::Fp8Format fp8(Format f) { return f == Format::E4M3 ? num::Fp8Format::E4M3 : num::Fp8Format::E5M2; }

const uint8_t* row(const QTensor& t, int64_t r) { return t.code_ptr() + r * t.cols; }

// Expected hopper output of a block-scaled pair through num::hopper_dot_scaled (P divides G).
float expected_hopper_block(const QTensor& a, const QTensor& b, int64_t i, int64_t j, int P) {
  const int64_t K = a.cols, G = a.granularity().block_cols;
  const int64_t groups = (K + P - 1) / P;
  std::vector<float> sa(static_cast<size_t>(groups)), sb(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    sa[static_cast<size_t>(g)] = a.scale_of(i, g * P / G * G);
    sb[static_cast<size_t>(g)] = b.scale_of(j, g * P / G * G);
  }
  return num::hopper_dot_scaled(row(a, i), fp8(a.format()), sa.data(), row(b, j), fp8(b.format()), sb.data(),
                                static_cast<int>(K), P);
}

// An FP22 adder written independently (double arithmetic with trunc) for the P > G model.
float fp22_add_independent(float x, float y) {
  if (x == 0.0f && y == 0.0f) return x + y;
  const int ex = x == 0.0f ? std::numeric_limits<int>::min() : std::ilogb(x);
  const int ey = y == 0.0f ? std::numeric_limits<int>::min() : std::ilogb(y);
  const double unit = std::ldexp(1.0, std::max(ex, ey) - 13);
  const double s = std::trunc(x / unit) * unit + std::trunc(y / unit) * unit;
  if (s == 0.0) return 0.0f;
  const double q = std::ldexp(1.0, std::ilogb(s) - 13);
  return static_cast<float>(std::trunc(s / q) * q);
}

// The P > G (or never) model for one element, from num::hopper_block and the independent adder.
float expected_pending_model(const QTensor& a, const QTensor& b, int64_t i, int64_t j, int P) {
  const int64_t K = a.cols, G = a.granularity().block_cols;
  float acc = 0.0f, pending = 0.0f;
  for (int64_t g0 = 0; g0 < K; g0 += G) {
    const int64_t g1 = std::min(K, g0 + G);
    float chain = 0.0f;
    for (int64_t k0 = g0; k0 < g1; k0 += 32)
      chain = num::hopper_block(row(a, i) + k0, fp8(a.format()), row(b, j) + k0, fp8(b.format()),
                                static_cast<int>(std::min<int64_t>(32, g1 - k0)), chain);
    const float s = a.scale_of(i, g0) * b.scale_of(j, g0);
    pending = fp22_add_independent(pending, s * chain);
    if ((P != 0 && g1 % P == 0) || g1 == K) {
      acc = acc + pending;
      pending = 0.0f;
    }
  }
  return acc;
}

struct GemmShape {
  int64_t m, n, k;
};
const GemmShape kShapes[] = {{37, 45, 300}, {16, 16, 256}, {5, 33, 1000}, {20, 17, 31}, {3, 130, 128}};

}  // namespace

TEST(RefGemmHopper, BlockScaledEqualsHopperDotScaled) {
  uint64_t seed = 1;
  for (const GemmShape& s : kShapes) {
    for (Format fb : {Format::E4M3, Format::E5M2}) {
      const QTensor a = q(randn_wide(s.m, s.k, seed++), s.m, s.k, Format::E4M3, Granularity::tile_1x128());
      const QTensor b128 = q(randn_wide(s.n, s.k, seed++), s.n, s.k, fb, Granularity::block_128x128());
      const QTensor b1 = q(randn_wide(s.n, s.k, seed++), s.n, s.k, fb, Granularity::tile_1x128());
      for (const QTensor* b : {&b128, &b1}) {
        for (int P : {32, 64, 128}) {
          GemmConfig cfg;
          cfg.mode = AccumMode::Hopper;
          cfg.promote_interval = P;
          const std::vector<float> d = ref_gemm(a, *b, cfg);
          int64_t mismatches = 0;
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j)
              mismatches += bits(d[static_cast<size_t>(i * s.n + j)]) != bits(expected_hopper_block(a, *b, i, j, P));
          EXPECT_EQ(mismatches, 0) << "M=" << s.m << " N=" << s.n << " K=" << s.k << " P=" << P << " B "
                                   << b->granularity().name() << " " << format_name(fb);
        }
      }
    }
  }
}

TEST(RefGemmHopper, PerTensorEqualsHopperDot) {
  uint64_t seed = 100;
  for (const GemmShape& s : kShapes) {
    // Unit-range values, per-tensor scales that are not 1, so the epilogue scale is exercised.
    const QTensor a = q(randn(s.m * s.k, seed++, 3.0f), s.m, s.k, Format::E4M3, Granularity::tensor());
    const QTensor b = q(randn(s.n * s.k, seed++, 0.5f), s.n, s.k, Format::E4M3, Granularity::tensor());
    ASSERT_NE(a.scale_ptr()[0], 1.0f);
    for (int P : {0, 32, 96, 128, 4096}) {
      GemmConfig cfg;
      cfg.mode = AccumMode::Hopper;
      cfg.promote_interval = P;
      const std::vector<float> d = ref_gemm(a, b, cfg);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          const float acc = num::hopper_dot(row(a, i), num::Fp8Format::E4M3, row(b, j), num::Fp8Format::E4M3,
                                            static_cast<int>(s.k), P);
          mismatches += bits(d[static_cast<size_t>(i * s.n + j)]) != bits((a.scale_ptr()[0] * b.scale_ptr()[0]) * acc);
        }
      EXPECT_EQ(mismatches, 0) << "M=" << s.m << " N=" << s.n << " K=" << s.k << " P=" << P;
    }
  }
}

TEST(RefGemmHopper, PromotionLongerThanScaleBlockFollowsPendingModel) {
  uint64_t seed = 200;
  for (const GemmShape& s : {GemmShape{19, 21, 700}, GemmShape{8, 40, 512}}) {
    const QTensor a = q(randn_wide(s.m, s.k, seed++), s.m, s.k, Format::E4M3, Granularity::row_tile(64));
    const QTensor b = q(randn_wide(s.n, s.k, seed++), s.n, s.k, Format::E4M3, Granularity::block(64));
    for (int P : {0, 128, 256}) {
      for (bool scalar : {false, true}) {
        GemmConfig cfg;
        cfg.mode = AccumMode::Hopper;
        cfg.promote_interval = P;
        cfg.force_scalar = scalar;
        const std::vector<float> d = ref_gemm(a, b, cfg);
        int64_t mismatches = 0;
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j)
            mismatches += bits(d[static_cast<size_t>(i * s.n + j)]) != bits(expected_pending_model(a, b, i, j, P));
        EXPECT_EQ(mismatches, 0) << "K=" << s.k << " P=" << P << " scalar=" << scalar;
      }
    }
  }
}

TEST(RefGemmHopper, Fp22AddMatchesIndependentAdder) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> n01;
  std::uniform_int_distribution<int> e(-30, 30);
  for (int t = 0; t < 200000; ++t) {
    const float x = std::ldexp(n01(rng), e(rng)), y = t % 7 == 0 ? 0.0f : std::ldexp(n01(rng), e(rng));
    ASSERT_EQ(bits(fp22_add(x, y)), bits(fp22_add_independent(x, y))) << x << " + " << y;
  }
  EXPECT_EQ(fp22_add(1.0f, std::ldexp(1.0f, -14)), 1.0f);  // below the 13th fraction bit: truncated away
  EXPECT_EQ(fp22_add(1.0f, std::ldexp(1.0f, -13)), 1.0f + std::ldexp(1.0f, -13));
  EXPECT_TRUE(std::isnan(fp22_add(1.0f, std::numeric_limits<float>::quiet_NaN())));
}

TEST(RefGemmHopper, SimdEqualsScalarAndSpecialRowsAreRecomputed) {
  const int64_t M = 24, N = 35, K = 384;
  QTensor a = q(randn_wide(M, K, 300), M, K, Format::E4M3, Granularity::tile_1x128());
  const QTensor b = q(randn_wide(N, K, 301), N, K, Format::E4M3, Granularity::block_128x128());
  a.code_ptr()[static_cast<size_t>(5 * K + 77)] = 0x7F;  // NaN code in row 5
  for (int P : {0, 128, 256}) {
    GemmConfig cfg;
    cfg.mode = AccumMode::Hopper;
    cfg.promote_interval = P;
    const std::vector<float> fast = ref_gemm(a, b, cfg);
    cfg.force_scalar = true;
    const std::vector<float> slow = ref_gemm(a, b, cfg);
    for (size_t idx = 0; idx < fast.size(); ++idx) {
      if (static_cast<int64_t>(idx) / N == 5) {
        EXPECT_TRUE(std::isnan(fast[idx]) && std::isnan(slow[idx]));
      } else {
        ASSERT_EQ(bits(fast[idx]), bits(slow[idx])) << "P=" << P << " idx " << idx;
      }
    }
  }
}

TEST(RefGemmExact, MatchesFp64ProductAndItsFormula) {
  const int64_t M = 33, N = 29, K = 520;
  for (Format fb : {Format::E4M3, Format::E5M2}) {
    const QTensor a = q(randn_wide(M, K, 400), M, K, Format::E4M3, Granularity::tile_1x128());
    const QTensor b = q(randn_wide(N, K, 401), N, K, fb, Granularity::block_128x128());
    GemmConfig cfg;  // exact
    const std::vector<float> d = ref_gemm(a, b, cfg);
    const std::vector<float> av = dequantize(a), bv = dequantize(b);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0.0, mag = 0.0;
        float formula = 0.0f;
        for (int64_t g0 = 0; g0 < K; g0 += 128) {
          double part = 0.0;
          for (int64_t k = g0; k < std::min(K, g0 + 128); ++k) part += double(a.decoded_at(i, k)) * b.decoded_at(j, k);
          formula = std::fma(a.scale_of(i, g0) * b.scale_of(j, g0), static_cast<float>(part), formula);
        }
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(av[static_cast<size_t>(i * K + k)]) * bv[static_cast<size_t>(j * K + k)];
          ref += p;
          mag += std::fabs(p);
        }
        const float got = d[static_cast<size_t>(i * N + j)];
        ASSERT_EQ(bits(got), bits(formula)) << i << "," << j;
        // FP32 promotion only: a few float ulps of the magnitude sum (5 groups).
        EXPECT_LE(std::fabs(got - ref), 8 * std::ldexp(mag, -24) + 1e-30) << i << "," << j;
      }
  }
}

TEST(RefGemmExact, PerTensorUses128Blocks) {
  const int64_t M = 9, N = 11, K = 300;
  const QTensor a = q(randn(M * K, 500, 2.0f), M, K, Format::E4M3, Granularity::tensor());
  const QTensor b = q(randn(N * K, 501, 2.0f), N, K, Format::E4M3, Granularity::tensor());
  const std::vector<float> d = ref_gemm(a, b, GemmConfig{});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t g0 = 0; g0 < K; g0 += kExactBlockK) {
        double part = 0.0;
        for (int64_t k = g0; k < std::min(K, g0 + kExactBlockK); ++k)
          part += double(a.decoded_at(i, k)) * b.decoded_at(j, k);
        acc = std::fma(1.0f, static_cast<float>(part), acc);
      }
      EXPECT_EQ(bits(d[static_cast<size_t>(i * N + j)]), bits((a.scale_ptr()[0] * b.scale_ptr()[0]) * acc));
    }
}

TEST(RefGemmFp32, OrderedFmaOverDequantizedValuesSimdAndScalar) {
  const int64_t M = 23, N = 37, K = 200;
  const QTensor a = q(randn_wide(M, K, 600), M, K, Format::E4M3, Granularity::tile_1x128());
  const QTensor b = q(randn_wide(N, K, 601), N, K, Format::E5M2, Granularity::tile_1x128());
  GemmConfig cfg;
  cfg.mode = AccumMode::Fp32;
  const std::vector<float> fast = ref_gemm(a, b, cfg);
  cfg.force_scalar = true;
  const std::vector<float> slow = ref_gemm(a, b, cfg);
  const std::vector<float> av = dequantize(a), bv = dequantize(b);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s = std::fma(av[static_cast<size_t>(i * K + k)], bv[static_cast<size_t>(j * K + k)], s);
      ASSERT_EQ(bits(fast[static_cast<size_t>(i * N + j)]), bits(s));
      ASSERT_EQ(bits(slow[static_cast<size_t>(i * N + j)]), bits(s));
    }
}

TEST(RefGemmInt8, ExactIntegerGroupsThenFp32Promotion) {
  const int64_t M = 13, N = 18, K = 333;
  const QTensor a = q(randn_wide(M, K, 700), M, K, Format::INT8, Granularity::tile_1x128());
  const QTensor b = q(randn_wide(N, K, 701), N, K, Format::INT8, Granularity::block_128x128());
  GemmConfig exact, hopper;
  hopper.mode = AccumMode::Hopper;
  const std::vector<float> d = ref_gemm(a, b, exact), h = ref_gemm(a, b, hopper);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t g0 = 0; g0 < K; g0 += 128) {
        int32_t part = 0;
        for (int64_t k = g0; k < std::min(K, g0 + 128); ++k)
          part += static_cast<int8_t>(a.code_at(i, k)) * static_cast<int8_t>(b.code_at(j, k));
        acc = std::fma(a.scale_of(i, g0) * b.scale_of(j, g0), static_cast<float>(part), acc);
      }
      ASSERT_EQ(bits(d[static_cast<size_t>(i * N + j)]), bits(acc));
      ASSERT_EQ(bits(h[static_cast<size_t>(i * N + j)]), bits(acc));
    }
}

TEST(RefGemmEpilogue, Bf16OutputRoundsToNearestEven) {
  const int64_t M = 17, N = 19, K = 256;
  const QTensor a = q(randn(M * K, 800), M, K, Format::E4M3, Granularity::tile_1x128());
  const QTensor b = q(randn(N * K, 801), N, K, Format::E4M3, Granularity::block_128x128());
  for (AccumMode mode : {AccumMode::Exact, AccumMode::Hopper, AccumMode::Fp32}) {
    GemmConfig cfg;
    cfg.mode = mode;
    const std::vector<float> d = ref_gemm(a, b, cfg);
    std::vector<uint16_t> h(static_cast<size_t>(M * N));
    ref_gemm_bf16(a, b, cfg, h.data());
    int64_t inexact = 0;
    for (size_t idx = 0; idx < d.size(); ++idx) {
      ASSERT_EQ(h[idx], num::bf16_encode(d[idx]));
      const float back = num::bf16_decode(h[idx]);
      inexact += back != d[idx];
      // Nearest: no BF16 value lies strictly closer (neighbours one BF16 ulp away).
      const float up = num::bf16_decode(static_cast<uint16_t>(h[idx] + 1));
      const float down = num::bf16_decode(static_cast<uint16_t>(h[idx] - 1));
      EXPECT_LE(std::fabs(back - d[idx]), std::fabs(up - d[idx]));
      EXPECT_LE(std::fabs(back - d[idx]), std::fabs(down - d[idx]));
    }
    EXPECT_GT(inexact, 0);  // the test really rounds
  }
  // A tie: 1 + 2^-8 lies halfway between BF16 1 and 1 + 2^-7 and rounds to even (1).
  EXPECT_EQ(num::bf16_encode(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
}

TEST(RefGemmEpilogue, AccumulateIntoC) {
  const int64_t M = 10, N = 21, K = 160;
  const QTensor a = q(randn(M * K, 900), M, K, Format::E4M3, Granularity::tensor());
  const QTensor b = q(randn(N * K, 901), N, K, Format::E4M3, Granularity::tensor());
  const std::vector<float> c = randn(M * N, 902, 10.0f);
  for (AccumMode mode : {AccumMode::Exact, AccumMode::Hopper, AccumMode::Fp32}) {
    GemmConfig cfg;
    cfg.mode = mode;
    const std::vector<float> plain = ref_gemm(a, b, cfg);
    cfg.accumulate = true;
    const std::vector<float> acc = ref_gemm(a, b, cfg, &c);
    for (size_t idx = 0; idx < plain.size(); ++idx) ASSERT_EQ(bits(acc[idx]), bits(c[idx] + plain[idx]));
    std::vector<uint16_t> h(plain.size());
    ref_gemm_bf16(a, b, cfg, h.data(), c.data());
    for (size_t idx = 0; idx < plain.size(); ++idx) ASSERT_EQ(h[idx], num::bf16_encode(c[idx] + plain[idx]));
  }
}

TEST(RefGemmErrors, BadInputThrows) {
  const auto x = randn(64 * 256, 1000);
  const QTensor a = q(x, 64, 256, Format::E4M3, Granularity::tile_1x128());
  const QTensor b_k = q(x, 128, 128, Format::E4M3, Granularity::block_128x128());      // K mismatch
  const QTensor b_col = q(x, 64, 256, Format::E4M3, Granularity::tile_128x1());        // wrong pair
  const QTensor b_t = q(x, 64, 256, Format::E4M3, Granularity::tensor());               // wrong pair
  const QTensor b_64 = q(x, 64, 256, Format::E4M3, Granularity::row_tile(64));          // G differs
  const QTensor b_i8 = q(x, 64, 256, Format::INT8, Granularity::tile_1x128());          // INT8 × FP8
  const QTensor b_e5m6 = q(x, 64, 256, Format::E5M6, Granularity::tile_1x128());
  const QTensor b_ok = q(x, 64, 256, Format::E4M3, Granularity::block_128x128());
  GemmConfig cfg;
  EXPECT_THROW(ref_gemm(a, b_k, cfg), Error);
  EXPECT_THROW(ref_gemm(a, b_col, cfg), Error);
  EXPECT_THROW(ref_gemm(a, b_t, cfg), Error);
  EXPECT_THROW(ref_gemm(a, b_64, cfg), Error);
  EXPECT_THROW(ref_gemm(a, b_i8, cfg), Error);
  EXPECT_NO_THROW(ref_gemm(a, b_e5m6, cfg));  // exact mode takes any float format
  cfg.mode = AccumMode::Hopper;
  EXPECT_THROW(ref_gemm(a, b_e5m6, cfg), Error);  // the Hopper model is FP8-only
  cfg.promote_interval = 48;
  EXPECT_THROW(ref_gemm(a, b_ok, cfg), Error);
  cfg.promote_interval = 96;  // neither divides 128 nor is a multiple of it
  EXPECT_THROW(ref_gemm(a, b_ok, cfg), Error);
  cfg.promote_interval = 128;
  cfg.accumulate = true;
  EXPECT_THROW(ref_gemm(a, b_ok, cfg, static_cast<const std::vector<float>*>(nullptr)), Error);
  std::vector<float> d(64 * 64);
  EXPECT_THROW(ref_gemm(a, b_ok, cfg, d.data(), nullptr), Error);
  const QTensor a48 = q(x, 64, 256, Format::E4M3, Granularity::row_tile(48));
  const QTensor b48 = q(x, 64, 256, Format::E4M3, Granularity::block(48));
  cfg = GemmConfig{};
  cfg.mode = AccumMode::Hopper;
  EXPECT_THROW(ref_gemm(a48, b48, cfg), Error);  // G = 48 is not a multiple of 32
  cfg.mode = AccumMode::Exact;
  EXPECT_NO_THROW(ref_gemm(a48, b48, cfg));
  EXPECT_THROW(parse_accum_mode("fp16"), Error);
  EXPECT_EQ(parse_accum_mode("hopper"), AccumMode::Hopper);
}

// The SIMD kernel's two product paths (exponent add when every lane's block exponent is <= T, exact
// multiply otherwise) give the model's bits; lowering T sends real blocks through the multiply path.
TEST(RefGemmHopper, SimdKernelBothProductPathsMatchTheModel) {
  const int64_t M = 9, N = 70, K = 520;
  for (Format fb : {Format::E4M3, Format::E5M2}) {
    const QTensor a = q(randn_wide(M, K, 1100), M, K, Format::E5M2, Granularity::tile_1x128());
    const QTensor b = q(randn_wide(N, K, 1101), N, K, fb, Granularity::block_128x128());
    for (int T : {58, -20, -60}) {
      for (int P : {0, 128}) {
        detail::HopperProblem p;
        p.m = M;
        p.n = N;
        p.k = K;
        p.a = a.code_ptr();
        p.b = b.code_ptr();
        p.fa = fp8(a.format());
        p.fb = fp8(b.format());
        p.sa = {a.scale_ptr(), 1, a.scale_cols(), false};
        p.sb = {b.scale_ptr(), 128, b.scale_cols(), false};
        p.per_tensor = false;
        p.group_k = 128;
        p.promote = P;
        p.fast_max_exp = T;
        std::vector<float> acc(static_cast<size_t>(M * N), -1.0f);
        if (!detail::hopper_gemm_simd(p, acc.data())) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j)
            ASSERT_EQ(bits(acc[static_cast<size_t>(i * N + j)]), bits(detail::hopper_element(p, i, j)))
                << "T=" << T << " P=" << P << " at " << i << "," << j;
      }
    }
  }
}

// Split-K (the CUDA dense kernel's few-row mode): per element exactly num::hopper_dot_scaled_split, i.e. the
// ranges' chains from zero added in range order; k_splits = 1 is the plain model; uneven ranges
// (floor(s * groups / S)) and S = groups (one K block per range) included.
TEST(RefGemmHopper, SplitKEqualsPerRangeChainsAddedInOrder) {
  const int64_t m = 9, n = 21, k = 7 * 128;
  const QTensor a = q(randn_wide(m, k, 71), m, k, Format::E4M3, Granularity::tile_1x128());
  const QTensor b = q(randn_wide(n, k, 72), n, k, Format::E4M3, Granularity::block_128x128());
  GemmConfig cfg;
  cfg.mode = AccumMode::Hopper;
  cfg.promote_interval = 128;
  const std::vector<float> plain = ref_gemm(a, b, cfg);
  for (int splits : {1, 2, 3, 7}) {
    cfg.k_splits = splits;
    const std::vector<float> d = ref_gemm(a, b, cfg);
    int64_t mismatches = 0, differs_from_plain = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        std::vector<float> sa(7), sb(7);
        for (int g = 0; g < 7; ++g) {
          sa[g] = a.scale_ptr()[static_cast<size_t>(i * 7 + g)];
          sb[g] = b.scale_ptr()[static_cast<size_t>((j / 128) * 7 + g)];
        }
        const float want = num::hopper_dot_scaled_split(row(a, i), num::Fp8Format::E4M3, sa.data(), row(b, j),
                                                        num::Fp8Format::E4M3, sb.data(), static_cast<int>(k), 128,
                                                        splits);
        // The definition spelled out: ranges [0,2) [2,4) [4,7) for 3 splits of 7 groups.
        if (splits == 3) {
          auto range = [&](int g0, int g1) {
            return num::hopper_dot_scaled(row(a, i) + g0 * 128, num::Fp8Format::E4M3, sa.data() + g0,
                                          row(b, j) + g0 * 128, num::Fp8Format::E4M3, sb.data() + g0,
                                          (g1 - g0) * 128, 128);
          };
          const float spelled = (range(0, 2) + range(2, 4)) + range(4, 7);
          EXPECT_EQ(bits(want), bits(spelled)) << i << "," << j;
        }
        const float got = d[static_cast<size_t>(i * n + j)];
        mismatches += bits(got) != bits(want);
        differs_from_plain += bits(got) != bits(plain[static_cast<size_t>(i * n + j)]);
      }
    EXPECT_EQ(mismatches, 0) << "k_splits " << splits;
    if (splits == 1) EXPECT_EQ(differs_from_plain, 0);
    else EXPECT_GT(differs_from_plain, 0) << "k_splits " << splits << " should change some roundings";
  }
  cfg.k_splits = 8;  // more ranges than K groups
  EXPECT_THROW(ref_gemm(a, b, cfg), Error);
  cfg.k_splits = 0;
  EXPECT_THROW(ref_gemm(a, b, cfg), Error);
}
