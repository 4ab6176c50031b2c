// The recipe's Linear GEMM executor against the numerics core, bit for bit:
//   fp8-deepseek Fprop / Dgrad / Wgrad outputs == num::hopper_dot_scaled (the scalar Hopper accumulator model,
//   an independent path from ref_gemm's SIMD kernel) computed element by element on the same quantized codes
//   and scales (x 1×128, W 128×128, dy 1×128 / 128×1, x re-tiled 128×1);
//   the ablations (promotion never / 32, power-of-two scales, 128×128 Dgrad blocks, E5M2 gradients),
//   fp8-tensorwise and int8-blockwise against quant::ref_gemm on operands quantized here;
//   bf16 / fp32 against a double-precision product of (rounded) inputs; accumulation into dx / dW;
//   stochastic rounding streams reproducible per step and different across steps; bad shapes throw.
//   Shapes: x [T, in], W [out, in], y [T, out].
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"
#include "recipe/linear_gemm.h"
#include "../common/random_data.h"

using namespace fp8train;
using namespace fp8train::recipe;

namespace {

using fp8train::test_data::randn;

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

Tensor mat(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor::from_vector(v, {rows, cols});
}

quant::QuantSpec qc(quant::Format f, quant::Granularity g, quant::ScaleMode m = quant::ScaleMode::Amax) {
  quant::QuantSpec c;
  c.format = f;
  c.granularity = g;
  c.scale_mode = m;
  return c;
}

num::Fp8Format fp8(quant::Format f) { return f == quant::Format::E5M2 ? num::Fp8Format::E5M2 : num::Fp8Format::E4M3; }

// Element (i, j) of A[M,K]·B[N,K]ᵀ with per-128 scales, by the scalar numerics-core model. Operands given
// as accessor lambdas over (row, k) so that transposed views need no transpose() call.
template <class CodeA, class ScaleA, class CodeB, class ScaleB>
float hopper_element(int64_t k, quant::Format fa, CodeA code_a, ScaleA scale_a, quant::Format fb, CodeB code_b,
                     ScaleB scale_b) {
  std::vector<uint8_t> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
  const int64_t groups = (k + 127) / 128;
  std::vector<float> sa(static_cast<size_t>(groups)), sb(static_cast<size_t>(groups));
  for (int64_t t = 0; t < k; ++t) {
    a[t] = static_cast<uint8_t>(code_a(t));
    b[t] = static_cast<uint8_t>(code_b(t));
  }
  for (int64_t g = 0; g < groups; ++g) {
    sa[g] = scale_a(g * 128);
    sb[g] = scale_b(g * 128);
  }
  return num::hopper_dot_scaled(a.data(), fp8(fa), sa.data(), b.data(), fp8(fb), sb.data(), static_cast<int>(k), 128);
}

struct Problem {
  int64_t tokens, in, out;
  std::vector<float> x, w, dy;
};

Problem make_problem(int64_t tokens, int64_t in, int64_t out, uint64_t seed) {
  Problem p{tokens, in, out, randn(tokens * in, seed), randn(out * in, seed + 1, 0.05f),
            randn(tokens * out, seed + 2, 1e-3f)};
  // Per-row magnitudes spread over 2^-6..2^6 so tiles get distinct scales.
  for (int64_t r = 0; r < tokens; ++r) {
    const float s = std::ldexp(1.0f, static_cast<int>(r % 13) - 6);
    for (int64_t c = 0; c < in; ++c) p.x[r * in + c] *= s;
  }
  return p;
}

}  // namespace

