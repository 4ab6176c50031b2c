// The lab's dot-product adapter (lab/lab_dot.h) against the numerics and quant layers: where the adapter
// claims to be num::hopper_dot / num::hopper_dot_scaled / quant::ref_gemm it must be so bit for bit; the
// carried chain reduces to the plain chain when the scale does not change; INT8 and FP64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "lab/lab_dot.h"
#include "lab/sample_random.h"
#include "lab/snr_internal.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "quant/ref_gemm.h"

using namespace fp8train;
using lab::Fp8Operand;

namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::vector<uint8_t> random_codes(lab::CounterRng& rng, int64_t n, double sigma) {
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (auto& x : c) x = num::e4m3_encode(static_cast<float>(sigma * rng.normal()));
  return c;
}

}  // namespace

TEST(LabDot, PerTensorIsHopperDotTimesScales) {
  lab::CounterRng rng(11);
  for (int64_t k : {32, 100, 1024, 4096}) {
    const auto a = random_codes(rng, k, 40), b = random_codes(rng, k, 40);
    const float sa = 0.37f, sb = 1.9f;
    for (int p : {32, 128, 256, num::kNeverPromote}) {
      const float expect =
          (sa * sb) * num::hopper_dot(a.data(), num::Fp8Format::E4M3, b.data(), num::Fp8Format::E4M3,
                                      static_cast<int>(k), p);
      const float got = lab::hopper_dot_grouped({a.data(), num::Fp8Format::E4M3, &sa},
                                                {b.data(), num::Fp8Format::E4M3, &sb}, k, k, p);
      EXPECT_EQ(bits(got), bits(expect)) << "k=" << k << " P=" << p;
    }
  }
}

TEST(LabDot, PromotionDividingTheGroupIsHopperDotScaled) {
  lab::CounterRng rng(12);
  const int64_t k = 2048, group = 128;
  const auto a = random_codes(rng, k, 30), b = random_codes(rng, k, 30);
  std::vector<float> sa(k / group), sb(k / group);
  for (size_t g = 0; g < sa.size(); ++g) {
    sa[g] = static_cast<float>(0.01 + rng.uniform());
    sb[g] = static_cast<float>(0.01 + rng.uniform());
  }
  for (int p : {32, 64, 128}) {
    // hopper_dot_scaled takes one scale per promotion group: expand the per-128 scales.
    std::vector<float> pa, pb;
    for (int64_t g = 0; g < k / p; ++g) {
      pa.push_back(sa[g * p / group]);
      pb.push_back(sb[g * p / group]);
    }
    const float expect = num::hopper_dot_scaled(a.data(), num::Fp8Format::E4M3, pa.data(), b.data(),
                                                num::Fp8Format::E4M3, pb.data(), static_cast<int>(k), p);
    const float got = lab::hopper_dot_grouped({a.data(), num::Fp8Format::E4M3, sa.data()},
                                              {b.data(), num::Fp8Format::E4M3, sb.data()}, k, group, p);
    EXPECT_EQ(bits(got), bits(expect)) << "P=" << p;
  }
}

TEST(LabDot, CarriedChainWithConstantPowerOfTwoScalesIsThePlainChain) {
  // With the same power-of-two scale in every group, re-expressing the chain is exact, so the carried chain
  // over 1x32 tiles must equal one unscaled chain (times the scale) for every promotion interval.
  lab::CounterRng rng(13);
  const int64_t k = 4096;
  const auto a = random_codes(rng, k, 20), b = random_codes(rng, k, 20);
  const std::vector<float> sa(k / 32, 0.25f), sb(k / 32, 8.0f);
  for (int p : {64, 128, 1024, num::kNeverPromote}) {
    const float plain =
        num::hopper_dot(a.data(), num::Fp8Format::E4M3, b.data(), num::Fp8Format::E4M3, static_cast<int>(k), p);
    const float got = lab::hopper_dot_grouped({a.data(), num::Fp8Format::E4M3, sa.data()},
                                              {b.data(), num::Fp8Format::E4M3, sb.data()}, k, 32, p);
    EXPECT_EQ(bits(got), bits(2.0f * plain)) << "P=" << p;
  }
}

