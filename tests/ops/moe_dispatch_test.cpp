// MoE permute/unpermute: the plan covers every (token, choice) once, sorted by expert then token; permute and
// the gate-weighted unpermute against direct loops; FP64 gradient checks of both.
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/moe_dispatch.h"

namespace fp8train {
namespace {
using testing::random_tensor;

Tensor random_selection(std::mt19937_64& rng, int64_t N, int64_t K, int64_t E) {
  std::vector<int32_t> sel(static_cast<size_t>(N * K));
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int32_t> experts(E);
    for (int e = 0; e < E; ++e) experts[e] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < K; ++k) sel[t * K + k] = experts[k];
  }
  return Tensor::from_vector(sel, {N, K});
}

TEST(MoeDispatch, PlanIsASortedPermutationOfAllPairs) {
  std::mt19937_64 rng(1);
  const int64_t N = 50, K = 3, E = 6;
  const Tensor sel = random_selection(rng, N, K, E);
  const ops::MoePlan plan = ops::moe_build_plan(ExecCtx::cpu(), sel, E);
  const std::vector<int32_t> S = sel.to_vector<int32_t>(), tok = plan.slot_token.to_vector<int32_t>();
  const std::vector<int32_t> slot = plan.choice_slot.to_vector<int32_t>();
  ASSERT_EQ(plan.offsets.size(), static_cast<size_t>(E + 1));
  EXPECT_EQ(plan.offsets.front(), 0);
  EXPECT_EQ(plan.offsets.back(), N * K);
  std::vector<int> seen(static_cast<size_t>(N * K), 0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t j = slot[t * K + k];
      ++seen[j];
      EXPECT_EQ(tok[j], t);
      const int32_t e = S[t * K + k];
      EXPECT_GE(j, plan.offsets[e]);
      EXPECT_LT(j, plan.offsets[e + 1]);
    }
  for (int s : seen) EXPECT_EQ(s, 1);  // no token dropped, none duplicated
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = plan.offsets[e] + 1; j < plan.offsets[e + 1]; ++j) EXPECT_LT(tok[j - 1], tok[j]);
  EXPECT_THROW(ops::moe_build_plan(ExecCtx::cpu(), sel, 2), Error);  // indices beyond 2 experts
}

TEST(MoeDispatch, PermuteUnpermuteAndGradCheckF64) {
  std::mt19937_64 rng(2);
  const int64_t N = 20, K = 2, E = 4, D = 7;
  const Tensor sel = random_selection(rng, N, K, E);
  const ops::MoePlan plan = ops::moe_build_plan(ExecCtx::cpu(), sel, E);
  const Tensor x = random_tensor({N, D}, DType::F64, rng);
  const Tensor xp = Tensor::empty({N * K, D}, DType::F64);
  ops::moe_permute(ExecCtx::cpu(), x, plan, xp);
  const std::vector<int32_t> tok = plan.slot_token.to_vector<int32_t>();
  const std::vector<double> X = x.to_vector<double>(), XP = xp.to_vector<double>();
  for (int64_t j = 0; j < N * K; ++j)
    for (int64_t c = 0; c < D; ++c) EXPECT_EQ(XP[j * D + c], X[tok[j] * D + c]);

  // permute backward: L = Σ w∘permute(x)
  const Tensor wp = random_tensor({N * K, D}, DType::F64, rng);
  auto lp = [&] {
    ops::moe_permute(ExecCtx::cpu(), x, plan, xp);
    return testing::weighted_sum(xp, wp);
  };
  const Tensor dx = Tensor::empty({N, D}, DType::F64);
  ops::moe_permute_backward(ExecCtx::cpu(), wp, plan, dx, false);
  EXPECT_LT(testing::grad_check_error(lp, x, dx.to_vector<double>()), 1e-9);

  // unpermute: y[t] = Σ_k g[t,k]·yp[slot(t,k)]; L = Σ w∘y
  const Tensor yp = random_tensor({N * K, D}, DType::F64, rng), gates = random_tensor({N, K}, DType::F64, rng);
  const Tensor w = random_tensor({N, D}, DType::F64, rng), y = Tensor::empty({N, D}, DType::F64);
  auto lu = [&] {
    ops::moe_unpermute(ExecCtx::cpu(), yp, plan, gates, y, false);
    return testing::weighted_sum(y, w);
  };
  const Tensor dyp = Tensor::empty({N * K, D}, DType::F64), dg = Tensor::empty({N, K}, DType::F64);
  ops::moe_unpermute_backward(ExecCtx::cpu(), w, yp, plan, gates, dyp, dg);
  EXPECT_LT(testing::grad_check_error(lu, yp, dyp.to_vector<double>()), 1e-9);
  EXPECT_LT(testing::grad_check_error(lu, gates, dg.to_vector<double>()), 1e-9);
  // accumulate adds onto y
  ops::moe_unpermute(ExecCtx::cpu(), yp, plan, gates, y, false);
  const std::vector<double> once = y.to_vector<double>();
  ops::moe_unpermute(ExecCtx::cpu(), yp, plan, gates, y, true);
  const std::vector<double> twice = y.to_vector<double>();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-14);
}

}  // namespace
}  // namespace fp8train
