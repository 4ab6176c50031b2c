// The role-aware Linear (model/linear.h) against the numerics core and the reference quantizers, bit for bit:
//   fp8-deepseek Fprop / Dgrad / Wgrad == num::hopper_dot_scaled (the scalar Hopper accumulator model, an
//   independent path from ref_gemm's SIMD kernel) element by element on the same codes and scales — x 1×128 for
//   Fprop and its 128×1 tiles from the same unrounded x for Wgrad (the Colwise form), or re-tiled from the 1×128
//   operand (wgrad_x=retile), W 128×128 and Wᵀ, dy 1×128 / 128×1 quantized once;
//   the ablations (promotion never / 32, power-of-two scales, 128×128 Dgrad blocks, E5M2 gradients), the INT8
//   recipe and fp8-tensorwise's delayed scaling against quant::ref_gemm on operands quantized here;
//   bf16 / fp32 against double-precision products; accumulation; the compute copy of the weight; stochastic
//   rounding streams; dispatched expert operands; a grouped Linear against one Linear per expert; bad input.
//   Shapes: x [T, in], W [out, in], y [T, out]. The step context computes in F32 (so the FP32 accumulators are
//   compared as they are) except where a test says otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../common/error_of.h"
#include "../common/random_data.h"
#include "common/error.h"
#include "linear_harness.h"
#include "model/activation_store.h"
#include "model/linear.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "ops/elementwise.h"
#include "ops/quantize.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"
#include "recipe/health.h"

using namespace fp8train;
using namespace fp8train::model;

namespace {

using fp8train::test_data::randn;
using namespace fp8train::model::testing;
using quant::Format;
using quant::Granularity;
using quant::ScaleMode;

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

quant::QuantSpec qs(Format f, Granularity g, ScaleMode m = ScaleMode::Amax) {
  quant::QuantSpec c;
  c.format = f;
  c.granularity = g;
  c.scale_mode = m;
  return c;
}

num::Fp8Format fp8(Format f) { return f == Format::E5M2 ? num::Fp8Format::E5M2 : num::Fp8Format::E4M3; }

quant::GemmConfig hopper(int promote = 128) {
  quant::GemmConfig g;
  g.mode = quant::AccumMode::Hopper;
  g.promote_interval = promote;
  return g;
}

// Element (i, j) of A[M,K]·B[N,K]ᵀ with per-128 scales, by the scalar numerics-core model. Operands given as
// accessor lambdas over k.
template <class CodeA, class ScaleA, class CodeB, class ScaleB>
float hopper_element(int64_t k, Format fa, CodeA code_a, ScaleA scale_a, Format fb, CodeB code_b, ScaleB scale_b) {
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
  Problem p{tokens,
            in,
            out,
            randn(tokens * in, seed),
            randn(out * in, seed + 1, 0.05f),
            randn(tokens * out, seed + 2, 1e-3f)};
  // Per-row magnitudes spread over 2^-6..2^6 so tiles get distinct scales.
  for (int64_t r = 0; r < tokens; ++r) {
    const float s = std::ldexp(1.0f, static_cast<int>(r % 13) - 6);
    for (int64_t c = 0; c < in; ++c) p.x[r * in + c] *= s;
  }
  return p;
}

struct Outputs {
  std::vector<float> y, dx, dw;
  LinearInput kept;
};

// One forward + backward of h.lin (dW from zero).
Outputs run(Harness& h, const Problem& p, const StepContext& ctx) {
  h.set_weight(p.w);
  h.zero_grad();
  const Tensor x = as(p.x, p.tokens, p.in, ctx.dtype), dy = as(p.dy, p.tokens, p.out, ctx.dtype);
  const Tensor y = Tensor::empty({p.tokens, p.out}, ctx.dtype), dx = Tensor::empty({p.tokens, p.in}, ctx.dtype);
  const LinearInput in = h.lin.prepare(ctx, x, true);
  h.lin.forward(ctx, in, y);
  Outputs o;
  o.kept = h.lin.kept(ctx, in);
  h.lin.backward(ctx, dy, o.kept, dx, false);
  o.y = values(y);
  o.dx = values(dx);
  o.dw = h.lin.grad().to_vector<float>();
  return o;
}

}  // namespace

