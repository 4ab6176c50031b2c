// The numerics-health sample of the Linears (recipe/health.h), observed on sampled steps only:
//   GEMM accuracy — each Linear GEMM against the FP32 reference on the unquantized operands, ‖Y − R‖_F / ‖R‖_F:
//   0 exactly for fp32; for bf16, Fprop and Dgrad carry the BF16 copy of W (and Fprop its BF16 output) while Wgrad
//   multiplies the BF16 activations and gradients exactly as the reference does (0); sampling leaves every GEMM
//   output bit-identical; promote=never is worse on a long Wgrad; dgrad_block=on is worse with an outlier token
//   (row-wise); fp8-tensorwise is worse than fp8-deepseek on an outlier channel;
//   operand health — saturation (stale delayed scales), underflow, the scale range.
// Shapes: x [T, in], W [out, in], dy [T, out]. The step context computes in the recipe's compute dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/random_data.h"
#include "linear_harness.h"
#include "quant/quant.h"

using namespace fp8train;
using namespace fp8train::model;
using namespace fp8train::model::testing;
using fp8train::recipe::gemm_kind_name;
using fp8train::recipe::GemmAccuracy;
using fp8train::recipe::GemmHealth;
using fp8train::recipe::GemmKind;
using fp8train::test_data::randn;

