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

}  // namespace fp8train::test_data