TEST(LabDot, CarriedChainDiffersFromPromotingEveryTile) {
  // Correlated (all-positive) products: never promoting truncates against a growing sum, so with per-tile
  // scales the carried chain must be less accurate than promoting every 32 — the effect the study measures.
  lab::CounterRng rng(14);
  const int64_t k = 4096;
  std::vector<uint8_t> a(k), b(k);
  double exact = 0;
  std::vector<float> sa(k / 32), sb(k / 32);
  for (int64_t g = 0; g < k / 32; ++g) {
    sa[g] = std::ldexp(1.0f, static_cast<int>(rng.below(5)) - 2);
    sb[g] = 1.0f;
  }
  for (int64_t i = 0; i < k; ++i) {
    a[i] = num::e4m3_encode(static_cast<float>(1.0 + rng.uniform()));
    b[i] = num::e4m3_encode(static_cast<float>(1.0 + rng.uniform()));
    exact += static_cast<double>(num::e4m3_decode(a[i])) * num::e4m3_decode(b[i]) * sa[i / 32];
  }
  const float never = lab::hopper_dot_grouped({a.data(), num::Fp8Format::E4M3, sa.data()},
                                              {b.data(), num::Fp8Format::E4M3, sb.data()}, k, 32,
                                              num::kNeverPromote);
  const float every32 = lab::hopper_dot_grouped({a.data(), num::Fp8Format::E4M3, sa.data()},
                                                {b.data(), num::Fp8Format::E4M3, sb.data()}, k, 32, 32);
  EXPECT_GT(std::fabs(never - exact), 10 * std::fabs(every32 - exact));
  EXPECT_LT(std::fabs(never - exact) / exact, 0.2);  // still a sensible value
}

TEST(LabDot, AdapterMatchesTheReferenceGemmBitForBit) {
  // The configurations where lab_dot.h promises quant::ref_gemm's bits: 1x128 x 128x128 with P | 128,
  // per-tensor with any P, INT8 tiles and per-tensor. Rows of A against rows of B through LabOperands.
  lab::CounterRng rng(15);
  const int64_t m = 3, n = 5, k = 1024;
  const std::vector<float> x = lab::normal_vector(rng, m * k), w = lab::normal_vector(rng, n * k, 0.05);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) pairs.emplace_back(i, j);
  struct Case {
    quant::Format format;
    std::string a_scaling, b_scaling;
    int promote;
  };
  const std::vector<Case> cases = {
      {quant::Format::E4M3, "1x128", "128x128", 128}, {quant::Format::E4M3, "1x128", "128x128", 32},
      {quant::Format::E4M3, "tensor", "tensor", 128}, {quant::Format::E4M3, "tensor", "tensor", num::kNeverPromote},
      {quant::Format::E5M2, "1x128", "128x128", 64},  {quant::Format::INT8, "1x128", "128x128", 128},
      {quant::Format::INT8, "tensor", "tensor", 128},
  };
  for (const auto& c : cases) {
    const auto la = lab::detail::quantize_operand(x, m, k, c.format, c.a_scaling, false);
    const auto lb = lab::detail::quantize_operand(w, n, k, c.format, c.b_scaling, false);
    const quant::QTensor qa =
        quant::quantize(x, m, k, {c.format, quant::parse_granularity(c.a_scaling), quant::ScaleMode::Amax});
    const quant::QTensor qb =
        quant::quantize(w, n, k, {c.format, quant::parse_granularity(c.b_scaling), quant::ScaleMode::Amax});
    quant::GemmConfig g;
    g.mode = quant::AccumMode::Hopper;
    g.promote_interval = c.promote;
    const std::vector<float> d = quant::ref_gemm(qa, qb, g);
    const lab::detail::Accumulation acc =
        c.format == quant::Format::INT8 ? lab::detail::Accumulation{"int32", -1} : lab::detail::Accumulation{"hopper", c.promote};
    const std::vector<float> mine = lab::detail::quantized_dots(la, lb, pairs, acc);
    for (size_t p = 0; p < pairs.size(); ++p)
      EXPECT_EQ(bits(mine[p]), bits(d[p])) << quant::format_name(c.format) << " " << c.a_scaling << " P="
                                          << c.promote << " output " << p;
  }
}

