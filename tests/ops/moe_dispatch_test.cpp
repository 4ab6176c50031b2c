// MoE permute/unpermute: the plan covers every (token, choice) once, sorted by expert then token; permute and
// the gate-weighted unpermute against direct loops; FP64 gradient checks of both.
#include <gtest/gtest.h>

#include <cmath>

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
  const std::vector<int32_t> offsets = plan.expert_offsets.to_vector<int32_t>();
  ASSERT_EQ(offsets.size(), static_cast<size_t>(E + 1));
  EXPECT_EQ(plan.rows, N * K);  // align 1: no padding
  EXPECT_EQ(offsets.front(), 0);
  EXPECT_EQ(offsets.back(), N * K);
  std::vector<int> seen(static_cast<size_t>(N * K), 0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t j = slot[t * K + k];
      ++seen[j];
      EXPECT_EQ(tok[j], t);
      const int32_t e = S[t * K + k];
      EXPECT_GE(j, offsets[e]);
      EXPECT_LT(j, offsets[e + 1]);
    }
  for (int s : seen) EXPECT_EQ(s, 1);  // no token dropped, none duplicated
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = offsets[e] + 1; j < offsets[e + 1]; ++j) EXPECT_LT(tok[j - 1], tok[j]);
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

TEST(MoeDispatch, PaddedPlanAlignsEveryExpertAndZeroesThePadding) {
  std::mt19937_64 rng(3);
  const int64_t N = 45, K = 2, E = 5, D = 6, align = 16;
  // expert 4 chosen by nobody: an empty segment
  std::vector<int32_t> sv(static_cast<size_t>(N * K));
  for (int64_t t = 0; t < N; ++t) {
    sv[t * K] = static_cast<int32_t>(t % 4);
    sv[t * K + 1] = static_cast<int32_t>((t + 1 + t % 3) % 4);
    if (sv[t * K + 1] == sv[t * K]) sv[t * K + 1] = (sv[t * K] + 1) % 4;
  }
  const Tensor sel = Tensor::from_vector(sv, {N, K});
  const ops::MoePlan plan = ops::moe_build_plan(ExecCtx::cpu(), sel, E, align);
  EXPECT_EQ(plan.rows, ops::moe_plan_rows(N, K, E, align));
  EXPECT_EQ(plan.rows, (N * K + E * (align - 1) + align - 1) / align * align);
  const std::vector<int32_t> off = plan.expert_offsets.to_vector<int32_t>(), tok = plan.slot_token.to_vector<int32_t>();
  std::vector<int64_t> count(E, 0);
  for (int32_t e : sv) ++count[e];
  EXPECT_EQ(off[0], 0);
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(off[e] % align, 0);
    EXPECT_EQ(off[e + 1] - off[e], (count[e] + align - 1) / align * align) << e;
    for (int64_t j = off[e]; j < off[e + 1]; ++j) EXPECT_EQ(tok[j] >= 0, j < off[e] + count[e]) << j;
  }
  EXPECT_EQ(off[4], off[5]);  // the empty expert
  for (int64_t j = off[E]; j < plan.rows; ++j) EXPECT_EQ(tok[j], -1);
  // permute: token rows where a token is, zeros in every padding row (the output is poisoned first)
  const Tensor x = random_tensor({N, D}, DType::F64, rng);
  const Tensor xp = Tensor::from_vector(std::vector<double>(plan.rows * D, std::nan("")), {plan.rows, D});
  ops::moe_permute(ExecCtx::cpu(), x, plan, xp);
  const std::vector<double> X = x.to_vector<double>(), XP = xp.to_vector<double>();
  for (int64_t j = 0; j < plan.rows; ++j)
    for (int64_t c = 0; c < D; ++c) EXPECT_EQ(XP[j * D + c], tok[j] >= 0 ? X[tok[j] * D + c] : 0.0) << j;
  // unpermute reads only the token rows
  const Tensor gates = random_tensor({N, K}, DType::F64, rng), y = Tensor::empty({N, D}, DType::F64);
  ops::moe_unpermute(ExecCtx::cpu(), xp, plan, gates, y, false);
  const std::vector<double> G = gates.to_vector<double>(), Y = y.to_vector<double>();
  for (int64_t t = 0; t < N; ++t)
    for (int64_t c = 0; c < D; ++c) EXPECT_NEAR(Y[t * D + c], (G[t * K] + G[t * K + 1]) * X[t * D + c], 1e-14);
  EXPECT_THROW(ops::moe_build_plan(ExecCtx::cpu(), sel, E, 0), Error);
}

}  // namespace
}  // namespace fp8train
