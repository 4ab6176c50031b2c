// GEMM: all transpose combinations and strided views against a naive FP64 product; alpha/beta; BF16 input
// rounding exact; the Linear gradients (dgrad dx = dy·W, wgrad dW = dyᵀ·x) checked by central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gradcheck.h"
#include "numerics/formats.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"

namespace fp8train {
namespace {
using testing::as_doubles;
using testing::random_tensor;

// Naive op(a)·op(b) on host doubles.
std::vector<double> naive(const Tensor& a, bool ta, const Tensor& b, bool tb) {
  const Tensor ac = a.clone(), bc = b.clone();
  const std::vector<double> A = as_doubles(ac), B = as_doubles(bc);
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1), n = tb ? b.size(0) : b.size(1);
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? A[p * m + i] : A[i * k + p];
        const double y = tb ? B[j * k + p] : B[p * n + j];
        s += x * y;
      }
      c[i * n + j] = s;
    }
  return c;
}

TEST(Gemm, TransposesAndStridesMatchNaiveF64) {
  std::mt19937_64 rng(1);
  const int64_t m = 37, n = 53, k = 29;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // embed each operand in a wider buffer so lda/ldb exceed the column count
      const Tensor abuf = random_tensor({ta ? k : m, (ta ? m : k) + 5}, DType::F64, rng);
      const Tensor bbuf = random_tensor({tb ? n : k, (tb ? k : n) + 3}, DType::F64, rng);
      const Tensor a = abuf.cols(2, 2 + (ta ? m : k));
      const Tensor b = bbuf.cols(1, 1 + (tb ? k : n));
      const Tensor c = ops::matmul(ExecCtx::cpu(), a, ta, b, tb);
      EXPECT_LT(testing::max_rel_diff(as_doubles(c), naive(a, ta, b, tb)), 1e-14) << ta << tb;
    }
}

TEST(Gemm, LargeSplitAcrossThreadsMatchesF64) {
  // big enough for the row split (and a column split when n > m)
  std::mt19937_64 rng(2);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{300, 70}, {70, 300}}) {
    const Tensor a = random_tensor({m, 64}, DType::F32, rng), b = random_tensor({n, 64}, DType::F32, rng);
    const Tensor c = ops::matmul(ExecCtx::cpu(), a, false, b, true);
    EXPECT_LT(testing::max_rel_diff(as_doubles(c), naive(a, false, b, true)), 1e-5);
  }
}

TEST(Gemm, AlphaBetaAccumulate) {
  std::mt19937_64 rng(3);
  const Tensor a = random_tensor({8, 6}, DType::F64, rng), b = random_tensor({6, 5}, DType::F64, rng);
  const Tensor c = random_tensor({8, 5}, DType::F64, rng);
  const std::vector<double> c0 = c.to_vector<double>(), ab = naive(a, false, b, false);
  ops::gemm(ExecCtx::cpu(), a, false, b, false, c, {.alpha = 0.5, .beta = 2.0});
  const std::vector<double> got = c.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], 0.5 * ab[i] + 2.0 * c0[i], 1e-14);
}

TEST(Gemm, Bf16InputRoundingIsExact) {
  std::mt19937_64 rng(4);
  const Tensor a = random_tensor({33, 40}, DType::F32, rng), b = random_tensor({40, 21}, DType::F32, rng);
  Tensor ar = a.clone(), br = b.clone();
  for (int64_t i = 0; i < ar.numel(); ++i) ar.data<float>()[i] = num::bf16_round(ar.data<float>()[i]);
  for (int64_t i = 0; i < br.numel(); ++i) br.data<float>()[i] = num::bf16_round(br.data<float>()[i]);
  const Tensor rounded =
      ops::matmul(ExecCtx::cpu(), a, false, b, false, MemCategory::Workspace, {.round_inputs_bf16 = true});
  const Tensor reference = ops::matmul(ExecCtx::cpu(), ar, false, br, false);
  EXPECT_EQ(rounded.to_vector<float>(), reference.to_vector<float>());
  // and it differs from the unrounded product (the option is not a no-op)
  EXPECT_NE(ops::matmul(ExecCtx::cpu(), a, false, b, false).to_vector<float>(), reference.to_vector<float>());
  EXPECT_THROW(ops::matmul(ExecCtx::cpu(), testing::convert(a, DType::F64), false, testing::convert(b, DType::F64),
                           false, MemCategory::Workspace, {.round_inputs_bf16 = true}),
               Error);
}

TEST(Gemm, LinearGradientsByCentralDifferences) {
  // L = Σ w∘(x·Wᵀ): dgrad dx = dy·W, wgrad dW = dyᵀ·x with dy = w.
  std::mt19937_64 rng(5);
  const Tensor x = random_tensor({7, 5}, DType::F64, rng), W = random_tensor({4, 5}, DType::F64, rng);
  const Tensor w = random_tensor({7, 4}, DType::F64, rng);
  auto loss = [&] { return testing::weighted_sum(ops::matmul(ExecCtx::cpu(), x, false, W, true), w); };
  const Tensor dx = ops::matmul(ExecCtx::cpu(), w, false, W, false);
  const Tensor dW = ops::matmul(ExecCtx::cpu(), w, true, x, false);
  EXPECT_LT(testing::grad_check_error(loss, x, dx.to_vector<double>()), 1e-9);
  EXPECT_LT(testing::grad_check_error(loss, W, dW.to_vector<double>()), 1e-9);
}

