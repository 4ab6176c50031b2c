// LR schedule phases (warmup, constant, cosine, final), batch-size warmup, piecewise-constant schedules (text form,
// DeepSeek-V3's λ and γ, the step each piece begins at, the error naming each bad piece), and global-norm clipping over
// a gradient arena (value against an FP64 reference and, bit for bit, against the per-parameter chunked sum; clipping
// rule; thread-count independence).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "param_arenas.h"

using namespace fp8train;
using namespace fp8train::optim;
using fp8train::optim::testing::make_arenas;
using fp8train::optim::testing::TestParam;

TEST(LrSchedule, FollowsTheFourPhases) {
  LrSchedule s{1e-3, 1e-4, 10, 50, 150};
  s.validate();
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);  // (0+1)/10 of peak
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

TEST(PiecewiseSchedule, DeepSeekV3sLambdaAndGammaSwitchAtTheRoundedStep) {
  const PiecewiseSchedule lambda = parse_piecewise_schedule("0.3,0.1@0.676", 1000, 0, 10);
  ASSERT_EQ(lambda.pieces.size(), 2u);
  EXPECT_EQ(lambda.at(0), 0.3);
  EXPECT_EQ(lambda.at(675), 0.3);
  EXPECT_EQ(lambda.at(676), 0.1);
  EXPECT_EQ(lambda.at(999), 0.1);
  EXPECT_EQ(lambda.at(5000), 0.1);  // past the planned steps: the last piece holds
  const PiecewiseSchedule gamma = parse_piecewise_schedule("0.001,0@0.966", 1000, 0, 1);
  EXPECT_EQ(gamma.at(965), 0.001);
  EXPECT_EQ(gamma.at(966), 0.0);
  // Starts round to the nearest step as the LR decay points do (2.5 -> 3, 5 -> 5); spaces around pieces are fine.
  const PiecewiseSchedule three = parse_piecewise_schedule(" 1, 2@0.25 ,3@0.5", 10, 0, 10);
  EXPECT_EQ(three.at(2), 1.0);
  EXPECT_EQ(three.at(3), 2.0);
  EXPECT_EQ(three.at(4), 2.0);
  EXPECT_EQ(three.at(5), 3.0);
  // Two starts that round to the same step: the later piece wins from that step on.
  const PiecewiseSchedule tight = parse_piecewise_schedule("1,2@0.5,3@0.55", 4, 0, 10);
  EXPECT_EQ(tight.at(1), 1.0);
  EXPECT_EQ(tight.at(2), 3.0);
  EXPECT_EQ(parse_piecewise_schedule("0.5@0", 3, 0, 1).at(2), 0.5);  // the first start may be given as 0
  const PiecewiseSchedule constant = PiecewiseSchedule::constant(0.25, 7);
  constant.validate();
  for (int64_t t = 0; t < 8; ++t) EXPECT_EQ(constant.at(t), 0.25);
}

TEST(PiecewiseSchedule, ErrorsNameTheBadPiece) {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_piecewise_schedule(text, 100, 0, 10);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_of(""), "the schedule is empty (expected VALUE or VALUE,VALUE@START,...)");
  EXPECT_EQ(error_of("0.3,,0.1@0.5"), "piece 2 of '0.3,,0.1@0.5' is empty (expected VALUE or VALUE@START)");
  EXPECT_EQ(error_of("0.3,"), "piece 2 of '0.3,' is empty (expected VALUE or VALUE@START)");
  EXPECT_EQ(error_of("fast"), "piece 'fast': the value 'fast' is not a number");
  EXPECT_EQ(error_of("0.3,nan@0.5"), "piece 'nan@0.5': the value 'nan' is not a number");
  EXPECT_EQ(error_of("0.3x"), "piece '0.3x': the value '0.3x' is not a number");
  EXPECT_EQ(error_of("0.3,0.1@half"), "piece '0.1@half': the start 'half' is not a number");
  EXPECT_EQ(error_of("0.3,0.1@"), "piece '0.1@': the start '' is not a number");
  EXPECT_EQ(error_of("0.3,0.1@1.5"), "piece '0.1@1.5': the start must be in [0, 1)");
  EXPECT_EQ(error_of("0.3,0.1@1"), "piece '0.1@1': the start must be in [0, 1)");
  EXPECT_EQ(error_of("0.3,0.1@-0.1"), "piece '0.1@-0.1': the start must be in [0, 1)");
  EXPECT_EQ(error_of("0.3,0.1@0.5,0.2@0.5"), "piece '0.2@0.5': the start must come after the previous piece's (0.5)");
  EXPECT_EQ(error_of("0.3,0.1@0.5,0.2@0.4"), "piece '0.2@0.4': the start must come after the previous piece's (0.5)");
  EXPECT_EQ(error_of("0.3,0.1"), "piece '0.1': every piece after the first needs its start, as VALUE@START");
  EXPECT_EQ(error_of("0.3@0.2"), "piece '0.3@0.2': the first piece starts at 0 (give its value alone)");
  EXPECT_EQ(error_of("11"), "piece '11': the value must be in [0, 10]");
  EXPECT_EQ(error_of("0.3,-1@0.5"), "piece '-1@0.5': the value must be in [0, 10]");
  // A schedule built in code is checked too.
  EXPECT_THROW((PiecewiseSchedule{{{1.0, 0.5}}, 10}.validate()), Error);
  EXPECT_THROW((PiecewiseSchedule{{{1.0, 0.0}, {2.0, 0.0}}, 10}.validate()), Error);
  EXPECT_THROW((PiecewiseSchedule{{}, 10}.validate()), Error);
}

