// LR schedule phases (warmup, constant, cosine, final), batch-size warmup, and global-norm clipping
// (value against an FP64 reference, clipping rule, thread-count independence).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "optim/clip.h"
#include "optim/schedule.h"

using namespace fp8train;
using namespace fp8train::optim;

TEST(LrSchedule, FollowsTheFourPhases) {
  LrSchedule s{1e-3, 1e-4, 10, 50, 150};
  s.validate();
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);        // (0+1)/10 of peak
  EXPECT_DOUBLE_EQ(s.at(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(49), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(50), 1e-3);       // cosine starts at peak
  EXPECT_NEAR(s.at(100), 5.5e-4, 1e-15);  // halfway: mean of peak and final
  EXPECT_GT(s.at(149), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(150), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(10000), 1e-4);
  for (int64_t t = 50; t < 150; ++t) EXPECT_GE(s.at(t), s.at(t + 1)) << t;  // decay is monotone
}

TEST(LrSchedule, RejectsInconsistentPhases) {
  EXPECT_THROW((LrSchedule{1e-3, 1e-4, 10, 5, 20}.validate()), Error);
  EXPECT_THROW((LrSchedule{1e-3, 1e-4, 0, 20, 10}.validate()), Error);
  EXPECT_THROW((LrSchedule{1e-3, 2e-3, 0, 0, 0}.validate()), Error);
  EXPECT_THROW((LrSchedule{-1.0, 0.0, 0, 0, 0}.validate()), Error);
  EXPECT_NO_THROW((LrSchedule{1e-3, 0.0, 0, 0, 0}.validate()));
}

TEST(BatchSizeSchedule, RampsLinearlyThenHolds) {
  BatchSizeSchedule b{4, 16, 12};
  b.validate();
  EXPECT_EQ(b.at(0), 4);
  EXPECT_EQ(b.at(6), 10);
  EXPECT_EQ(b.at(12), 16);
  EXPECT_EQ(b.at(1000), 16);
  for (int64_t t = 0; t < 12; ++t) EXPECT_LE(b.at(t), b.at(t + 1));
  EXPECT_EQ((BatchSizeSchedule{0, 16, 12}.at(0)), 16);  // no warmup
  EXPECT_THROW((BatchSizeSchedule{20, 16, 12}.validate()), Error);
  EXPECT_THROW((BatchSizeSchedule{0, 0, 0}.validate()), Error);
}

namespace {
std::vector<float> pattern(size_t n, float scale) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = scale * std::sin(0.37f * static_cast<float>(i) + 0.1f);
  return g;
}
}  // namespace

TEST(ClipGradNorm, NormMatchesFp64AndClipsToMax) {
  std::vector<float> a = pattern(100000, 0.01f), b = pattern(77, 3.0f), va(a.size()), vb(b.size());
  ParamList params{{"a", va.data(), a.data(), a.size(), true}, {"b", vb.data(), b.data(), b.size(), true}};
  double ref = 0.0;
  for (float x : a) ref += static_cast<double>(x) * x;
  for (float x : b) ref += static_cast<double>(x) * x;
  ref = std::sqrt(ref);
  EXPECT_NEAR(global_grad_norm(params), ref, 1e-12 * ref);
  const double before = clip_grad_norm(params, 1.0);
  EXPECT_NEAR(before, ref, 1e-12 * ref);
  EXPECT_GT(before, 1.0);
  EXPECT_NEAR(global_grad_norm(params), 1.0, 1e-5);
  // Under the threshold nothing changes.
  const std::vector<float> a_copy = a;
  clip_grad_norm(params, 10.0);
  EXPECT_EQ(a, a_copy);
  zero_grads(params);
  EXPECT_EQ(global_grad_norm(params), 0.0);
}

TEST(ClipGradNorm, SameBitsForAnyThreadCount) {
  std::vector<float> g = pattern(300001, 0.02f), v(g.size());
  ParamList params{{"g", v.data(), g.data(), g.size(), true}};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = global_grad_norm(params);
  omp_set_num_threads(2);
  const double two = global_grad_norm(params);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
}

TEST(ClipGradNorm, NonFiniteGradientGivesNonFiniteNorm) {
  std::vector<float> g{1.0f, std::nanf(""), 2.0f}, v(3);
  ParamList params{{"g", v.data(), g.data(), g.size(), true}};
  EXPECT_FALSE(std::isfinite(global_grad_norm(params)));
  const std::vector<float> before = {1.0f, 2.0f};
  clip_grad_norm(params, 1.0);  // not clipped (and not made worse) when the norm is not finite
  EXPECT_EQ(g[0], 1.0f);
}