// The recipe's Fprop / Dgrad / Wgrad == the numerics core's scalar Hopper model on the same quantized inputs.
TEST(LinearGemm, DeepSeekMatchesNumericsCoreBitForBit) {
  const Problem p = make_problem(/*tokens*/ 160, /*in*/ 384, /*out*/ 256, 11);
  RecipeContext ctx(make_recipe("fp8-deepseek"));
  LinearGemm lin(ctx, "test.linear");
  Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
  Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32);
  Tensor dx = Tensor::empty({p.tokens, p.in}, DType::F32), dw = Tensor::empty({p.out, p.in}, DType::F32);
  const CachedActivation cached = lin.forward(x, w, y);
  lin.backward(dy, w, cached, dx, dw);
  const auto yv = y.to_vector<float>(), dxv = dx.to_vector<float>(), dwv = dw.to_vector<float>();

  using quant::Format;
  using quant::Granularity;
  const quant::QTensor xq = quant::quantize(p.x, p.tokens, p.in, qc(Format::E4M3, Granularity::tile_1x128()));
  const quant::QTensor wq = quant::quantize(p.w, p.out, p.in, qc(Format::E4M3, Granularity::block_128x128()));
  const quant::QTensor dyq = quant::quantize(p.dy, p.tokens, p.out, qc(Format::E4M3, Granularity::tile_1x128()));
  const quant::QTensor dyq_t = quant::quantize(p.dy, p.tokens, p.out, qc(Format::E4M3, Granularity::tile_128x1()));
  const quant::QTensor xq_t = quant::retile(xq, qc(Format::E4M3, Granularity::tile_128x1()));

  // The cache holds the Fprop quantization of x itself.
  ASSERT_TRUE(cached.quantized());
  EXPECT_EQ(cached.quant().code_vector(), xq.code_vector());
  EXPECT_EQ(cached.quant().row_major_scales(), xq.row_major_scales());

  int64_t checked = 0;
  for (int64_t i = 0; i < p.tokens; i += 7) {
    for (int64_t j = 0; j < p.out; j += 5) {
      const float ref = hopper_element(
          p.in, Format::E4M3, [&](int64_t k) { return xq.code_at(i, k); }, [&](int64_t k) { return xq.scale_of(i, k); },
          Format::E4M3, [&](int64_t k) { return wq.code_at(j, k); }, [&](int64_t k) { return wq.scale_of(j, k); });
      ASSERT_EQ(bits(yv[i * p.out + j]), bits(ref)) << "fprop y[" << i << "," << j << "]";
      ++checked;
    }
    for (int64_t k = 0; k < p.in; k += 9) {  // dx[i, k] = Σ_j dy[i, j]·W[j, k]
      const float ref = hopper_element(
          p.out, Format::E4M3, [&](int64_t j) { return dyq.code_at(i, j); },
          [&](int64_t j) { return dyq.scale_of(i, j); }, Format::E4M3, [&](int64_t j) { return wq.code_at(j, k); },
          [&](int64_t j) { return wq.scale_of(j, k); });
      ASSERT_EQ(bits(dxv[i * p.in + k]), bits(ref)) << "dgrad dx[" << i << "," << k << "]";
      ++checked;
    }
  }
  for (int64_t o = 0; o < p.out; o += 3) {
    for (int64_t c = 0; c < p.in; c += 11) {  // dW[o, c] = Σ_t dy[t, o]·x[t, c], tiles along t
      const float ref = hopper_element(
          p.tokens, Format::E4M3, [&](int64_t t) { return dyq_t.code_at(t, o); },
          [&](int64_t t) { return dyq_t.scale_of(t, o); }, Format::E4M3, [&](int64_t t) { return xq_t.code_at(t, c); },
          [&](int64_t t) { return xq_t.scale_of(t, c); });
      ASSERT_EQ(bits(dwv[o * p.in + c]), bits(ref)) << "wgrad dW[" << o << "," << c << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 3000);
}

namespace {
// Runs one Linear forward + backward under `spec` and compares with ref_gemm on operands quantized by the
// test from the recipe's documented choices.
void check_against_ref_gemm(const std::string& spec, const quant::QuantSpec& fa, const quant::QuantSpec& fb,
                            const quant::QuantSpec& da, const quant::QuantSpec& wa, const quant::QuantSpec& wb,
                            const quant::GemmConfig& gemm, bool dgrad_blocks = false) {
  SCOPED_TRACE(spec);
  const Problem p = make_problem(96, 256, 130, 5);
  RecipeContext ctx(parse_recipe(spec));
  LinearGemm lin(ctx, "ablation");
  Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
  Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32);
  Tensor dx = Tensor::empty({p.tokens, p.in}, DType::F32), dw = Tensor::empty({p.out, p.in}, DType::F32);
  const CachedActivation cached = lin.forward(x, w, y);
  lin.backward(dy, w, cached, dx, dw);

