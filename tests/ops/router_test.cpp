// DeepSeekMoE router: sigmoid scores, top-K over s + b, the bias changes selection but never gate values,
// group-limited routing never picks outside the kept groups, gates normalized × routed_scaling_factor,
// per-expert counts, FP64 gradient checks of the router and of the sequence-wise balance loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "gradcheck.h"
#include "ops/router.h"

namespace fp8train {
namespace {
using testing::random_tensor;

Tensor zeros_bias(int64_t e) { return Tensor::zeros({e}, DType::F32); }

TEST(Router, ScoresSelectionAndGatesFollowTheFormulas) {
  std::mt19937_64 rng(1);
  const int64_t N = 40, E = 8, K = 2;
  const Tensor logits = random_tensor({N, E}, DType::F64, rng, -3, 3);
  const ops::RouterConfig cfg{.top_k = K, .routed_scaling_factor = 2.5};
  const ops::RouterOutputs r = ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(E), cfg);
  const std::vector<double> L = logits.to_vector<double>(), S = r.scores.to_vector<double>();
  const std::vector<double> G = r.gates.to_vector<double>();
  const std::vector<int32_t> sel = r.selected.to_vector<int32_t>(), counts = r.expert_counts.to_vector<int32_t>();
  std::vector<int32_t> expect_counts(E, 0);
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t e = 0; e < E; ++e) EXPECT_NEAR(S[t * E + e], 1 / (1 + std::exp(-L[t * E + e])), 1e-15);
    std::vector<int32_t> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return S[t * E + a] > S[t * E + b]; });
    const double sum = S[t * E + order[0]] + S[t * E + order[1]];
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_EQ(sel[t * K + k], order[k]);
      EXPECT_NEAR(G[t * K + k], S[t * E + order[k]] / sum * 2.5, 1e-14);
      ++expect_counts[order[k]];
    }
  }
  EXPECT_EQ(counts, expect_counts);
}

TEST(Router, BiasChangesSelectionButNotGateValues) {
  std::mt19937_64 rng(2);
  const int64_t N = 64, E = 8, K = 2;
  const Tensor logits = random_tensor({N, E}, DType::F64, rng, -2, 2);
  const ops::RouterConfig cfg{.top_k = K, .routed_scaling_factor = 1.0};
  const ops::RouterOutputs plain = ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(E), cfg);
  std::vector<float> b(E, 0.0f);
  b[5] = 10.0f;  // expert 5 wins every selection
  const ops::RouterOutputs biased = ops::router_forward(ExecCtx::cpu(), logits, Tensor::from_vector(b, {E}), cfg);
  const std::vector<double> S = biased.scores.to_vector<double>(), G = biased.gates.to_vector<double>();
  const std::vector<int32_t> sel = biased.selected.to_vector<int32_t>(), sel0 = plain.selected.to_vector<int32_t>();
  EXPECT_EQ(biased.scores.to_vector<double>(), plain.scores.to_vector<double>());  // scores ignore the bias
  int changed = 0;
  for (int64_t t = 0; t < N; ++t) {
    EXPECT_EQ(sel[t * K], 5);
    changed += (sel[t * K] != sel0[t * K] || sel[t * K + 1] != sel0[t * K + 1]) ? 1 : 0;
    // gate values use the scores only: s_sel / Σ s_sel (no bias inside)
    const double s0 = S[t * E + sel[t * K]], s1 = S[t * E + sel[t * K + 1]];
    EXPECT_NEAR(G[t * K], s0 / (s0 + s1), 1e-14);
    EXPECT_NEAR(G[t * K + 1], s1 / (s0 + s1), 1e-14);
  }
  EXPECT_GT(changed, N / 2);
  EXPECT_EQ(biased.expert_counts.to_vector<int32_t>()[5], N);
}