namespace {

struct LinearRun {
  std::vector<GemmHealth> health;
  std::vector<float> y, dx, dw;
};

// One sampled forward + backward of a Linear under `spec` (after `warm` unsampled steps, which fill
// fp8-tensorwise's amax histories). Health records by GEMM kind.
LinearRun run_linear(const std::string& spec, const std::vector<float>& x, const std::vector<float>& w,
                     const std::vector<float>& dy, int64_t tokens, int64_t in, int64_t out, bool sample = true,
                     int warm = 0) {
  Harness h(spec, in, out);
  h.set_weight(w);
  const DType dt = h.recipe.compute_dtype();
  const Tensor xt = as(x, tokens, in, dt), dyt = as(dy, tokens, out, dt);
  const Tensor y = Tensor::empty({tokens, out}, dt), dx = Tensor::empty({tokens, in}, dt);
  for (int s = 0; s <= warm; ++s) {
    const StepContext ctx = h.ctx(dt, s, sample && s == warm);
    h.zero_grad();
    const LinearInput in_ = h.lin.prepare(ctx, xt, true);
    h.lin.forward(ctx, in_, y);
    h.lin.backward(ctx, dyt, h.lin.kept(ctx, in_), dx, false);
  }
  return {h.health.take(), values(y), values(dx), h.lin.grad().to_vector<float>()};
}

const GemmHealth& find(const std::vector<GemmHealth>& h, GemmKind kind) {
  for (const GemmHealth& g : h)
    if (g.kind == kind) return g;
  throw std::runtime_error("no health record for " + std::string(gemm_kind_name(kind)));
}

double rel(const LinearRun& r, GemmKind kind) { return find(r.health, kind).accuracy.relative_error(); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(LinearHealth, Fp32IsExactlyZeroBf16IsNotAndSamplingChangesNothing) {
  const int64_t tokens = 96, in = 256, out = 192;
  const auto x = randn(tokens * in, 1), w = randn(out * in, 2, 0.05f), dy = randn(tokens * out, 3, 1e-3f);
  const LinearRun fp32 = run_linear("fp32", x, w, dy, tokens, in, out);
  ASSERT_EQ(fp32.health.size(), 3u);
  for (const GemmHealth& g : fp32.health) {
    SCOPED_TRACE(std::string(gemm_kind_name(g.kind)));
    EXPECT_FALSE(g.quantized);
    EXPECT_EQ(g.calls, 1);
    EXPECT_GT(g.accuracy.reference_sq, 0.0);
    EXPECT_EQ(g.accuracy.error_sq, 0.0);
    EXPECT_EQ(g.accuracy.relative_error(), 0.0);
    EXPECT_EQ(g.accuracy.row_relative_error(), 0.0);
    EXPECT_EQ(g.accuracy.rows, g.kind == GemmKind::Wgrad ? out : tokens);
  }
  const LinearRun bf16 = run_linear("bf16", x, w, dy, tokens, in, out);
  ASSERT_EQ(bf16.health.size(), 3u);
  for (const GemmHealth& g : bf16.health) {
    SCOPED_TRACE(std::string(gemm_kind_name(g.kind)));
    if (g.kind == GemmKind::Wgrad) {
      // dyᵀ·x of the BF16 activations and gradients in FP32: exactly the reference
      EXPECT_EQ(g.accuracy.relative_error(), 0.0);
      continue;
    }
    // The BF16 copy of W (8 significant bits; and Fprop's BF16 output): a relative error of a few 1e-3.
    EXPECT_GT(g.accuracy.relative_error(), 5e-4);
    EXPECT_LT(g.accuracy.relative_error(), 1e-2);
    EXPECT_GT(g.accuracy.row_relative_error(), 5e-4);
    EXPECT_LT(g.accuracy.row_relative_error(), 1e-2);
  }
  const LinearRun fp8 = run_linear("fp8-deepseek", x, w, dy, tokens, in, out);
  ASSERT_EQ(fp8.health.size(), 3u);
  for (const GemmHealth& g : fp8.health) {
    SCOPED_TRACE(std::string(gemm_kind_name(g.kind)));
    EXPECT_TRUE(g.quantized);
    if (g.kind != GemmKind::Wgrad) {
      EXPECT_GT(g.accuracy.relative_error(), 3 * find(bf16.health, g.kind).accuracy.relative_error());
    }
    EXPECT_GT(g.accuracy.relative_error(), 5e-3);  // FP8 operands: 3 or 4 significant bits
    EXPECT_LT(g.accuracy.relative_error(), 0.1);
  }
  // The sample is an observation only: the same GEMM outputs, bit for bit, with and without it.
  for (const char* spec : {"bf16", "fp8-deepseek", "fp8-tensorwise", "int8-blockwise"}) {
    SCOPED_TRACE(spec);
    const LinearRun on = run_linear(spec, x, w, dy, tokens, in, out, true, 1);
    const LinearRun off = run_linear(spec, x, w, dy, tokens, in, out, false, 1);
    EXPECT_TRUE(off.health.empty());
    EXPECT_TRUE(same_bits(on.y, off.y));
    EXPECT_TRUE(same_bits(on.dx, off.dx));
    EXPECT_TRUE(same_bits(on.dw, off.dw));
  }
}

// Wgrad reduces over the tokens. With 1×128 / 128×1 scales every 128-element group is its own chain, so
// "never" (ref_gemm.h) only stops the FP32 promotion of the group partials: they are summed in the truncating
// FP22 adder instead, losing up to an FP22 ulp of the running sum per group — a loss that grows with the number
// of groups, K / 128. Inputs with a non-zero mean (as activations after a norm and gain have) make the running
// sum grow, as in a real Wgrad.
TEST(LinearHealth, NoPromotionIsWorseOnALongWgrad) {
  const int64_t in = 128, out = 128;
  double ratio[2] = {0, 0};
  int i = 0;
  for (int64_t tokens : {4096, 16384}) {
    auto x = randn(tokens * in, 4), dy = randn(tokens * out, 5, 1e-3f);
    for (auto& v : x) v += 0.5f;
    for (auto& v : dy) v += 5e-4f;
    const auto w = randn(out * in, 6, 0.05f);
    const LinearRun promote = run_linear("fp8-deepseek", x, w, dy, tokens, in, out);
    const LinearRun never = run_linear("fp8-deepseek:promote=never", x, w, dy, tokens, in, out);
    const double e128 = rel(promote, GemmKind::Wgrad), enever = rel(never, GemmKind::Wgrad);
    std::printf("wgrad over %lld tokens: promote every 128 %.4e, never %.4e\n", static_cast<long long>(tokens), e128,
                enever);
    EXPECT_GT(enever, e128);
    ratio[i++] = enever / e128;
    // Fprop and Dgrad reduce over 128 (one group): no promotion only truncates the final sum to FP22 there.
    EXPECT_NEAR(rel(never, GemmKind::Fprop), rel(promote, GemmKind::Fprop), 1e-3 * rel(promote, GemmKind::Fprop));
    EXPECT_NEAR(rel(never, GemmKind::Dgrad), rel(promote, GemmKind::Dgrad), 1e-3 * rel(promote, GemmKind::Dgrad));
  }
  EXPECT_GT(ratio[0], 1.05);
  EXPECT_GT(ratio[1], 1.8);
  EXPECT_GT(ratio[1], ratio[0] * 1.5);
}

// One token whose gradient is 1e5× the others': with 1×128 tiles it has its own scale; in a 128×128 block it
// sets the scale of 127 other tokens, whose values fall below the smallest E4M3 subnormal (to zero or to it).
TEST(LinearHealth, BlockwiseDgradIsWorseWithAnOutlierToken) {
  const int64_t tokens = 256, in = 256, out = 256, outlier = 37;
  const auto x = randn(tokens * in, 7), w = randn(out * in, 8, 0.05f);
  auto dy = randn(tokens * out, 9, 1e-3f);
  for (int64_t c = 0; c < out; ++c) dy[outlier * out + c] *= 1e5f;
  const LinearRun tiles = run_linear("fp8-deepseek", x, w, dy, tokens, in, out);
  const LinearRun blocks = run_linear("fp8-deepseek:dgrad_block=on", x, w, dy, tokens, in, out);
  // The error of the rows that are not the outlier (the outlier row dominates ‖R‖ otherwise): recompute Dgrad's
  // reference here and compare row by row (dx is BF16: its rounding, 2^-9 relative, is far below what is measured).
  auto dgrad_rel_without_outlier = [&](const LinearRun& r) {
    double err = 0, ref = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      if (t == outlier) continue;
      for (int64_t i = 0; i < in; ++i) {
        double s = 0;
        for (int64_t o = 0; o < out; ++o) s += static_cast<double>(dy[t * out + o]) * w[o * in + i];
        err += (r.dx[t * in + i] - s) * (r.dx[t * in + i] - s);
        ref += s * s;
      }
    }
    return std::sqrt(err / ref);
  };
  const GemmAccuracy& at = find(tiles.health, GemmKind::Dgrad).accuracy;
  const GemmAccuracy& ab = find(blocks.health, GemmKind::Dgrad).accuracy;
  std::printf(
      "dgrad with an outlier token: Frobenius 1x128 %.4e, 128x128 %.4e; row-wise %.4e, %.4e; without the "
      "outlier row %.4e, %.4e\n",
      at.relative_error(), ab.relative_error(), at.row_relative_error(), ab.row_relative_error(),
      dgrad_rel_without_outlier(tiles), dgrad_rel_without_outlier(blocks));
  // Half the tokens share the outlier's block; their values land in the coarse subnormals or flush to zero.
  EXPECT_GT(ab.row_relative_error(), 0.1);
  EXPECT_GT(ab.row_relative_error(), 3 * at.row_relative_error());
  EXPECT_LT(at.row_relative_error(), 0.06);  // 1×128: every token at the usual FP8 error
  EXPECT_GT(dgrad_rel_without_outlier(blocks), 5 * dgrad_rel_without_outlier(tiles));
  // The Frobenius error is the outlier row's own: the same for both (the row dominates ‖R‖).
  EXPECT_NEAR(ab.relative_error(), at.relative_error(), 0.1 * at.relative_error());
  // Fprop and Wgrad do not use the Dgrad tiling.
  EXPECT_EQ(rel(tiles, GemmKind::Fprop), rel(blocks, GemmKind::Fprop));
  EXPECT_EQ(rel(tiles, GemmKind::Wgrad), rel(blocks, GemmKind::Wgrad));
}

// An outlier channel 1e5× the rest, whose weights are small (so the output is carried by the other channels):
// one per-tensor scale pushes every other value of x into the subnormals; 1×128 tiles confine that to the
// outlier's own tile (1 of 16).
TEST(LinearHealth, TensorwiseIsWorseThanDeepSeekOnAnOutlierChannel) {
  const int64_t tokens = 128, in = 2048, out = 128, channel = 5;
  auto x = randn(tokens * in, 10), w = randn(out * in, 11, 0.05f);
  for (int64_t t = 0; t < tokens; ++t) x[t * in + channel] = 1e5f * (t % 2 ? 1.0f : -1.0f);
  for (int64_t o = 0; o < out; ++o) w[o * in + channel] *= 1e-6f;
  const auto dy = randn(tokens * out, 12, 1e-3f);
  const LinearRun tensorwise = run_linear("fp8-tensorwise", x, w, dy, tokens, in, out, true, /*warm=*/1);
  const LinearRun deepseek = run_linear("fp8-deepseek", x, w, dy, tokens, in, out);
  const double et = rel(tensorwise, GemmKind::Fprop), ed = rel(deepseek, GemmKind::Fprop);
  std::printf("fprop with an outlier channel: fp8-tensorwise %.4e, fp8-deepseek %.4e\n", et, ed);
  EXPECT_GT(et, 2 * ed);
  EXPECT_LT(ed, 0.06);
}

TEST(LinearHealth, CountsSaturationUnderflowAndScaleRange) {
  const int64_t tokens = 32, in = 128, out = 128;
  auto xv = randn(tokens * in, 7);
  const auto wv = randn(out * in, 8, 0.05f), dyv = randn(tokens * out, 9, 1e-3f);
  Harness h("fp8-tensorwise", in, out);
  h.set_weight(wv);
  const DType dt = h.recipe.compute_dtype();
  h.lin.forward(h.ctx(dt, 0, false), as(xv, tokens, in, dt));  // the history now holds amax(x)
  EXPECT_TRUE(h.health.take().empty());                        // not sampled
  for (auto& v : xv) v *= 16.0f;                               // the activations jump: the stale scale saturates them
  const StepContext sampled = h.ctx(dt, 1, true);
  h.lin.forward(sampled, as(xv, tokens, in, dt));
  const auto records = h.health.take();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].kind, GemmKind::Fprop);
  EXPECT_EQ(records[0].a.elements, tokens * in);
  EXPECT_GT(records[0].a.saturated, tokens * in / 4);
  EXPECT_EQ(records[0].b.saturated, 0);
  EXPECT_EQ(records[0].a.scale_min, records[0].a.scale_max);  // one scale per tensor

  Harness h2("fp8-deepseek", in, out);
  h2.set_weight(wv);
  const StepContext ctx2 = h2.ctx(dt, 0, true);
  const Tensor dx = Tensor::empty({tokens, in}, dt);
  LinearInput kept;
  h2.lin.forward(ctx2, as(xv, tokens, in, dt), &kept);
  EXPECT_TRUE(kept.x.defined());  // a sampled step keeps the unquantized x for Wgrad's reference
  h2.lin.backward(ctx2, as(dyv, tokens, out, dt), kept, dx, false);
  const auto h2r = h2.health.take();
  ASSERT_EQ(h2r.size(), 3u);
  for (const auto& g : h2r) {
    SCOPED_TRACE(std::string(gemm_kind_name(g.kind)));
    EXPECT_EQ(g.a.saturated, 0);  // online scales never saturate
    EXPECT_EQ(g.b.saturated, 0);
    EXPECT_LT(g.a.scale_min, g.a.scale_max);  // one scale per tile: a range
  }
}