// The recipe's Fprop / Dgrad / Wgrad == the numerics core's scalar Hopper model on the same quantized inputs.
TEST(Linear, DeepSeekMatchesNumericsCoreBitForBit) {
  const Problem p = make_problem(/*tokens*/ 160, /*in*/ 384, /*out*/ 256, 11);
  for (const char* spec : {"fp8-deepseek", "fp8-deepseek:wgrad_x=retile"}) {
    SCOPED_TRACE(spec);
    const bool retile = std::string(spec).find("retile") != std::string::npos;
    Harness h(spec, p.in, p.out);
    const Outputs o = run(h, p, h.ctx());
    const quant::QTensor xq = quant::quantize(p.x, p.tokens, p.in, qs(Format::E4M3, Granularity::tile_1x128()));
    const quant::QTensor wq = quant::quantize(p.w, p.out, p.in, qs(Format::E4M3, Granularity::block_128x128()));
    const quant::QTensor dyq = quant::quantize(p.dy, p.tokens, p.out, qs(Format::E4M3, Granularity::tile_1x128()));
    const quant::QTensor dyq_t = quant::quantize(p.dy, p.tokens, p.out, qs(Format::E4M3, Granularity::tile_128x1()));
    // Wgrad's x: the 128×1 tiles of the unrounded x (colwise), or Fprop's 1×128 operand re-tiled (retile)
    const quant::QuantSpec col = qs(Format::E4M3, Granularity::tile_128x1());
    const quant::QTensor xq_t = retile ? quant::retile(xq, col) : quant::quantize(p.x, p.tokens, p.in, col);
    // What backward keeps: the colwise copy as xᵀ's 1×128 tiles, or Fprop's operand itself
    if (retile) {
      ASSERT_TRUE(o.kept.q.defined());
      EXPECT_FALSE(o.kept.qt.defined());
      EXPECT_EQ(o.kept.q.code_vector(), xq.code_vector());
    } else {
      ASSERT_TRUE(o.kept.qt.defined());
      EXPECT_FALSE(o.kept.q.defined());
      EXPECT_EQ(o.kept.qt.rows, p.in);
      EXPECT_EQ(o.kept.qt.code_vector(), quant::transpose(xq_t).code_vector());
    }
    EXPECT_FALSE(o.kept.x.defined());  // the unquantized x is not kept (no sampled step)

    int64_t checked = 0;
    for (int64_t i = 0; i < p.tokens; i += 7) {
      for (int64_t j = 0; j < p.out; j += 5) {
        const float ref = hopper_element(
            p.in, Format::E4M3, [&](int64_t k) { return xq.code_at(i, k); },
            [&](int64_t k) { return xq.scale_of(i, k); }, Format::E4M3, [&](int64_t k) { return wq.code_at(j, k); },
            [&](int64_t k) { return wq.scale_of(j, k); });
        ASSERT_EQ(bits(o.y[i * p.out + j]), bits(ref)) << "fprop y[" << i << "," << j << "]";
        ++checked;
      }
      for (int64_t k = 0; k < p.in; k += 9) {  // dx[i, k] = Σ_j dy[i, j]·W[j, k]
        const float ref = hopper_element(
            p.out, Format::E4M3, [&](int64_t j) { return dyq.code_at(i, j); },
            [&](int64_t j) { return dyq.scale_of(i, j); }, Format::E4M3, [&](int64_t j) { return wq.code_at(j, k); },
            [&](int64_t j) { return wq.scale_of(j, k); });
        ASSERT_EQ(bits(o.dx[i * p.in + k]), bits(ref)) << "dgrad dx[" << i << "," << k << "]";
        ++checked;
      }
    }
    for (int64_t oo = 0; oo < p.out; oo += 3) {
      for (int64_t c = 0; c < p.in; c += 11) {  // dW[o, c] = Σ_t dy[t, o]·x[t, c], tiles along t
        const float ref = hopper_element(
            p.tokens, Format::E4M3, [&](int64_t t) { return dyq_t.code_at(t, oo); },
            [&](int64_t t) { return dyq_t.scale_of(t, oo); }, Format::E4M3,
            [&](int64_t t) { return xq_t.code_at(t, c); }, [&](int64_t t) { return xq_t.scale_of(t, c); });
        ASSERT_EQ(bits(o.dw[oo * p.in + c]), bits(ref)) << "wgrad dW[" << oo << "," << c << "]";
        ++checked;
      }
    }
    EXPECT_GT(checked, 3000);
  }
}