TEST(Router, GroupLimitedRoutingStaysInsideTheKeptGroups) {
  std::mt19937_64 rng(3);
  const int64_t N = 500, E = 16, K = 3, G = 4, M = 2, gs = E / G;
  const Tensor logits = random_tensor({N, E}, DType::F64, rng, -3, 3);
  std::vector<float> b(E);
  for (auto& x : b) x = static_cast<float>(std::uniform_real_distribution<double>(-0.3, 0.3)(rng));
  const Tensor bias = Tensor::from_vector(b, {E});
  const ops::RouterConfig cfg{.top_k = K, .n_group = G, .topk_group = M, .routed_scaling_factor = 1.0};
  const ops::RouterOutputs r = ops::router_forward(ExecCtx::cpu(), logits, bias, cfg);
  const ops::RouterOutputs ungrouped = ops::router_forward(ExecCtx::cpu(), logits, bias, {.top_k = K});
  const std::vector<double> S = r.scores.to_vector<double>();
  const std::vector<int32_t> sel = r.selected.to_vector<int32_t>(), free_sel = ungrouped.selected.to_vector<int32_t>();
  int differs = 0;
  for (int64_t t = 0; t < N; ++t) {
    // group key = sum of the two largest (s + b) of the group; kept = the M best groups
    std::vector<std::pair<double, int>> gk;
    for (int g = 0; g < G; ++g) {
      std::vector<double> keys;
      for (int64_t e = g * gs; e < (g + 1) * gs; ++e) keys.push_back(S[t * E + e] + b[e]);
      std::sort(keys.rbegin(), keys.rend());
      gk.push_back({keys[0] + keys[1], g});
    }
    std::sort(gk.begin(), gk.end(), [](auto& a, auto& c) { return a.first > c.first; });
    std::set<int> kept{gk[0].second, gk[1].second};
    std::set<int32_t> chosen;
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_TRUE(kept.count(static_cast<int>(sel[t * K + k] / gs))) << "token " << t << " picked outside kept groups";
      chosen.insert(sel[t * K + k]);
    }
    EXPECT_EQ(chosen.size(), static_cast<size_t>(K));  // distinct experts
    // and the choice is the top-K of s + b among the kept groups' experts
    std::vector<std::pair<double, int>> cand;
    for (int64_t e = 0; e < E; ++e)
      if (kept.count(static_cast<int>(e / gs))) cand.push_back({S[t * E + e] + b[e], static_cast<int>(e)});
    std::sort(cand.begin(), cand.end(), [](auto& a, auto& c) { return a.first > c.first; });
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(sel[t * K + k], cand[k].second);
    for (int64_t k = 0; k < K; ++k) differs += sel[t * K + k] != free_sel[t * K + k];
  }
  EXPECT_GT(differs, 0);  // the group limit is not vacuous on this data
}

TEST(Router, RejectsBadConfigs) {
  const Tensor logits = Tensor::zeros({4, 8}, DType::F32);
  EXPECT_THROW(ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(8), {.top_k = 2, .n_group = 3}), Error);
  EXPECT_THROW(ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(8), {.top_k = 3, .n_group = 4, .topk_group = 1}),
               Error);
  EXPECT_THROW(ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(8), {.top_k = 2, .n_group = 4, .topk_group = 5}),
               Error);
  EXPECT_THROW(ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(7), {.top_k = 2}), Error);
}

TEST(Router, GradCheckF64) {
  std::mt19937_64 rng(4);
  const int64_t N = 30, E = 8, K = 2;
  const Tensor logits = random_tensor({N, E}, DType::F64, rng, -2, 2);
  const Tensor bias = Tensor::from_vector(std::vector<float>{0.1f, -0.2f, 0.05f, 0, 0.3f, -0.1f, 0, 0.2f}, {E});
  const ops::RouterConfig cfg{.top_k = K, .n_group = 4, .topk_group = 2, .routed_scaling_factor = 1.7};
  const Tensor wg = random_tensor({N, K}, DType::F64, rng), ws = random_tensor({N, E}, DType::F64, rng);
  auto loss = [&] {
    const ops::RouterOutputs r = ops::router_forward(ExecCtx::cpu(), logits, bias, cfg);
    return testing::weighted_sum(r.gates, wg) + testing::weighted_sum(r.scores, ws);
  };
  const ops::RouterOutputs r = ops::router_forward(ExecCtx::cpu(), logits, bias, cfg);
  const Tensor dlogits = Tensor::empty({N, E}, DType::F64);
  ops::router_backward(ExecCtx::cpu(), r.scores, r.selected, wg, ws, cfg, dlogits);
  EXPECT_LT(testing::grad_check_error(loss, logits, dlogits.to_vector<double>()), 1e-6);
}

