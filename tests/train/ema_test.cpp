// The host-side weight EMA (train/ema.h): the blend after each update equals the FP32 formula exactly, the
// asynchronous updates are ordered with the weight changes (before_weights_change), values can be restored, and bad
// arguments are refused.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/error.h"
#include "train/ema.h"

using namespace fp8train;
using namespace fp8train::train;

TEST(WeightEma, FollowsTheFormulaExactlyAcrossManyAsynchronousUpdates) {
  const int64_t n = 100003;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> w(static_cast<size_t>(n));
  for (float& x : w) x = normal(rng);
  Tensor weights = Tensor::from_vector(w, {n}, MemCategory::Weights, Device::cpu());
  const double decay = 0.9;
  WeightEma ema(weights, decay);
  std::vector<float> ref = w;
  const float d = static_cast<float>(decay), k = static_cast<float>(1.0 - decay);
  for (int step = 0; step < 20; ++step) {
    ema.before_weights_change();  // as the trainer does before the optimizer step
    float* p = weights.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] += 0.01f * static_cast<float>((i + step) % 7) - 0.02f;
    ema.update();
    for (int64_t i = 0; i < n; ++i) ref[static_cast<size_t>(i)] = d * ref[static_cast<size_t>(i)] + k * p[i];
  }
  const std::vector<float>& got = ema.values();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], ref[i]) << "element " << i;
  // The EMA lags the weights: it differs from them after moving weights.
  EXPECT_NE(got[5], weights.data<float>()[5]);
}

TEST(WeightEma, RestoresValuesAndRefusesBadArguments) {
  Tensor weights = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, MemCategory::Weights, Device::cpu());
  WeightEma ema(weights, 0.5);
  ema.set_values({10, 20, 30});
  ema.update();
  EXPECT_EQ(ema.values(), (std::vector<float>{5.5f, 11.0f, 16.5f}));
  EXPECT_THROW(ema.set_values({1, 2}), Error);
  EXPECT_THROW(WeightEma(weights, 1.0), Error);
  EXPECT_THROW(WeightEma(Tensor::from_vector(std::vector<double>{1.0}, {1}, MemCategory::Weights, Device::cpu()), 0.5),
               Error);
}