namespace {
// One Linear forward + backward under `spec` against ref_gemm on operands quantized by the test from the
// recipe's documented choices: Fprop fa·fb, Dgrad da·fbᵀ, Wgrad (dy under wa)ᵀ·(x under wb)ᵀ, x and dy each
// quantized from their unrounded values.
void check_against_ref_gemm(const std::string& spec, const quant::QuantSpec& fa, const quant::QuantSpec& fb,
                            const quant::QuantSpec& da, const quant::QuantSpec& wa, const quant::QuantSpec& wb,
                            const quant::GemmConfig& gemm, bool dgrad_blocks = false) {
  SCOPED_TRACE(spec);
  const Problem p = make_problem(96, 256, 130, 5);
  Harness h(spec, p.in, p.out);
  const Outputs o = run(h, p, h.ctx());
  EXPECT_EQ(o.y,
            quant::ref_gemm(quant::quantize(p.x, p.tokens, p.in, fa), quant::quantize(p.w, p.out, p.in, fb), gemm));
  quant::QTensor dq = quant::quantize(p.dy, p.tokens, p.out, da);
  if (dgrad_blocks) {  // the same values with the block scale repeated on each row of the block
    const std::vector<float> block = dq.row_major_scales();
    const int64_t sc = dq.scale_cols();
    std::vector<float> rows(static_cast<size_t>(dq.rows * sc));
    for (int64_t r = 0; r < dq.rows; ++r)
      for (int64_t c = 0; c < sc; ++c) rows[r * sc + c] = block[(r / 128) * sc + c];
    dq.spec.granularity = Granularity::tile_1x128();
    dq.rowwise.scales = Tensor::from_vector(rows, {dq.rows, sc});
  }
  EXPECT_EQ(o.dx, quant::ref_gemm(dq, quant::transpose(quant::quantize(p.w, p.out, p.in, fb)), gemm));
  const quant::QTensor xq = quant::quantize(p.x, p.tokens, p.in, wb);
  EXPECT_EQ(o.dw,
            quant::ref_gemm(quant::transpose(quant::quantize(p.dy, p.tokens, p.out, wa)), quant::transpose(xq), gemm));
}
}  // namespace

TEST(Linear, AblationsAndInt8MatchRefGemm) {
  const auto t1 = Granularity::tile_1x128(), t128 = Granularity::tile_128x1(), b = Granularity::block_128x128();
  check_against_ref_gemm("fp8-deepseek", qs(Format::E4M3, t1), qs(Format::E4M3, b), qs(Format::E4M3, t1),
                         qs(Format::E4M3, t128), qs(Format::E4M3, t128), hopper());
  check_against_ref_gemm("fp8-deepseek:promote=never", qs(Format::E4M3, t1), qs(Format::E4M3, b), qs(Format::E4M3, t1),
                         qs(Format::E4M3, t128), qs(Format::E4M3, t128), hopper(num::kNeverPromote));
  check_against_ref_gemm("fp8-deepseek:promote=32", qs(Format::E4M3, t1), qs(Format::E4M3, b), qs(Format::E4M3, t1),
                         qs(Format::E4M3, t128), qs(Format::E4M3, t128), hopper(32));
  const ScaleMode p2 = ScaleMode::PowerOfTwo;
  check_against_ref_gemm("fp8-deepseek:pow2=on", qs(Format::E4M3, t1, p2), qs(Format::E4M3, b, p2),
                         qs(Format::E4M3, t1, p2), qs(Format::E4M3, t128, p2), qs(Format::E4M3, t128, p2), hopper());
  check_against_ref_gemm("fp8-deepseek:grad=e5m2", qs(Format::E4M3, t1), qs(Format::E4M3, b), qs(Format::E5M2, t1),
                         qs(Format::E5M2, t128), qs(Format::E4M3, t128), hopper());
  check_against_ref_gemm("fp8-deepseek:dgrad_block=on", qs(Format::E4M3, t1), qs(Format::E4M3, b), qs(Format::E4M3, b),
                         qs(Format::E4M3, t128), qs(Format::E4M3, t128), hopper(),
                         /*dgrad_blocks=*/true);
  quant::GemmConfig exact;
  exact.mode = quant::AccumMode::Exact;
  check_against_ref_gemm("int8-blockwise:stochastic=off", qs(Format::INT8, t1), qs(Format::INT8, b),
                         qs(Format::INT8, t1), qs(Format::INT8, t128), qs(Format::INT8, t128), exact);
}

// Wgrad's Retile form re-tiles Fprop's 1×128 operand into 128×1 tiles. With power-of-two scales every re-tiled
// value is the kept value shifted by a power of two, so only codes pushed below the smallest E4M3 subnormal can
// change (quant.h); with Amax scales most values are re-rounded — which is why the Colwise form quantizes the
// 128×1 tiles from the unrounded x instead.
TEST(Linear, Pow2RetileOfTheKeptInputChangesOnlyTinyCodes) {
  const int64_t rows = 256, cols = 256;
  const auto x = randn(rows * cols, 9);
  quant::QuantSpec row = qs(Format::E4M3, Granularity::tile_1x128(), ScaleMode::PowerOfTwo);
  quant::QuantSpec col = row;
  col.granularity = Granularity::tile_128x1();
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
  row.scale_mode = col.scale_mode = ScaleMode::Amax;
  const quant::QTensor xa = quant::quantize(x, rows, cols, row);
  const auto b2 = quant::dequantize(xa), a2 = quant::dequantize(quant::retile(xa, col));
  int64_t changed_amax = 0;
  for (size_t i = 0; i < b2.size(); ++i) changed_amax += b2[i] != a2[i];
  EXPECT_GT(changed_amax, rows * cols / 5);
}

