// Embedding, RMSNorm, RoPE and SwiGLU: forward against direct formulas, FP64 central-difference gradient checks
// (< 1e-6 relative), and FP32 against FP64 on the same inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace fp8train {
namespace {
using testing::as_doubles;
using testing::grad_check_error;
using testing::random_tensor;
using testing::weighted_sum;

TEST(Embedding, ForwardGathersAndBackwardScatterAddsRepeatedIds) {
  std::mt19937_64 rng(1);
  const Tensor table = random_tensor({6, 40}, DType::F64, rng);
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{3, 0, 3, 5, 3}, {5});
  const Tensor out = Tensor::empty({5, 40}, DType::F64);
  ops::embedding_forward(ExecCtx::cpu(), ids, table, out);
  const std::vector<double> T = table.to_vector<double>(), O = out.to_vector<double>();
  for (int c = 0; c < 40; ++c) {
    EXPECT_EQ(O[0 * 40 + c], T[3 * 40 + c]);
    EXPECT_EQ(O[3 * 40 + c], T[5 * 40 + c]);
  }
  const Tensor w = random_tensor({5, 40}, DType::F64, rng);
  auto loss = [&] {
    ops::embedding_forward(ExecCtx::cpu(), ids, table, out);
    return weighted_sum(out, w);
  };
  const Tensor dtable = Tensor::zeros({6, 40}, DType::F64);
  ops::embedding_backward(ExecCtx::cpu(), ids, w, dtable);
  EXPECT_LT(grad_check_error(loss, table, dtable.to_vector<double>()), 1e-9);
  EXPECT_THROW(
      ops::embedding_forward(ExecCtx::cpu(), Tensor::from_vector(std::vector<int32_t>{6}, {1}), table, out.rows(0, 1)),
      Error);
}

TEST(RmsNorm, ForwardMatchesFormula) {
  std::mt19937_64 rng(2);
  const Tensor x = random_tensor({5, 24}, DType::F64, rng), w = random_tensor({24}, DType::F64, rng);
  const Tensor y = Tensor::empty({5, 24}, DType::F64), rstd = Tensor::empty({5}, DType::F64);
  ops::rmsnorm_forward(ExecCtx::cpu(), x, w, 1e-6, y, rstd);
  const std::vector<double> X = x.to_vector<double>(), W = w.to_vector<double>(), Y = y.to_vector<double>();
  for (int r = 0; r < 5; ++r) {
    double ss = 0;
    for (int c = 0; c < 24; ++c) ss += X[r * 24 + c] * X[r * 24 + c];
    const double rs = 1.0 / std::sqrt(ss / 24 + 1e-6);
    for (int c = 0; c < 24; ++c) EXPECT_NEAR(Y[r * 24 + c], X[r * 24 + c] * rs * W[c], 1e-14);
  }
}

TEST(RmsNorm, GradCheckF64OnStridedViews) {
  std::mt19937_64 rng(3);
  // 130 rows: three 64-row chunks in the dweight reduction; x is a column block of a wider buffer
  const Tensor xbuf = random_tensor({130, 20}, DType::F64, rng);
  const Tensor x = xbuf.cols(3, 19), w = random_tensor({16}, DType::F64, rng, 0.5, 1.5);
  const Tensor dy = random_tensor({130, 16}, DType::F64, rng);
  const Tensor y = Tensor::empty({130, 16}, DType::F64), rstd = Tensor::empty({130}, DType::F64);
  auto loss = [&] {
    ops::rmsnorm_forward(ExecCtx::cpu(), x, w, 1e-6, y, rstd);
    return weighted_sum(y, dy);
  };
  loss();
  const Tensor dxbuf = Tensor::zeros({130, 20}, DType::F64);
  const Tensor dw = Tensor::zeros({16}, DType::F64);
  ops::rmsnorm_backward(ExecCtx::cpu(), x, w, rstd, dy, dxbuf.cols(3, 19), dw, false);
  EXPECT_LT(grad_check_error(loss, xbuf, dxbuf.to_vector<double>()), 1e-6);
  EXPECT_LT(grad_check_error(loss, w, dw.to_vector<double>()), 1e-6);
  // accumulate_dx adds onto what is there
  ops::rmsnorm_backward(ExecCtx::cpu(), x, w, rstd, dy, dxbuf.cols(3, 19), Tensor(), true);
  const std::vector<double> twice = dxbuf.to_vector<double>();
  std::vector<double> once = twice;
  ops::rmsnorm_backward(ExecCtx::cpu(), x, w, rstd, dy, dxbuf.cols(3, 19), Tensor(), false);
  once = dxbuf.to_vector<double>();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
}