TEST(Gemm, RejectsMismatchedShapesDtypesAndLayouts) {
  const Tensor a = Tensor::zeros({4, 3}, DType::F32), b = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_THROW(ops::matmul(ExecCtx::cpu(), a, false, b, false), Error);  // inner 3 vs 4
  EXPECT_THROW(ops::matmul(ExecCtx::cpu(), a, false, Tensor::zeros({3, 2}, DType::F64), false), Error);
  const Tensor c = Tensor::zeros({4, 4}, DType::F32);
  EXPECT_THROW(ops::gemm(ExecCtx::cpu(), a, false, b, true, c.cols(0, 3)), Error);
  EXPECT_THROW(ops::gemm(ExecCtx::cpu(), Tensor::zeros({2, 4, 3}, DType::F32), false, b, true, c), Error);
  EXPECT_NO_THROW(ops::gemm(ExecCtx::cpu(), a, false, b, true, c));
}

}  // namespace
}  // namespace fp8train

namespace fp8train {
namespace {

// Bit-level equality of two tensors of the same dtype (NaN payloads included).
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Expert-ordered offsets with an empty expert and rows past the last expert.
Tensor grouped_offsets() { return Tensor::from_vector(std::vector<int32_t>{0, 7, 7, 40, 51}, {5}); }

TEST(GemmGrouped, EachExpertIsExactlyGemmOnItsViews) {
  std::mt19937_64 rng(11);
  const int64_t E = 4, R = 60, K = 24, N = 20;  // rows 51..59 belong to no expert
  const std::vector<int32_t> off = grouped_offsets().to_vector<int32_t>();
  for (DType dt : {DType::F32, DType::BF16})
    for (bool trans_b : {true, false}) {
      Tensor a = testing::random_tensor({R, K}, DType::F32, rng);
      Tensor b = testing::random_tensor(trans_b ? Shape{E * N, K} : Shape{E * K, N}, DType::F32, rng);
      if (dt == DType::BF16) {
        Tensor a16 = Tensor::empty(a.shape(), dt), b16 = Tensor::empty(b.shape(), dt);
        ops::copy(ExecCtx::cpu(), a, a16);
        ops::copy(ExecCtx::cpu(), b, b16);
        a = a16;
        b = b16;
      }
      const Tensor c = Tensor::from_vector(std::vector<float>(R * N, std::nanf("")), {R, N});
      ops::gemm_grouped(ExecCtx::cpu(), ops::GroupedGemmKind::M, a, b, trans_b, c, grouped_offsets());
      const Tensor want = Tensor::from_vector(std::vector<float>(R * N, std::nanf("")), {R, N});
      for (int64_t e = 0; e < E; ++e) {
        if (off[e + 1] == off[e]) continue;
        const int64_t br = trans_b ? N : K;
        ops::gemm(ExecCtx::cpu(), a.rows(off[e], off[e + 1]), false, b.rows(e * br, (e + 1) * br), trans_b,
                  want.rows(off[e], off[e + 1]));
      }
      EXPECT_TRUE(same_bits(c, want)) << dtype_name(dt) << " trans_b " << trans_b;  // untouched rows stay NaN
    }
}

TEST(GemmGrouped, KGroupedIsExactlyTheWgradOfEachExpertAndScalesEmptyOnes) {
  std::mt19937_64 rng(12);
  const int64_t E = 4, R = 60, M = 12, N = 20;
  const std::vector<int32_t> off = grouped_offsets().to_vector<int32_t>();
  const Tensor a = testing::random_tensor({R, M}, DType::F32, rng), b = testing::random_tensor({R, N}, DType::F32, rng);
  const Tensor c0 = testing::random_tensor({E * M, N}, DType::F32, rng);
  for (double beta : {0.0, 1.0, 0.5}) {
    const Tensor c = c0.clone(), want = c0.clone();
    ops::gemm_grouped(ExecCtx::cpu(), ops::GroupedGemmKind::K, a, b, false, c, grouped_offsets(),
                      {.alpha = 1.0, .beta = beta});
    for (int64_t e = 0; e < E; ++e) {
      const Tensor ce = want.rows(e * M, (e + 1) * M);
      if (off[e + 1] == off[e]) {  // the empty expert: c_e = beta·c_e, and beta = 0 writes zeros (c not read)
        if (beta == 0.0) {
          ops::fill(ExecCtx::cpu(), ce, 0.0);
        } else {
          ops::scale(ExecCtx::cpu(), ce, beta);
        }
        continue;
      }
      ops::gemm(ExecCtx::cpu(), a.rows(off[e], off[e + 1]), true, b.rows(off[e], off[e + 1]), false, ce,
                {.alpha = 1.0, .beta = beta});
    }
    EXPECT_TRUE(same_bits(c, want)) << "beta " << beta;
  }
}

TEST(GemmGrouped, BadOffsetsAndShapesAreClearErrors) {
  const Tensor a = Tensor::zeros({10, 8}, DType::F32), b = Tensor::zeros({2 * 6, 8}, DType::F32);
  const Tensor c = Tensor::zeros({10, 6}, DType::F32);
  auto run = [&](std::vector<int32_t> off) {
    ops::gemm_grouped(ExecCtx::cpu(), ops::GroupedGemmKind::M, a, b, true, c,
                      Tensor::from_vector(off, {static_cast<int64_t>(off.size())}));
  };
  EXPECT_NO_THROW(run({0, 4, 10}));
  EXPECT_THROW(run({0, 6, 4}), Error);   // decreasing
  EXPECT_THROW(run({0, 4, 11}), Error);  // past the rows
  EXPECT_THROW(run({-1, 4, 10}), Error);
  EXPECT_THROW(run({0, 2, 4, 10}), Error);  // 3 experts but b holds 12 rows: not 3 blocks of the right width
}

}  // namespace
}  // namespace fp8train
