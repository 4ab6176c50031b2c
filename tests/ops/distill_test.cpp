// Cross-entropy + top-k distillation (ops/distill.h): the KL against a direct computation, the in-place gradient of
// CE + w·KL by FP64 central differences, weight 0 reducing to the plain fused cross-entropy, ignored rows, BF16
// against F64, and bad teacher inputs refused.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/cross_entropy.h"
#include "ops/distill.h"

namespace fp8train {
namespace {
using testing::random_tensor;

struct Teacher {
  Tensor ids, probs;
  std::vector<int32_t> id;
  std::vector<float> p;
};

// k distinct tokens per row with positive probabilities summing to 1.
Teacher make_teacher(int64_t rows, int64_t vocab, int64_t k, std::mt19937_64& rng) {
  Teacher t;
  std::uniform_real_distribution<double> u(0.05, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    std::vector<double> w(static_cast<size_t>(k));
    for (double& x : w) sum += x = u(rng);
    for (int64_t j = 0; j < k; ++j) {
      t.id.push_back(static_cast<int32_t>((r * 3 + j * 5) % vocab));
      t.p.push_back(static_cast<float>(w[static_cast<size_t>(j)] / sum));
    }
  }
  t.ids = Tensor::from_vector(t.id, {rows, k});
  t.probs = Tensor::from_vector(t.p, {rows, k});
  return t;
}

TEST(Distill, KlMatchesTheDefinitionAndIgnoredRowsCountNothing) {
  std::mt19937_64 rng(1);
  const int64_t N = 10, V = 40, K = 4;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -4, 4);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 7) % V);
  tg[3] = -1;
  const Teacher t = make_teacher(N, V, K, rng);
  const std::vector<double> L = logits.to_vector<double>();
  const ops::DistillResult r =
      ops::cross_entropy_distill(ExecCtx::cpu(), logits, Tensor::from_vector(tg, {N}), t.ids, t.probs, 0.5, false, 1.0);
  double ce = 0, kl = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (tg[i] < 0) continue;
    double s = 0;
    for (int64_t c = 0; c < V; ++c) s += std::exp(L[i * V + c]);
    const double lse = std::log(s);
    ce += lse - L[i * V + tg[i]];
    for (int64_t j = 0; j < K; ++j) {
      const double p = t.p[i * K + j];
      kl += p * (std::log(p) - (L[i * V + t.id[i * K + j]] - lse));
    }
  }
  EXPECT_EQ(r.count, N - 1);
  EXPECT_NEAR(r.ce_sum, ce, 1e-12);
  EXPECT_NEAR(r.kl_sum, kl, 1e-6);  // the probabilities are F32
  EXPECT_GT(r.kl_sum, 0.0);
  EXPECT_EQ(logits.to_vector<double>(), L);  // without compute_grad the logits are untouched
}

TEST(Distill, InPlaceGradientGradCheckF64) {
  std::mt19937_64 rng(2);
  const int64_t N = 7, V = 19, K = 5;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -3, 3);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 5 + 2) % V);
  tg[1] = -1;
  const Tensor targets = Tensor::from_vector(tg, {N});
  const Teacher t = make_teacher(N, V, K, rng);
  const double w = 0.7, scale = 1.0 / 6;
  auto loss = [&] {
    const auto r = ops::cross_entropy_distill(ExecCtx::cpu(), logits.clone(), targets, t.ids, t.probs, w, false, 1.0);
    return scale * (r.ce_sum + w * r.kl_sum);
  };
  const Tensor grad = logits.clone();
  ops::cross_entropy_distill(ExecCtx::cpu(), grad, targets, t.ids, t.probs, w, true, scale);
  EXPECT_LT(testing::grad_check_error(loss, logits, grad.to_vector<double>()), 1e-6);
  for (int64_t c = 0; c < V; ++c) EXPECT_EQ(grad.to_vector<double>()[1 * V + c], 0.0);
}

TEST(Distill, WeightZeroIsThePlainCrossEntropy) {
  std::mt19937_64 rng(3);
  const int64_t N = 16, V = 64, K = 8;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -6, 6);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 11) % V);
  const Tensor targets = Tensor::from_vector(tg, {N});
  const Teacher t = make_teacher(N, V, K, rng);
  const Tensor a = logits.clone(), b = logits.clone();
  const auto rd = ops::cross_entropy_distill(ExecCtx::cpu(), a, targets, t.ids, t.probs, 0.0, true, 0.25);
  const auto rc = ops::cross_entropy_fused(ExecCtx::cpu(), b, targets, true, 0.25);
  EXPECT_NEAR(rd.ce_sum, rc.loss_sum, 1e-12);
  EXPECT_LT(testing::max_rel_diff(a.to_vector<double>(), b.to_vector<double>()), 1e-12);
}

TEST(Distill, Bf16MatchesF64AndBadTeachersAreRefused) {
  std::mt19937_64 rng(4);
  const int64_t N = 32, V = 128, K = 6;
  const Tensor logits = random_tensor({N, V}, DType::F64, rng, -8, 8);
  std::vector<int32_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = static_cast<int32_t>((i * 37) % V);
  const Tensor targets = Tensor::from_vector(tg, {N});
  const Teacher t = make_teacher(N, V, K, rng);
  // BF16 logits (rounded from the F64 ones) and the same values in F64.
  std::vector<bf16> codes;
  std::vector<double> rounded;
  for (double x : logits.to_vector<double>()) {
    codes.push_back(bf16(static_cast<float>(x)));
    rounded.push_back(static_cast<double>(static_cast<float>(codes.back())));
  }
  const Tensor l16 = Tensor::from_vector(codes, {N, V}), l64 = Tensor::from_vector(rounded, {N, V});
  const auto a = ops::cross_entropy_distill(ExecCtx::cpu(), l16, targets, t.ids, t.probs, 1.0, true, 1.0 / N);
  const auto b = ops::cross_entropy_distill(ExecCtx::cpu(), l64, targets, t.ids, t.probs, 1.0, true, 1.0 / N);
  EXPECT_NEAR(a.kl_sum / b.kl_sum, 1.0, 1e-5);
  std::vector<double> g16;
  for (bf16 g : l16.to_vector<bf16>()) g16.push_back(static_cast<double>(static_cast<float>(g)));
  EXPECT_LT(testing::max_rel_diff(g16, l64.to_vector<double>()), 1e-2);

  std::vector<int32_t> bad_id = t.id;
  bad_id[5] = static_cast<int32_t>(V);
  EXPECT_THROW(ops::cross_entropy_distill(ExecCtx::cpu(), logits.clone(), targets, Tensor::from_vector(bad_id, {N, K}),
                                          t.probs, 1.0, false, 1.0),
               Error);
  std::vector<float> bad_p = t.p;
  bad_p[2] = -0.5f;
  EXPECT_THROW(ops::cross_entropy_distill(ExecCtx::cpu(), logits.clone(), targets, t.ids,
                                          Tensor::from_vector(bad_p, {N, K}), 1.0, false, 1.0),
               Error);
  EXPECT_THROW(ops::cross_entropy_distill(ExecCtx::cpu(), logits.clone(), targets, t.ids.narrow(0, 0, N - 1),
                                          t.probs.narrow(0, 0, N - 1), 1.0, false, 1.0),
               Error);
}

}  // namespace
}  // namespace fp8train