TEST(RmsNorm, F32MatchesF64) {
  std::mt19937_64 rng(4);
  const Tensor x = random_tensor({70, 64}, DType::F64, rng), w = random_tensor({64}, DType::F64, rng);
  const Tensor dy = random_tensor({70, 64}, DType::F64, rng);
  auto run = [&](DType dt) {
    const Tensor xx = testing::convert(x, dt), ww = testing::convert(w, dt), dd = testing::convert(dy, dt);
    const Tensor y = Tensor::empty({70, 64}, dt), rstd = Tensor::empty({70}, dt), dx = Tensor::empty({70, 64}, dt);
    const Tensor dw = Tensor::zeros({64}, dt);
    ops::rmsnorm_forward(ExecCtx::cpu(), xx, ww, 1e-6, y, rstd);
    ops::rmsnorm_backward(ExecCtx::cpu(), xx, ww, rstd, dd, dx, dw, false);
    return std::array<std::vector<double>, 3>{as_doubles(y), as_doubles(dx), as_doubles(dw)};
  };
  const auto f32 = run(DType::F32), f64 = run(DType::F64);
  for (int i = 0; i < 3; ++i) EXPECT_LT(testing::max_rel_diff(f32[i], f64[i]), 1e-5) << i;
}

TEST(Rope, RotatesPairsByPositionAndInverseUndoes) {
  std::mt19937_64 rng(5);
  const int64_t seq = 6, heads = 2, dim = 8, batch = 2;
  // the rope part sits at columns [4, 12) of each 12-wide head
  const Tensor buf = random_tensor({batch * seq, heads, 12}, DType::F64, rng);
  const std::vector<double> before = buf.to_vector<double>();
  const Tensor x = buf.narrow(2, 4, dim);
  ops::rope_(ExecCtx::cpu(), x, seq, 10000.0, false);
  const std::vector<double> after = buf.to_vector<double>();
  for (int64_t r = 0; r < batch * seq; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>((r * heads + h) * 12);
      for (int c = 0; c < 4; ++c) EXPECT_EQ(after[base + c], before[base + c]);  // nope part untouched
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double angle = static_cast<double>(r % seq) * std::pow(10000.0, -2.0 * i / dim);
        const double x0 = before[base + 4 + 2 * i], x1 = before[base + 5 + 2 * i];
        EXPECT_NEAR(after[base + 4 + 2 * i], x0 * std::cos(angle) - x1 * std::sin(angle), 1e-14);
        EXPECT_NEAR(after[base + 5 + 2 * i], x0 * std::sin(angle) + x1 * std::cos(angle), 1e-14);
      }
    }
  ops::rope_(ExecCtx::cpu(), x, seq, 10000.0, true);
  EXPECT_LT(testing::max_rel_diff(buf.to_vector<double>(), before), 1e-15);
}

TEST(Rope, GradCheckF64) {
  std::mt19937_64 rng(6);
  const Tensor x = random_tensor({10, 3, 6}, DType::F64, rng), w = random_tensor({10, 3, 6}, DType::F64, rng);
  auto loss = [&] {
    const Tensor y = x.clone();
    ops::rope_(ExecCtx::cpu(), y, 5, 500.0, false);
    return weighted_sum(y, w);
  };
  const Tensor dx = w.clone();
  ops::rope_(ExecCtx::cpu(), dx, 5, 500.0, true);  // the backward is the inverse rotation
  EXPECT_LT(grad_check_error(loss, x, dx.to_vector<double>()), 1e-6);
  EXPECT_THROW(ops::rope_(ExecCtx::cpu(), x, 4, 500.0, false), Error);  // 10 rows are not whole sequences of 4
}

TEST(Swiglu, ForwardFormulaAndGradCheckF64) {
  std::mt19937_64 rng(7);
  const int64_t rows = 9, f = 7;
  const Tensor in = random_tensor({rows, 2 * f}, DType::F64, rng, -3, 3), w = random_tensor({rows, f}, DType::F64, rng);
  const Tensor out = Tensor::empty({rows, f}, DType::F64);
  ops::swiglu_forward(ExecCtx::cpu(), in, out);
  const std::vector<double> I = in.to_vector<double>(), O = out.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < f; ++c) {
      const double g = I[r * 2 * f + c], u = I[r * 2 * f + f + c];
      EXPECT_NEAR(O[r * f + c], g / (1 + std::exp(-g)) * u, 1e-14);
    }
  auto loss = [&] {
    ops::swiglu_forward(ExecCtx::cpu(), in, out);
    return weighted_sum(out, w);
  };
  const Tensor din = Tensor::empty({rows, 2 * f}, DType::F64);
  ops::swiglu_backward(ExecCtx::cpu(), in, w, din);
  EXPECT_LT(grad_check_error(loss, in, din.to_vector<double>()), 1e-6);
}

TEST(Swiglu, F32MatchesF64) {
  std::mt19937_64 rng(8);
  const Tensor in = random_tensor({50, 96}, DType::F64, rng, -4, 4), d = random_tensor({50, 48}, DType::F64, rng);
  auto run = [&](DType dt) {
    const Tensor i = testing::convert(in, dt), dd = testing::convert(d, dt);
    const Tensor o = Tensor::empty({50, 48}, dt), di = Tensor::empty({50, 96}, dt);
    ops::swiglu_forward(ExecCtx::cpu(), i, o);
    ops::swiglu_backward(ExecCtx::cpu(), i, dd, di);
    return std::pair{as_doubles(o), as_doubles(di)};
  };
  const auto a = run(DType::F32), b = run(DType::F64);
  EXPECT_LT(testing::max_rel_diff(a.first, b.first), 1e-6);
  EXPECT_LT(testing::max_rel_diff(a.second, b.second), 1e-6);
}

}  // namespace
}  // namespace fp8train