  const auto y_ref = quant::ref_gemm(quant::quantize(p.x, p.tokens, p.in, fa), quant::quantize(p.w, p.out, p.in, fb), gemm);
  EXPECT_EQ(y.to_vector<float>(), y_ref);

  quant::QTensor dq = quant::quantize(p.dy, p.tokens, p.out, da);
  if (dgrad_blocks) {  // the same values with the block scale repeated on each row of the block
    quant::QTensor t = dq;
    t.spec.granularity = quant::Granularity::tile_1x128();
    std::vector<float> scales;
    for (int64_t r = 0; r < dq.rows; ++r)
      for (int64_t c = 0; c < dq.scale_cols(); ++c) scales.push_back(dq.scale_ptr()[(r / 128) * dq.scale_cols() + c]);
    t.rowwise.scales = Tensor::from_vector(scales, {dq.rows, dq.scale_cols()}, MemCategory::Workspace, Device::cpu());
    dq = t;
  }
  const auto dx_ref = quant::ref_gemm(dq, quant::transpose(quant::quantize(p.w, p.out, p.in, fb)), gemm);
  EXPECT_EQ(dx.to_vector<float>(), dx_ref);

  const quant::QTensor xq = quant::retile(quant::quantize(p.x, p.tokens, p.in, fa), wb);
  const auto dw_ref = quant::ref_gemm(quant::transpose(quant::quantize(p.dy, p.tokens, p.out, wa)), quant::transpose(xq), gemm);
  EXPECT_EQ(dw.to_vector<float>(), dw_ref);
}
}  // namespace

TEST(LinearGemm, AblationsMatchRefGemm) {
  using quant::Format;
  using quant::Granularity;
  using quant::ScaleMode;
  const auto t1 = Granularity::tile_1x128(), t128 = Granularity::tile_128x1(), b = Granularity::block_128x128();
  quant::GemmConfig hopper;
  hopper.mode = quant::AccumMode::Hopper;
  hopper.promote_interval = 128;
  check_against_ref_gemm("fp8-deepseek", qc(Format::E4M3, t1), qc(Format::E4M3, b), qc(Format::E4M3, t1),
                         qc(Format::E4M3, t128), qc(Format::E4M3, t128), hopper);
  quant::GemmConfig never = hopper;
  never.promote_interval = num::kNeverPromote;
  check_against_ref_gemm("fp8-deepseek:promote=never", qc(Format::E4M3, t1), qc(Format::E4M3, b), qc(Format::E4M3, t1),
                         qc(Format::E4M3, t128), qc(Format::E4M3, t128), never);
  quant::GemmConfig p32 = hopper;
  p32.promote_interval = 32;
  check_against_ref_gemm("fp8-deepseek:promote=32", qc(Format::E4M3, t1), qc(Format::E4M3, b), qc(Format::E4M3, t1),
                         qc(Format::E4M3, t128), qc(Format::E4M3, t128), p32);
  const ScaleMode p2 = ScaleMode::PowerOfTwo;
  check_against_ref_gemm("fp8-deepseek:pow2=on", qc(Format::E4M3, t1, p2), qc(Format::E4M3, b, p2),
                         qc(Format::E4M3, t1, p2), qc(Format::E4M3, t128, p2), qc(Format::E4M3, t128, p2), hopper);
  check_against_ref_gemm("fp8-deepseek:grad=e5m2", qc(Format::E4M3, t1), qc(Format::E4M3, b), qc(Format::E5M2, t1),
                         qc(Format::E5M2, t128), qc(Format::E4M3, t128), hopper);
  check_against_ref_gemm("fp8-deepseek:dgrad_block=on", qc(Format::E4M3, t1), qc(Format::E4M3, b), qc(Format::E4M3, b),
                         qc(Format::E4M3, t128), qc(Format::E4M3, t128), hopper, /*dgrad_blocks=*/true);
  quant::GemmConfig exact;
  exact.mode = quant::AccumMode::Exact;
  check_against_ref_gemm("int8-blockwise:stochastic=off", qc(Format::INT8, t1), qc(Format::INT8, b),
                         qc(Format::INT8, t1), qc(Format::INT8, t128), qc(Format::INT8, t128), exact);
}