// fp8-tensorwise: one delayed scale per tensor (x, W, dy), TE-style; the weight's copy is quantized once per
// parameter update, and its scale enters the history then; dy is quantized once for Dgrad and Wgrad.
TEST(Linear, TensorwiseUsesDelayedScalingAndE5M2Gradients) {
  const Problem p = make_problem(64, 128, 128, 3);
  Harness h("fp8-tensorwise", p.in, p.out);
  // Step 1: empty histories -> scale 1 (TE's initial scale). Step 2 (after a parameter update): the scales come
  // from step 1's amaxes.
  const Outputs o1 = run(h, p, h.ctx(DType::F32, 0));
  const Outputs o2 = run(h, p, h.ctx(DType::F32, 1));  // run() sets the weight: a parameter update
  quant::AmaxHistory hx, hw, hdy;
  const quant::QuantSpec e4 = qs(Format::E4M3, Granularity::tensor()), e5 = qs(Format::E5M2, Granularity::tensor());
  const auto x1 = quant::quantize_delayed(p.x.data(), p.tokens, p.in, e4, hx);
  const auto w1 = quant::quantize_delayed(p.w.data(), p.out, p.in, e4, hw);
  EXPECT_EQ(o1.y, quant::ref_gemm(x1, w1, hopper()));
  EXPECT_EQ(x1.row_major_scales()[0], 1.0f);
  const auto d1 = quant::quantize_delayed(p.dy.data(), p.tokens, p.out, e5, hdy);
  EXPECT_EQ(o1.dx, quant::ref_gemm(d1, quant::transpose(w1), hopper()));
  EXPECT_EQ(o1.dw, quant::ref_gemm(quant::transpose(d1), quant::transpose(x1), hopper()));
  const auto x2 = quant::quantize_delayed(p.x.data(), p.tokens, p.in, e4, hx);
  const auto w2 = quant::quantize_delayed(p.w.data(), p.out, p.in, e4, hw);
  EXPECT_NE(x2.row_major_scales()[0], 1.0f);
  EXPECT_EQ(o2.y, quant::ref_gemm(x2, w2, hopper()));
  const auto d2 = quant::quantize_delayed(p.dy.data(), p.tokens, p.out, e5, hdy);
  EXPECT_EQ(o2.dx, quant::ref_gemm(d2, quant::transpose(w2), hopper()));
  EXPECT_EQ(o2.dw, quant::ref_gemm(quant::transpose(d2), quant::transpose(x2), hopper()));
}

// fp32 and bf16: plain GEMMs in the compute dtype (bf16: BF16 activations and a BF16 copy of W, FP32
// accumulation, outputs rounded once), FP32 weight gradients.
TEST(Linear, Bf16AndFp32MatchDoubleProducts) {
  const Problem p = make_problem(33, 70, 45, 21);
  for (const char* spec : {"fp32", "bf16"}) {
    SCOPED_TRACE(spec);
    Harness h(spec, p.in, p.out);
    const DType dt = h.recipe.compute_dtype();
    const bool round = dt == DType::BF16;
    const Outputs o = run(h, p, h.ctx(dt));
    EXPECT_TRUE(o.kept.x.defined());  // plain recipes keep x itself
    EXPECT_EQ(o.kept.x.dtype(), dt);
    auto r = [&](float v) { return round ? num::bf16_round(v) : v; };
    const double out_tol = round ? 1.0 / 128 : 1e-5;  // a BF16 output carries 8 significant bits
    for (int64_t i = 0; i < p.tokens; ++i)
      for (int64_t j = 0; j < p.out; ++j) {
        double s = 0;
        for (int64_t k = 0; k < p.in; ++k) s += double(r(p.x[i * p.in + k])) * r(p.w[j * p.in + k]);
        ASSERT_NEAR(o.y[i * p.out + j], s, 1e-5 + out_tol * std::fabs(s));
      }
    for (int64_t i = 0; i < p.tokens; ++i)
      for (int64_t k = 0; k < p.in; ++k) {
        double s = 0;
        for (int64_t j = 0; j < p.out; ++j) s += double(r(p.dy[i * p.out + j])) * r(p.w[j * p.in + k]);
        ASSERT_NEAR(o.dx[i * p.in + k], s, 1e-8 + out_tol * std::fabs(s));
      }
    for (int64_t oo = 0; oo < p.out; ++oo)
      for (int64_t k = 0; k < p.in; ++k) {
        double s = 0;
        for (int64_t t = 0; t < p.tokens; ++t) s += double(r(p.dy[t * p.out + oo])) * r(p.x[t * p.in + k]);
        ASSERT_NEAR(o.dw[oo * p.in + k], s, 1e-8 + 1e-5 * std::fabs(s));  // FP32 weight gradients
      }
    EXPECT_EQ(h.lin.compute_weight_bytes(), p.out * p.in * (round ? 2 : 4));
  }
}