namespace {
std::vector<float> pattern(size_t n, float scale) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = scale * std::sin(0.37f * static_cast<float>(i) + 0.1f);
  return g;
}
}  // namespace

// The gradient norm's summation before it became an op over the arena: per parameter in registration order,
// chunks of 16384 summed in FP64 from 0, the chunk sums added in order, the parameter sums added in order.
double per_parameter_norm(const std::vector<std::vector<float>>& grads) {
  double total = 0.0;
  for (const std::vector<float>& g : grads) {
    const long n = static_cast<long>(g.size());
    double sum = 0.0;
    for (long begin = 0; begin < n; begin += 16384) {
      double s = 0.0;
      for (long i = begin; i < std::min(n, begin + 16384); ++i)
        s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
      sum += s;
    }
    total += sum;
  }
  return std::sqrt(total);
}

const ExecCtx& cpu() { return ExecCtx::cpu(); }

TEST(ClipGradNorm, NormMatchesFp64AndClipsToMax) {
  const std::vector<float> a = pattern(100000, 0.01f), b = pattern(77, 3.0f);
  const ParamArenas params =
      make_arenas({{"a", std::vector<float>(a.size()), a, true}, {"b", std::vector<float>(b.size()), b, false}});
  double ref = 0.0;
  for (float x : a) ref += static_cast<double>(x) * x;
  for (float x : b) ref += static_cast<double>(x) * x;
  ref = std::sqrt(ref);
  EXPECT_NEAR(global_grad_norm(cpu(), params), ref, 1e-12 * ref);
  const double before = clip_grad_norm(cpu(), params, 1.0);
  EXPECT_NEAR(before, ref, 1e-12 * ref);
  EXPECT_GT(before, 1.0);
  EXPECT_NEAR(global_grad_norm(cpu(), params), 1.0, 1e-5);
  // clipping multiplied each gradient by one FP32 factor
  const float factor = static_cast<float>(1.0 / (before + 1e-6));
  const std::vector<float> clipped = params.grads.view("a").to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(clipped[i], a[i] * factor) << i;
  // Under the threshold nothing changes.
  const std::vector<float> all = params.grads.flat().to_vector<float>();
  clip_grad_norm(cpu(), params, 10.0);
  EXPECT_EQ(params.grads.flat().to_vector<float>(), all);
  zero_grads(params);
  EXPECT_EQ(global_grad_norm(cpu(), params), 0.0);
  for (float g : params.grads.flat().to_vector<float>()) ASSERT_EQ(g, 0.0f);
}

// The arena layout (decay regions first, padding between regions) must not change a bit of the norm: it equals the
// per-parameter sum in registration order.
TEST(ClipGradNorm, EqualsThePerParameterSumInRegistrationOrderBitForBit) {
  std::vector<TestParam> ps;
  std::vector<std::vector<float>> grads;
  const size_t sizes[] = {16384, 5, 40000, 1, 16385, 300, 70001};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    std::vector<float> g = pattern(sizes[i], 0.001f * static_cast<float>(i + 1));
    grads.push_back(g);
    std::string name = "p";
    name += std::to_string(i);  // (not "p" + ...: GCC 12 warns falsely about that overload)
    ps.push_back({name, std::vector<float>(sizes[i]), g, i % 3 != 1});
  }
  const ParamArenas params = make_arenas(ps);
  EXPECT_EQ(global_grad_norm(cpu(), params), per_parameter_norm(grads));
}

TEST(ClipGradNorm, SameBitsForAnyThreadCount) {
  const std::vector<float> g = pattern(300001, 0.02f);
  const ParamArenas params = make_arenas(
      {{"g", std::vector<float>(g.size()), g, true}, {"h", std::vector<float>(70000), pattern(70000, 1.0f), true}});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = global_grad_norm(cpu(), params);
  omp_set_num_threads(2);
  const double two = global_grad_norm(cpu(), params);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
}

TEST(ClipGradNorm, NonFiniteGradientGivesNonFiniteNorm) {
  const ParamArenas params = make_arenas({{"g", std::vector<float>(3), {1.0f, std::nanf(""), 2.0f}, true}});
  EXPECT_FALSE(std::isfinite(global_grad_norm(cpu(), params)));
  clip_grad_norm(cpu(), params, 1.0);  // not clipped (and not made worse) when the norm is not finite
  EXPECT_EQ(params.grads.view("g").to_vector<float>()[0], 1.0f);
}
