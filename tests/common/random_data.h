// Random test inputs shared by the layer tests (header only; include as "../common/random_data.h").
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace fp8train::test_data {

// n samples of N(0, sigma^2) from a fixed seed (std::mt19937_64, so the same values on every platform run).
inline std::vector<float> randn(int64_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// A language-model batch: `batch` sequences of `seq` tokens uniform below vocab, and each token's next token as its
// target (-1 after a sequence's last token: nothing to predict), flattened [batch·seq].
struct LmTokens {
  std::vector<int32_t> inputs, targets;
};
inline LmTokens lm_tokens(int64_t vocab, int64_t batch, int64_t seq, uint64_t seed) {
  const int64_t n = batch * seq;
  std::mt19937_64 rng(seed);
  LmTokens t{std::vector<int32_t>(static_cast<size_t>(n)), std::vector<int32_t>(static_cast<size_t>(n))};
  for (int64_t i = 0; i < n; ++i) t.inputs[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % vocab);
  for (int64_t i = 0; i < n; ++i)
    t.targets[static_cast<size_t>(i)] = (i % seq == seq - 1) ? -1 : t.inputs[static_cast<size_t>(i + 1)];
  return t;
}

}  // namespace fp8train::test_data