// Wgrad re-tiles the cached 1×128 input to 128×1. With power-of-two scales every re-tiled value is the cached
// value shifted by a power of two, so only codes pushed below the smallest E4M3 subnormal can change (quant.h);
// with Amax scales most values are re-rounded.
TEST(LinearGemm, Pow2RetileOfCachedInputChangesOnlyTinyCodes) {
  const int64_t rows = 256, cols = 256;
  const auto x = randn(rows * cols, 9);
  quant::QuantSpec row = qc(quant::Format::E4M3, quant::Granularity::tile_1x128(), quant::ScaleMode::PowerOfTwo);
  quant::QuantSpec col = row;
  col.granularity = quant::Granularity::tile_128x1();
  const quant::QTensor xq = quant::quantize(x, rows, cols, row);
  const auto before = quant::dequantize(xq), after = quant::dequantize(quant::retile(xq, col));
  int64_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] == after[i]) continue;
    ++changed;
    const int64_t r = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
    ASSERT_LT(std::fabs(xq.decoded_at(r, c)), 0.125f) << "a code above the subnormal range changed";
  }
  EXPECT_LT(changed, rows * cols / 100);
  row.scale_mode = col.scale_mode = quant::ScaleMode::Amax;
  const quant::QTensor xa = quant::quantize(x, rows, cols, row);
  const auto b2 = quant::dequantize(xa), a2 = quant::dequantize(quant::retile(xa, col));
  int64_t changed_amax = 0;
  for (size_t i = 0; i < b2.size(); ++i) changed_amax += b2[i] != a2[i];
  EXPECT_GT(changed_amax, rows * cols / 5);
}

TEST(LinearGemm, TensorwiseUsesDelayedScalingAndE5M2Gradients) {
  const Problem p = make_problem(64, 128, 128, 3);
  RecipeContext ctx(make_recipe("fp8-tensorwise"));
  LinearGemm lin(ctx, "tw");
  Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
  Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32), y2 = Tensor::empty({p.tokens, p.out}, DType::F32);
  Tensor dx = Tensor::empty({p.tokens, p.in}, DType::F32), dw = Tensor::empty({p.out, p.in}, DType::F32);
  // Step 1: empty histories -> scale 1 (TE's initial scale). Step 2: the scales come from step 1's amaxes.
  CachedActivation c1 = lin.forward(x, w, y);
  lin.backward(dy, w, c1, dx, dw);
  CachedActivation c2 = lin.forward(x, w, y2);
  lin.backward(dy, w, c2, dx, dw);

  quant::AmaxHistory hx, hw, hdy;
  quant::QuantSpec e4 = qc(quant::Format::E4M3, quant::Granularity::tensor());
  quant::QuantSpec e5 = qc(quant::Format::E5M2, quant::Granularity::tensor());
  quant::GemmConfig g;
  g.mode = quant::AccumMode::Hopper;
  g.promote_interval = 128;
  const auto x1 = quant::quantize_delayed(p.x.data(), p.tokens, p.in, e4, hx);
  const auto w1 = quant::quantize_delayed(p.w.data(), p.out, p.in, e4, hw);
  EXPECT_EQ(y.to_vector<float>(), quant::ref_gemm(x1, w1, g));
  EXPECT_EQ(x1.scale_ptr()[0], 1.0f);
  const auto d1 = quant::quantize_delayed(p.dy.data(), p.tokens, p.out, e5, hdy);
  const auto x2 = quant::quantize_delayed(p.x.data(), p.tokens, p.in, e4, hx);
  const auto w2 = quant::quantize_delayed(p.w.data(), p.out, p.in, e4, hw);
  EXPECT_NE(x2.scale_ptr()[0], 1.0f);
  EXPECT_EQ(y2.to_vector<float>(), quant::ref_gemm(x2, w2, g));
  const auto d2 = quant::quantize_delayed(p.dy.data(), p.tokens, p.out, e5, hdy);
  EXPECT_EQ(dx.to_vector<float>(), quant::ref_gemm(d2, quant::transpose(w2), g));
  EXPECT_EQ(dw.to_vector<float>(), quant::ref_gemm(quant::transpose(d2), quant::transpose(x2), g));
  (void)d1;
}