TEST(LabDot, RowTilesOfAnyScalingKeepTheProducts) {
  // as_row_tiles re-expresses per-tensor and 128x128 activation scales as 1x128 tiles; through ref_gemm the
  // products must equal the adapter's on the original operand.
  lab::CounterRng rng(16);
  const int64_t m = 130, n = 4, k = 512;
  const std::vector<float> x = lab::normal_vector(rng, m * k), w = lab::normal_vector(rng, n * k);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) pairs.emplace_back(i, j);
  const auto lw = lab::detail::quantize_operand(w, n, k, quant::Format::E4M3, "128x128", false);
  const quant::QTensor qw =
      quant::quantize(w, n, k, {quant::Format::E4M3, quant::Granularity::block_128x128(), quant::ScaleMode::Amax});
  for (const std::string scaling : {"tensor", "128x128", "1x128"}) {
    const auto lx = lab::detail::quantize_operand(x, m, k, quant::Format::E4M3, scaling, false);
    quant::GemmConfig g;
    g.mode = quant::AccumMode::Hopper;
    g.promote_interval = 128;
    const std::vector<float> d = quant::ref_gemm(lab::detail::as_row_tiles(lx, 128), qw, g);
    const std::vector<float> mine = lab::detail::quantized_dots(lx, lw, pairs, {"hopper", 128});
    for (size_t p = 0; p < pairs.size(); ++p) ASSERT_EQ(bits(mine[p]), bits(d[p])) << scaling << " output " << p;
  }
}

TEST(LabDot, Int8GroupsAreExactIntegers) {
  const std::vector<int8_t> a = {127, -127, 5, 3}, b = {127, 127, -2, 7};
  const float s1 = 1.0f;
  EXPECT_EQ(lab::int8_dot_grouped({a.data(), &s1}, {b.data(), &s1}, 4, 4), 127.0f * 127 - 127 * 127 - 10 + 21);
  const std::vector<float> sa = {0.5f, 2.0f}, sb = {1.0f, 0.25f};
  // groups of 2: (127*127 - 127*127) * 0.5 + (-10 + 21) * 0.5
  EXPECT_EQ(lab::int8_dot_grouped({a.data(), sa.data()}, {b.data(), sb.data()}, 4, 2), 5.5f);
}

TEST(LabDot, ExactDotSurvivesCancellation) {
  const std::vector<float> a = {1e8f, 1.0f, -1e8f, 3.0f}, b = {1.0f, 1.0f, 1.0f, 0.5f};
  EXPECT_EQ(lab::exact_dot(a.data(), b.data(), 4), 2.5);
}

TEST(LabDot, BadArgumentsThrow) {
  const std::vector<uint8_t> a(64, 0x38);
  const float s = 1.0f;
  const Fp8Operand op{a.data(), num::Fp8Format::E4M3, &s};
  EXPECT_THROW(lab::hopper_dot_grouped(op, op, 64, 64, 48), Error);   // promotion not a multiple of 32
  EXPECT_THROW(lab::hopper_dot_grouped(op, op, 64, 16, 32), Error);   // tiles smaller than a 32-block
  EXPECT_THROW(lab::hopper_dot_grouped(op, op, 64, 0, 32), Error);    // empty group
  EXPECT_THROW(lab::fp32_dot_grouped(op, op, -1, 32), Error);
}
