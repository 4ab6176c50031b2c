// The GEMM-accuracy part of the numerics-health sample (recipe/linear_gemm.h "GEMM accuracy"): each Linear
// GEMM against the FP32 reference on the unquantized operands, ‖Y − R‖_F / ‖R‖_F.
//   - 0 exactly for fp32, small but not 0 for bf16; sampling leaves the GEMM outputs bit-identical
//   - promote=never is worse than promotion every 128 on a Wgrad reduced over 16384 tokens, more so than over 4096
//   - dgrad_block=on (128×128 dy blocks) is worse than 1×128 tiles when one token's gradient is an outlier (in
//     the row-wise error; the Frobenius error is dominated by the outlier row and does not see it)
//   - fp8-tensorwise is worse than fp8-deepseek on an input with an outlier channel
//   - the per-kind summary of the metrics.jsonl records (train/metrics.h gemm_error_summary)
// Shapes: x [T, in], W [out, in], dy [T, out].
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "recipe/linear_gemm.h"
#include "train/metrics.h"
#include "../common/random_data.h"

using namespace fp8train;
using namespace fp8train::recipe;
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
  RecipeContext ctx(parse_recipe(spec));
  LinearGemm lin(ctx, "test.linear");
  const Tensor xt = Tensor::from_vector(x, {tokens, in}), wt = Tensor::from_vector(w, {out, in}),
               dyt = Tensor::from_vector(dy, {tokens, out});
  Tensor y = Tensor::empty({tokens, out}, DType::F32), dx = Tensor::empty({tokens, in}, DType::F32),
         dw = Tensor::empty({out, in}, DType::F32);
  for (int s = 0; s < warm; ++s) {
    ctx.begin_step(s, false);
    lin.backward(dyt, wt, lin.forward(xt, wt, y), dx, dw);
  }
  ctx.begin_step(warm, sample);
  lin.backward(dyt, wt, lin.forward(xt, wt, y), dx, dw);
  return {ctx.take_health(), y.to_vector<float>(), dx.to_vector<float>(), dw.to_vector<float>()};
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

TEST(GemmAccuracy, Fp32IsExactlyZeroBf16IsNotAndSamplingChangesNothing) {
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
    // Two BF16-rounded operands (8 significant bits each): a relative error of a few 1e-3.
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
    EXPECT_GT(g.accuracy.relative_error(), 3 * find(bf16.health, g.kind).accuracy.relative_error());
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
TEST(GemmAccuracy, NoPromotionIsWorseOnALongWgrad) {
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
TEST(GemmAccuracy, BlockwiseDgradIsWorseWithAnOutlierToken) {
  const int64_t tokens = 256, in = 256, out = 256, outlier = 37;
  const auto x = randn(tokens * in, 7), w = randn(out * in, 8, 0.05f);
  auto dy = randn(tokens * out, 9, 1e-3f);
  for (int64_t c = 0; c < out; ++c) dy[outlier * out + c] *= 1e5f;
  const LinearRun tiles = run_linear("fp8-deepseek", x, w, dy, tokens, in, out);
  const LinearRun blocks = run_linear("fp8-deepseek:dgrad_block=on", x, w, dy, tokens, in, out);
  // The error of the rows that are not the outlier (the outlier row dominates ‖R‖ otherwise): recompute Dgrad's
  // reference here and compare row by row.
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
  std::printf("dgrad with an outlier token: Frobenius 1x128 %.4e, 128x128 %.4e; row-wise %.4e, %.4e; without the "
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
TEST(GemmAccuracy, TensorwiseIsWorseThanDeepSeekOnAnOutlierChannel) {
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

TEST(GemmAccuracy, SummaryPerKindPoolsAndAverages) {
  const nlohmann::json health = nlohmann::json::parse(R"([
    {"linear": "a", "gemm": "fprop", "calls": 1, "rel_error": 0.1, "err_sq": 1.0, "ref_sq": 100.0,
     "row_rel_error": 0.2, "rows": 8},
    {"linear": "b", "gemm": "fprop", "calls": 2, "rel_error": 0.3, "err_sq": 0.09, "ref_sq": 1.0,
     "row_rel_error": 0.4, "rows": 8},
    {"linear": "a", "gemm": "wgrad", "calls": 1, "rel_error": 0.0, "err_sq": 0.0, "ref_sq": 4.0}
  ])");
  const nlohmann::ordered_json s = train::gemm_error_summary(health);
  ASSERT_TRUE(s.is_object());
  EXPECT_FALSE(s.contains("dgrad"));
  EXPECT_EQ(s["fprop"]["linears"], 2);
  EXPECT_NEAR(s["fprop"]["pooled"].get<double>(), std::sqrt(1.09 / 101.0), 1e-12);
  EXPECT_NEAR(s["fprop"]["mean"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(s["fprop"]["max"].get<double>(), 0.3);
  EXPECT_EQ(s["fprop"]["max_linear"], "b");
  EXPECT_NEAR(s["fprop"]["row_mean"].get<double>(), 0.3, 1e-12);
  EXPECT_FALSE(s["wgrad"].contains("row_mean"));  // a record from before the row-wise error existed
  EXPECT_EQ(s["wgrad"]["pooled"].get<double>(), 0.0);
  EXPECT_TRUE(train::gemm_error_summary(nlohmann::json::array()).is_null());

  std::vector<nlohmann::json> rows = {{{"step", 1}, {"loss", 2.0}}, {{"step", 2}, {"health", health}},
                                      {{"step", 4}, {"health", nlohmann::json::parse(R"([
    {"linear": "a", "gemm": "fprop", "calls": 1, "rel_error": 0.5, "err_sq": 25.0, "ref_sq": 100.0}])")}}};
  const nlohmann::ordered_json run = train::gemm_error_over_run(rows);
  EXPECT_EQ(run["fprop"]["samples"], 2);
  EXPECT_NEAR(run["fprop"]["mean"].get<double>(), (0.2 + 0.5) / 2, 1e-12);
  EXPECT_NEAR(run["fprop"]["pooled"].get<double>(), (std::sqrt(1.09 / 101.0) + 0.5) / 2, 1e-12);
  EXPECT_EQ(run["fprop"]["max"].get<double>(), 0.5);
  EXPECT_NEAR(run["fprop"]["row_mean"].get<double>(), 0.3, 1e-12);  // one sample has a row-wise error
  EXPECT_EQ(run["wgrad"]["samples"], 1);
}