TEST(Linear, AccumulatesIntoGradients) {
  const Problem p = make_problem(64, 128, 128, 8);
  Harness h("fp8-deepseek", p.in, p.out);
  h.set_weight(p.w);
  const StepContext ctx = h.ctx();
  const Tensor x = as(p.x, p.tokens, p.in), dy = as(p.dy, p.tokens, p.out);
  const Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32), dx = Tensor::empty({p.tokens, p.in}, DType::F32);
  h.zero_grad();
  const LinearInput in = h.lin.prepare(ctx, x, true);
  h.lin.forward(ctx, in, y);
  const LinearInput k = h.lin.kept(ctx, in);
  h.lin.backward(ctx, dy, k, dx, false);
  const auto dx1 = dx.to_vector<float>(), dw1 = h.lin.grad().to_vector<float>();
  h.lin.backward(ctx, dy, k, dx, true);
  const auto dx2 = dx.to_vector<float>(), dw2 = h.lin.grad().to_vector<float>();
  for (size_t i = 0; i < dx1.size(); ++i) ASSERT_EQ(dx2[i], dx1[i] + dx1[i]);
  for (size_t i = 0; i < dw1.size(); ++i) ASSERT_EQ(dw2[i], dw1[i] + dw1[i]);
}

// The weight's compute copy (FP8 W and Wᵀ here) is made once per parameter update, not per GEMM: a change of the
// master weight shows only after ParameterSet::mark_updated().
TEST(Linear, ComputeCopyRefreshesOncePerParameterUpdate) {
  const Problem p = make_problem(32, 128, 128, 6);
  Harness h("fp8-deepseek", p.in, p.out);
  h.set_weight(p.w);
  const StepContext ctx = h.ctx();
  const Tensor x = as(p.x, p.tokens, p.in);
  const Tensor y1 = h.lin.forward(ctx, x);
  // 128×128 FP8 W and Wᵀ: 2 · (128·128 codes + 1 scale)
  EXPECT_EQ(h.lin.compute_weight_bytes(), 2 * (128 * 128 + 4));
  std::vector<float> w2 = p.w;
  for (float& v : w2) v *= -1.0f;
  Tensor weight = h.lin.weight();
  weight.copy_from(Tensor::from_vector(w2, weight.shape()));
  EXPECT_EQ(h.lin.forward(ctx, x).to_vector<float>(), y1.to_vector<float>());  // still the old copy
  h.params.mark_updated();
  const std::vector<float> flipped = h.lin.forward(ctx, x).to_vector<float>(), before = y1.to_vector<float>();
  for (size_t i = 0; i < flipped.size(); ++i) ASSERT_EQ(flipped[i], -before[i]);  // E4M3 is sign-symmetric
}

TEST(Linear, StochasticRoundingIsReproduciblePerStepAndVariesAcrossSteps) {
  const Problem p = make_problem(128, 128, 128, 4);
  auto run_step = [&](int64_t step) {
    Harness h("int8-blockwise", p.in, p.out);
    const Outputs o = run(h, p, h.ctx(DType::F32, step));
    return std::make_pair(o.dx, o.dw);
  };
  const auto a = run_step(5), b = run_step(5), c = run_step(6);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_NE(a.first, c.first);
  EXPECT_NE(a.second, c.second);
}