TEST(LinearGemm, Bf16AndFp32MatchDoubleProducts) {
  const Problem p = make_problem(33, 70, 45, 21);
  for (const char* spec : {"fp32", "bf16"}) {
    SCOPED_TRACE(spec);
    const bool round = std::string(spec) == "bf16";
    RecipeContext ctx(make_recipe(spec));
    LinearGemm lin(ctx, "hp");
    Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
    Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32);
    Tensor dx = Tensor::zeros({p.tokens, p.in}, DType::F32), dw = Tensor::zeros({p.out, p.in}, DType::F32);
    const CachedActivation c = lin.forward(x, w, y);
    EXPECT_EQ(c.format(), round ? CacheFormat::Bf16 : CacheFormat::Fp32);
    lin.backward(dy, w, c, dx, dw, /*accumulate_dx=*/true, /*accumulate_dw=*/true);
    auto r = [&](float v) { return round ? num::bf16_round(v) : v; };
    const auto yv = y.to_vector<float>(), dxv = dx.to_vector<float>(), dwv = dw.to_vector<float>();
    for (int64_t i = 0; i < p.tokens; ++i)
      for (int64_t j = 0; j < p.out; ++j) {
        double s = 0;
        for (int64_t k = 0; k < p.in; ++k) s += double(r(p.x[i * p.in + k])) * r(p.w[j * p.in + k]);
        ASSERT_NEAR(yv[i * p.out + j], s, 1e-5 * (1 + std::fabs(s)));
      }
    for (int64_t i = 0; i < p.tokens; ++i)
      for (int64_t k = 0; k < p.in; ++k) {
        double s = 0;
        for (int64_t j = 0; j < p.out; ++j) s += double(r(p.dy[i * p.out + j])) * r(p.w[j * p.in + k]);
        ASSERT_NEAR(dxv[i * p.in + k], s, 1e-8 + 1e-5 * std::fabs(s));
      }
    for (int64_t o = 0; o < p.out; ++o)
      for (int64_t k = 0; k < p.in; ++k) {
        double s = 0;
        for (int64_t t = 0; t < p.tokens; ++t) s += double(r(p.dy[t * p.out + o])) * r(p.x[t * p.in + k]);
        ASSERT_NEAR(dwv[o * p.in + k], s, 1e-8 + 1e-5 * std::fabs(s));
      }
  }
}

TEST(LinearGemm, AccumulatesIntoGradients) {
  const Problem p = make_problem(64, 128, 128, 8);
  RecipeContext ctx(make_recipe("fp8-deepseek"));
  LinearGemm lin(ctx, "acc");
  Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
  Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32);
  Tensor dx = Tensor::empty({p.tokens, p.in}, DType::F32), dw = Tensor::empty({p.out, p.in}, DType::F32);
  const CachedActivation c = lin.forward(x, w, y);
  lin.backward(dy, w, c, dx, dw);
  const auto dx1 = dx.to_vector<float>(), dw1 = dw.to_vector<float>();
  lin.backward(dy, w, c, dx, dw, true, true);
  const auto dx2 = dx.to_vector<float>(), dw2 = dw.to_vector<float>();
  for (size_t i = 0; i < dx1.size(); ++i) ASSERT_EQ(dx2[i], dx1[i] + dx1[i]);
  for (size_t i = 0; i < dw1.size(); ++i) ASSERT_EQ(dw2[i], dw1[i] + dw1[i]);
}

TEST(LinearGemm, StochasticRoundingIsReproduciblePerStepAndVariesAcrossSteps) {
  const Problem p = make_problem(128, 128, 128, 4);
  auto run = [&](int64_t step) {
    RecipeContext ctx(make_recipe("int8-blockwise"));
    ctx.begin_step(step, false);
    LinearGemm lin(ctx, "sr");
    Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
    Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32);
    Tensor dx = Tensor::empty({p.tokens, p.in}, DType::F32), dw = Tensor::empty({p.out, p.in}, DType::F32);
    lin.backward(dy, w, lin.forward(x, w, y), dx, dw);
    return std::make_pair(dx.to_vector<float>(), dw.to_vector<float>());
  };
  const auto a = run(5), b = run(5), c = run(6);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_NE(a.first, c.first);
  EXPECT_NE(a.second, c.second);
}