// An outlier channel (one hidden dimension 1e5× larger than the rest) under per-tensor and 1×128 scaling.
TEST(LinearHealth, OutlierChannelContainedByTiles) {
  const int64_t tokens = 64, hidden = 512, outlier = 5;
  auto xv = randn(tokens * hidden, 12);
  for (int64_t t = 0; t < tokens; ++t) xv[t * hidden + outlier] = 1e5f * (t % 2 ? 1.0f : -1.0f);
  const auto tensor_q = quant::quantize(
      xv.data(), tokens, hidden,
      {quant::Format::E4M3, quant::Granularity::tensor(), quant::ScaleMode::Amax, quant::Rounding::Nearest, 0});
  const auto tile_q = quant::quantize(
      xv.data(), tokens, hidden,
      {quant::Format::E4M3, quant::Granularity::tile_1x128(), quant::ScaleMode::Amax, quant::Rounding::Nearest, 0});
  const auto tv = quant::dequantize(tensor_q), lv = quant::dequantize(tile_q);
  // Error over the channels outside the outlier's tile (128..511).
  double err_tensor = 0, err_tile = 0, norm = 0;
  int64_t zero_tensor = 0, zero_tile = 0, count = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 128; c < hidden; ++c) {
      const double v = xv[t * hidden + c];
      norm += v * v;
      err_tensor += (tv[t * hidden + c] - v) * (tv[t * hidden + c] - v);
      err_tile += (lv[t * hidden + c] - v) * (lv[t * hidden + c] - v);
      zero_tensor += tv[t * hidden + c] == 0.0f;
      zero_tile += lv[t * hidden + c] == 0.0f;
      ++count;
    }
  const double rel_tensor = std::sqrt(err_tensor / norm), rel_tile = std::sqrt(err_tile / norm);
  EXPECT_GT(static_cast<double>(zero_tensor) / count, 0.10);  // small values lost under per-tensor scaling
  EXPECT_EQ(zero_tile, 0);
  EXPECT_GT(rel_tensor, 3 * rel_tile);
  EXPECT_LT(rel_tile, 0.05);
  // The health counters see the same thing through the recipes' Fprop (x as F32 activations here, so the
  // outlier is the only rounding).
  const auto wv = randn(128 * hidden, 13, 0.05f);
  auto underflow = [&](const char* spec) {
    Harness h(spec, hidden, 128);
    h.set_weight(wv);
    const Tensor x = as(xv, tokens, hidden);
    h.lin.forward(h.ctx(DType::F32, 0, false), x);  // warm the delayed-scaling history
    h.lin.forward(h.ctx(DType::F32, 1, true), x);
    const auto r = h.health.take();
    return static_cast<double>(r.at(0).a.underflow) / static_cast<double>(r.at(0).a.nonzero);
  };
  // 1×128 tiles confine the damage to the outlier's own tile (channels 0..127: a quarter of the values).
  const double tensorwise = underflow("fp8-tensorwise"), deepseek = underflow("fp8-deepseek");
  EXPECT_GT(tensorwise, 0.10);
  EXPECT_LT(deepseek, 0.25 * 0.25);
  EXPECT_GT(tensorwise, 3 * deepseek);
}