TEST(Linear, StridedViewsAndBadShapes) {
  const Problem p = make_problem(32, 128, 64, 2);
  Harness h("fp8-deepseek", p.in, p.out);
  h.set_weight(p.w);
  const StepContext ctx = h.ctx();
  // x as a column block of a wider matrix: same result as the contiguous x.
  std::vector<float> wide(static_cast<size_t>(p.tokens * (p.in + 16)), 7.0f);
  for (int64_t r = 0; r < p.tokens; ++r) std::memcpy(&wide[r * (p.in + 16) + 8], &p.x[r * p.in], p.in * sizeof(float));
  const Tensor xw = as(wide, p.tokens, p.in + 16).cols(8, 8 + p.in), x = as(p.x, p.tokens, p.in);
  EXPECT_EQ(h.lin.forward(ctx, x).to_vector<float>(), h.lin.forward(ctx, xw).to_vector<float>());
  const Tensor bad = Tensor::empty({p.tokens, p.out + 1}, DType::F32);
  EXPECT_THROW(h.lin.forward(ctx, h.lin.prepare(ctx, x, false), bad), Error);
  EXPECT_THROW(h.lin.prepare(ctx, as(p.x, p.tokens * 2, p.in / 2), false), Error);       // wrong width
  EXPECT_THROW(h.lin.prepare(ctx, as(p.x, p.tokens, p.in, DType::BF16), false), Error);  // not the compute dtype
  EXPECT_THROW(h.lin.backward(ctx, as(p.dy, p.tokens, p.out), LinearInput(), Tensor(), false), Error);
  EXPECT_THROW(h.lin.forward(ctx, x, nullptr, Tensor::from_vector(std::vector<int32_t>{0, 32}, {2})), Error);
}

// Operands a producer quantized itself (a fused kernel): x quantized in input_form / recompute_form and dy in
// dy_form give the same outputs and gradients as the plain tensors; where the recipe needs the plain tensor (bf16,
// delayed scaling, a sampled step) there is no form and the quantized entry points refuse with a sentence.
TEST(Linear, ProducerQuantizedOperandsEqualThePlainOnes) {
  const Problem p = make_problem(128, 256, 128, 23);
  Harness h("fp8-deepseek", p.in, p.out);
  h.set_weight(p.w);
  const StepContext ctx = h.ctx();
  const Tensor x = as(p.x, p.tokens, p.in), dy = as(p.dy, p.tokens, p.out);
  const auto in = h.lin.input_form(ctx), rec = h.lin.recompute_form(ctx), dyf = h.lin.dy_form(ctx);
  ASSERT_TRUE(in && rec && dyf);
  EXPECT_EQ(in->outputs, ops::QuantizeOutputs::Rowwise);
  EXPECT_EQ(rec->outputs, ops::QuantizeOutputs::Colwise);
  EXPECT_EQ(dyf->outputs, ops::QuantizeOutputs::Both);
  const auto q = [&](const Tensor& t, const Linear::QuantForm& f) {
    return ops::quantize(ctx.exec, t, f.spec, f.outputs, f.layout);
  };
  // Fprop
  const Tensor y_plain = h.lin.new_output(ctx, p.tokens), y_q = h.lin.new_output(ctx, p.tokens);
  h.lin.forward(ctx, h.lin.prepare(ctx, x, false), y_plain);
  h.lin.forward(ctx, h.lin.prepared(ctx, q(x, *in)), y_q);
  EXPECT_EQ(values(y_q), values(y_plain));
  // Dgrad and Wgrad from a recomputed x
  const auto grads = [&](bool quantized) {
    h.zero_grad();
    const Tensor dx = Tensor::empty({p.tokens, p.in}, DType::F32);
    if (quantized) {
      h.lin.backward(ctx, q(dy, *dyf), h.lin.recomputed(ctx, q(x, *rec)), dx, false);
    } else {
      h.lin.backward(ctx, dy, h.lin.recomputed(ctx, x), dx, false);
    }
    return std::make_pair(values(dx), values(h.lin.grad()));
  };
  const auto plain = grads(false), quantized = grads(true);
  EXPECT_EQ(quantized.first, plain.first);
  EXPECT_EQ(quantized.second, plain.second);
  // Refusals: the wrong payloads, and recipes or steps that need the plain tensors.
  const std::string e1 = test_util::error_of([&] { h.lin.prepared(ctx, q(x, *rec)); });
  EXPECT_NE(e1.find("row-wise payload under the recipe's Fprop spec"), std::string::npos) << e1;
  const std::string e2 = test_util::error_of([&] { h.lin.backward(ctx, q(dy, *in), LinearInput(), Tensor(), false); });
  EXPECT_NE(e2.find("both payloads under the recipe's Dgrad spec"), std::string::npos) << e2;
  const StepContext sampled = h.ctx(DType::F32, 0, true);
  EXPECT_FALSE(h.lin.input_form(sampled) || h.lin.recompute_form(sampled) || h.lin.dy_form(sampled));
  const std::string e3 = test_util::error_of([&] { h.lin.prepared(sampled, q(x, *in)); });
  EXPECT_NE(e3.find("prepares its input from the plain tensor"), std::string::npos) << e3;
  for (const char* recipe : {"bf16", "fp8-tensorwise"}) {
    Harness other(recipe, p.in, p.out);
    const StepContext c = other.ctx();
    EXPECT_FALSE(other.lin.input_form(c).has_value()) << recipe;
    EXPECT_FALSE(other.lin.dy_form(c).has_value()) << recipe;
    const std::string e =
        test_util::error_of([&] { other.lin.backward(c, q(dy, *dyf), LinearInput(), Tensor(), false); });
    EXPECT_NE(e.find("quantizes dy itself"), std::string::npos) << recipe << ": " << e;
  }
}