TEST(BalanceLoss, ValueMatchesFormulaAndGradCheckF64) {
  std::mt19937_64 rng(5);
  const int64_t batch = 3, T = 20, E = 8, K = 2;
  const Tensor logits = random_tensor({batch * T, E}, DType::F64, rng, -2, 2);
  const ops::RouterConfig cfg{.top_k = K};
  const ops::RouterOutputs r = ops::router_forward(ExecCtx::cpu(), logits, zeros_bias(E), cfg);
  const double alpha = 0.01;
  const double loss = ops::seq_balance_loss(ExecCtx::cpu(), r.scores, r.selected, batch, alpha);
  // direct: per sequence α·Σ_i f_i·P_i, averaged
  const std::vector<double> S = r.scores.to_vector<double>();
  const std::vector<int32_t> sel = r.selected.to_vector<int32_t>();
  double expect = 0;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> f(E, 0), P(E, 0);
    for (int64_t t = b * T; t < (b + 1) * T; ++t) {
      for (int64_t k = 0; k < K; ++k) f[sel[t * K + k]] += static_cast<double>(E) / (K * T);
      double tot = 0;
      for (int64_t e = 0; e < E; ++e) tot += S[t * E + e];
      for (int64_t e = 0; e < E; ++e) P[e] += S[t * E + e] / tot / T;
    }
    for (int64_t e = 0; e < E; ++e) expect += alpha * f[e] * P[e] / batch;
  }
  EXPECT_NEAR(loss, expect, 1e-15);
  // perfectly balanced f and uniform scores give α (the loss minimum for uniform affinities)
  // gradient w.r.t. the scores, selection held fixed
  const Tensor scores = r.scores.clone();
  auto l = [&] { return ops::seq_balance_loss(ExecCtx::cpu(), scores, r.selected, batch, alpha); };
  const Tensor ds = Tensor::zeros({batch * T, E}, DType::F64);
  ops::seq_balance_loss_backward(ExecCtx::cpu(), scores, r.selected, batch, alpha, 1.0, ds);
  EXPECT_LT(testing::grad_check_error(l, scores, ds.to_vector<double>()), 1e-6);
}

TEST(Router, F32MatchesF64) {
  std::mt19937_64 rng(6);
  const int64_t N = 200, E = 16, K = 4;
  const Tensor logits = random_tensor({N, E}, DType::F64, rng, -3, 3);
  const Tensor dg = random_tensor({N, K}, DType::F64, rng);
  const ops::RouterConfig cfg{.top_k = K, .n_group = 4, .topk_group = 2, .routed_scaling_factor = 2.0};
  auto run = [&](DType dt) {
    const Tensor lg = testing::convert(logits, dt);
    const ops::RouterOutputs r = ops::router_forward(ExecCtx::cpu(), lg, zeros_bias(E), cfg);
    const Tensor dl = Tensor::empty({N, E}, dt);
    ops::router_backward(ExecCtx::cpu(), r.scores, r.selected, testing::convert(dg, dt), Tensor(), cfg, dl);
    return std::tuple{r.selected.to_vector<int32_t>(), testing::as_doubles(r.gates), testing::as_doubles(dl)};
  };
  const auto a = run(DType::F32), b = run(DType::F64);
  EXPECT_EQ(std::get<0>(a), std::get<0>(b));
  EXPECT_LT(testing::max_rel_diff(std::get<1>(a), std::get<1>(b)), 1e-6);
  EXPECT_LT(testing::max_rel_diff(std::get<2>(a), std::get<2>(b)), 1e-5);
}

}  // namespace
}  // namespace fp8train
