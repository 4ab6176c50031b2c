// Fused cross-entropy: loss against log-softmax computed directly, ignored rows, the in-place gradient
// (grad_scale·(softmax − onehot)) by FP64 central differences, FP32 vs FP64.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/cross_entropy.h"

namespace fp8train {
namespace {
using testing::random_tensor;

TEST(CrossEntropy, LossMatchesLogSoftmaxAndSkipsIgnoredRows) {
  std::mt19937_64 rng(1);
  const int64_t N = 12, V = 30;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -5, 5);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 7) % V);
  tg[4] = -1;
  const Tensor targets = Tensor::from_vector(tg, {N});
  const std::vector<double> L = logits.to_vector<double>();
  const ops::CrossEntropyResult r = ops::cross_entropy_fused(ExecCtx::cpu(), logits, targets, false, 1.0);
  double expect = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (tg[i] < 0) continue;
    double s = 0;
    for (int64_t c = 0; c < V; ++c) s += std::exp(L[i * V + c]);
    expect += std::log(s) - L[i * V + tg[i]];
  }
  EXPECT_EQ(r.count, N - 1);
  EXPECT_NEAR(r.loss_sum, expect, 1e-12);
  EXPECT_EQ(logits.to_vector<double>(), L);  // without compute_grad the logits are untouched
  EXPECT_THROW(ops::cross_entropy_fused(ExecCtx::cpu(), logits, Tensor::from_vector(std::vector<int32_t>(N, V), {N}),
                                        false, 1.0),
               Error);
}

TEST(CrossEntropy, InPlaceGradientGradCheckF64) {
  std::mt19937_64 rng(2);
  const int64_t N = 9, V = 17;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -3, 3);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 5 + 2) % V);
  tg[2] = -1;
  const Tensor targets = Tensor::from_vector(tg, {N});
  const double scale = 1.0 / 8;
  auto loss = [&] {
    return scale * ops::cross_entropy_fused(ExecCtx::cpu(), logits.clone(), targets, false, 1.0).loss_sum;
  };
  const Tensor grad = logits.clone();
  ops::cross_entropy_fused(ExecCtx::cpu(), grad, targets, true, scale);
  EXPECT_LT(testing::grad_check_error(loss, logits, grad.to_vector<double>()), 1e-6);
  // an ignored row has a zero gradient
  for (int64_t c = 0; c < V; ++c) EXPECT_EQ(grad.to_vector<double>()[2 * V + c], 0.0);
}

TEST(CrossEntropy, F32MatchesF64) {
  std::mt19937_64 rng(3);
  const int64_t N = 64, V = 256;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -8, 8);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 37) % V);
  const Tensor targets = Tensor::from_vector(tg, {N});
  const Tensor l32 = testing::convert(logits, DType::F32), l64 = logits.clone();
  const auto a = ops::cross_entropy_fused(ExecCtx::cpu(), l32, targets, true, 1.0 / N);
  const auto b = ops::cross_entropy_fused(ExecCtx::cpu(), l64, targets, true, 1.0 / N);
  EXPECT_NEAR(a.loss_sum / b.loss_sum, 1.0, 1e-6);
  EXPECT_LT(testing::max_rel_diff(testing::as_doubles(l32), testing::as_doubles(l64)), 1e-5);
}

}  // namespace
}  // namespace fp8train