// MoE dispatch in FP8 (fp8-deepseek's dispatch_fp8): a routed expert's W1|W3 Fprop takes the dispatched tokens
// (E4M3, power-of-two 1×128 scales) as they are, and Wgrad their 128×1 re-tiling; its W2 Dgrad takes the
// gradient quantized as it would be dispatched (same format), and W2's Wgrad that gradient re-tiled. With
// dispatch_fp8=off the experts quantize like every other Linear.
TEST(Linear, DispatchedExpertOperandsUsePow2Fp8) {
  const Problem p = make_problem(64, 128, 128, 17);
  const auto pow2 = qs(Format::E4M3, Granularity::tile_1x128(), ScaleMode::PowerOfTwo);
  const auto pow2_col = qs(Format::E4M3, Granularity::tile_128x1(), ScaleMode::PowerOfTwo);
  const auto t1 = qs(Format::E4M3, Granularity::tile_1x128()), t128 = qs(Format::E4M3, Granularity::tile_128x1());
  const auto wq = quant::quantize(p.w, p.out, p.in, qs(Format::E4M3, Granularity::block_128x128()));
  for (const bool on : {true, false}) {
    SCOPED_TRACE(on ? "dispatch_fp8=on" : "dispatch_fp8=off");
    const std::string spec = on ? "fp8-deepseek" : "fp8-deepseek:dispatch_fp8=off";
    // W1|W3: the dispatched input
    Harness up(spec, p.in, p.out, recipe::LinearRole::ExpertUp);
    up.set_weight(p.w);
    const StepContext ctx = up.ctx();
    const Tensor x = as(p.x, p.tokens, p.in);
    LinearInput in;
    if (on) {
      const quant::QTensor xq = ops::quantize(ctx.exec, x, pow2);
      in = up.lin.dispatched(ctx, xq, x, true);
      EXPECT_THROW(up.lin.prepare(ctx, x, true), Error);  // it arrives dispatched, never prepared here
    } else {
      in = up.lin.prepare(ctx, x, true);
    }
    const Tensor y = Tensor::empty({p.tokens, p.out}, DType::F32);
    up.lin.forward(ctx, in, y);
    const auto xa = quant::quantize(p.x, p.tokens, p.in, on ? pow2 : t1);
    EXPECT_EQ(y.to_vector<float>(), quant::ref_gemm(xa, wq, hopper()));
    up.zero_grad();
    const Tensor dy = as(p.dy, p.tokens, p.out);
    up.lin.backward(ctx, dy, up.lin.kept(ctx, in), Tensor(), false);
    const auto xt = on ? quant::retile(xa, pow2_col) : quant::quantize(p.x, p.tokens, p.in, t128);
    EXPECT_EQ(up.lin.grad().to_vector<float>(),
              quant::ref_gemm(quant::transpose(quant::quantize(p.dy, p.tokens, p.out, t128)), quant::transpose(xt),
                              hopper()));
    // W2: the dispatched gradient
    Harness down(spec, p.in, p.out, recipe::LinearRole::ExpertDown);
    const Outputs o = run(down, p, down.ctx());
    const auto da = quant::quantize(p.dy, p.tokens, p.out, on ? pow2 : t1);
    EXPECT_EQ(o.dx, quant::ref_gemm(da, quant::transpose(wq), hopper()));
    const auto dt = on ? quant::retile(da, pow2_col) : quant::quantize(p.dy, p.tokens, p.out, t128);
    EXPECT_EQ(o.dw, quant::ref_gemm(quant::transpose(dt), quant::transpose(quant::quantize(p.x, p.tokens, p.in, t128)),
                                    hopper()));
  }
}