TEST(LinearGemm, StridedViewsAndBadShapes) {
  const Problem p = make_problem(32, 128, 64, 2);
  RecipeContext ctx(make_recipe("fp8-deepseek"));
  LinearGemm lin(ctx, "views");
  // x as a column block of a wider matrix: same result as the contiguous x.
  std::vector<float> wide(static_cast<size_t>(p.tokens * (p.in + 16)), 7.0f);
  for (int64_t r = 0; r < p.tokens; ++r)
    std::memcpy(&wide[r * (p.in + 16) + 8], &p.x[r * p.in], p.in * sizeof(float));
  Tensor xw = mat(wide, p.tokens, p.in + 16).cols(8, 8 + p.in);
  Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in);
  Tensor y1 = Tensor::empty({p.tokens, p.out}, DType::F32), y2 = Tensor::empty({p.tokens, p.out}, DType::F32);
  lin.forward(x, w, y1);
  lin.forward(xw, w, y2);
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
  Tensor bad = Tensor::empty({p.tokens, p.out + 1}, DType::F32);
  EXPECT_THROW(lin.forward(x, w, bad), Error);
  EXPECT_THROW(lin.forward(w, x, y1), Error);
}

// MoE dispatch in FP8 (fp8-deepseek's dispatch_fp8): a routed expert's W1|W3 Fprop takes the dispatched tokens
// (E4M3, power-of-two 1×128 scales) and its W2 Dgrad the dispatched gradient (same format); Wgrad of W2 sees the
// dispatched gradient's values re-tiled 128×1. With dispatch_fp8=off the same Linear uses the plain recipe.
TEST(LinearGemm, DispatchedExpertOperandsUsePow2Fp8) {
  using quant::Format;
  using quant::Granularity;
  using quant::ScaleMode;
  const Problem p = make_problem(64, 128, 128, 17);
  Tensor x = mat(p.x, p.tokens, p.in), w = mat(p.w, p.out, p.in), dy = mat(p.dy, p.tokens, p.out);
  quant::GemmConfig g;
  g.mode = quant::AccumMode::Hopper;
  g.promote_interval = 128;
  const auto pow2 = qc(Format::E4M3, Granularity::tile_1x128(), ScaleMode::PowerOfTwo);
  const auto wq = quant::quantize(p.w, p.out, p.in, qc(Format::E4M3, Granularity::block_128x128()));
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "dispatch_fp8=on" : "dispatch_fp8=off");
    RecipeContext ctx(parse_recipe(on ? "fp8-deepseek" : "fp8-deepseek:dispatch_fp8=off"));
    LinearGemm up(ctx, "layers.1.moe.experts.0.w13", LinearOptions{CacheRole::LinearInput, true, false});
    LinearGemm down(ctx, "layers.1.moe.experts.0.w2", LinearOptions{CacheRole::LinearInput, false, true});
    Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32), dx = Tensor::empty({p.tokens, p.in}, DType::F32);
    Tensor dw = Tensor::zeros({p.out, p.in}, DType::F32);
    up.forward(x, w, y, false);
    const auto xa = quant::quantize(p.x, p.tokens, p.in, on ? pow2 : qc(Format::E4M3, Granularity::tile_1x128()));
    EXPECT_EQ(y.to_vector<float>(), quant::ref_gemm(xa, wq, g));
    down.dgrad(dy, w, dx, false);
    const auto da = quant::quantize(p.dy, p.tokens, p.out, on ? pow2 : qc(Format::E4M3, Granularity::tile_1x128()));
    EXPECT_EQ(dx.to_vector<float>(), quant::ref_gemm(da, quant::transpose(wq), g));
    down.wgrad(dy, x, dw, false);
    const std::vector<float> dvals = on ? quant::dequantize(quant::quantize(p.dy, p.tokens, p.out, pow2)) : p.dy;
    const auto dt = quant::quantize(dvals, p.tokens, p.out, qc(Format::E4M3, Granularity::tile_128x1()));
    const auto xt = quant::quantize(p.x, p.tokens, p.in, qc(Format::E4M3, Granularity::tile_128x1()));
    EXPECT_EQ(dw.to_vector<float>(), quant::ref_gemm(quant::transpose(dt), quant::transpose(xt), g));
  }
}