// A grouped Linear (the routed experts) computes each expert exactly as a Linear of its own on the expert's rows:
// Fprop, Dgrad and Wgrad, on the padded expert-ordered layout (an empty expert, padding rows, rows past the last
// expert), in every recipe.
TEST(Linear, GroupedEqualsOneLinearPerExpert) {
  const int64_t E = 3, in = 128, out = 64;
  for (const char* spec : {"fp32", "bf16", "fp8-deepseek:dispatch_fp8=off", "int8-blockwise:stochastic=off"}) {
    SCOPED_TRACE(spec);
    const recipe::RecipeConfig rc = recipe::parse_recipe(spec);
    const bool quantized = rc.quantized_gemms();
    const int64_t align = quantized ? 128 : 1;
    // expert 0: 70 tokens, expert 1: none, expert 2: 130 tokens; padded to the GEMM's row block
    const std::vector<int64_t> count = {70, 0, 130};
    std::vector<int32_t> off = {0};
    for (int64_t c : count) off.push_back(off.back() + static_cast<int32_t>((c + align - 1) / align * align));
    const int64_t rows = off.back() + align;  // a tail past the last expert, as the plan's capacity leaves
    const DType dt = rc.compute_dtype();
    std::vector<float> xv(static_cast<size_t>(rows * in), 0.0f), dyv(static_cast<size_t>(rows * out), 0.0f);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> n01;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = off[e]; r < off[e] + count[e]; ++r) {
        for (int64_t c = 0; c < in; ++c) xv[r * in + c] = n01(rng);
        for (int64_t c = 0; c < out; ++c) dyv[r * out + c] = 1e-3f * n01(rng);
      }
    const std::vector<float> wv = randn(E * out * in, 4, 0.05f);
    // the grouped Linear
    recipe::RecipeConfig r = rc;
    ActivationStore store(r);
    ParameterSet params;
    const Tensor w = Tensor::from_vector(wv, {E * out, in}), g = Tensor::zeros({E * out, in}, DType::F32);
    Linear grouped(params, w, g, "experts", recipe::LinearRole::ExpertUp, 0, E);
    StepContext ctx;
    ctx.exec = ExecCtx::cpu();
    ctx.training = true;
    ctx.recipe = &r;
    ctx.store = &store;
    ctx.dtype = dt;
    const Tensor offsets = Tensor::from_vector(off, {E + 1});
    const Tensor x = as(xv, rows, in, dt), dy = as(dyv, rows, out, dt);
    const Tensor y = Tensor::empty({rows, out}, dt), dx = Tensor::empty({rows, in}, dt);
    const LinearInput gi = grouped.prepare(ctx, x, true);
    grouped.forward(ctx, gi, y, offsets);
    grouped.backward(ctx, dy, grouped.kept(ctx, gi), dx, false, offsets);
    const std::vector<float> Y = values(y), DX = values(dx), DW = g.to_vector<float>();
    for (int64_t i = off[E] * out; i < rows * out; ++i) ASSERT_EQ(Y[i], 0.0f) << "the tail past the last expert";
    // one Linear per expert on its rows (the padding rows included: zeros in, zeros out)
    for (int64_t e = 0; e < E; ++e) {
      if (off[e + 1] == off[e]) {
        for (int64_t i = e * out * in; i < (e + 1) * out * in; ++i) ASSERT_EQ(DW[i], 0.0f) << "empty expert " << e;
        continue;
      }
      ParameterSet pe;
      const Tensor we = Tensor::from_vector(
          std::vector<float>(wv.begin() + e * out * in, wv.begin() + (e + 1) * out * in), {out, in});
      const Tensor ge = Tensor::zeros({out, in}, DType::F32);
      Linear single(pe, we, ge, "expert", recipe::LinearRole::DenseUp, 0);
      const int64_t n = off[e + 1] - off[e];
      const Tensor xe = x.rows(off[e], off[e + 1]), dye = dy.rows(off[e], off[e + 1]);
      const Tensor ye = Tensor::empty({n, out}, dt), dxe = Tensor::empty({n, in}, dt);
      const LinearInput si = single.prepare(ctx, xe, true);
      single.forward(ctx, si, ye);
      single.backward(ctx, dye, single.kept(ctx, si), dxe, false);
      const std::vector<float> ys = values(ye), dxs = values(dxe), dws = ge.to_vector<float>();
      for (int64_t i = 0; i < n * out; ++i) ASSERT_EQ(bits(Y[off[e] * out + i]), bits(ys[i])) << e << " y " << i;
      for (int64_t i = 0; i < n * in; ++i) ASSERT_EQ(bits(DX[off[e] * in + i]), bits(dxs[i])) << e << " dx " << i;
      for (int64_t i = 0; i < out * in; ++i) ASSERT_EQ(bits(DW[e * out * in + i]), bits(dws[i])) << e << " dW " << i;
    }
  }
}
