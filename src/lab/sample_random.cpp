// Reproducible random data for the numerics lab (see sample_random.h).
#include "lab/sample_random.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"
#include "numerics/formats.h"

namespace fp8train::lab {
namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t stream_key(uint64_t seed, std::initializer_list<uint64_t> tags) {
  uint64_t k = splitmix64(seed ^ 0x6C61622D736E72ull);  // "lab-snr"
  for (uint64_t t : tags) k = splitmix64(k ^ splitmix64(t + 0x51ED27ull));
  return k;
}

uint32_t CounterRng::next_u32() { return num::counter_random_u32(key_, counter_++); }

double CounterRng::uniform() {
  const uint64_t hi = next_u32() >> 5;  // 27 bits
  const uint64_t lo = next_u32() >> 6;  // 26 bits
  const uint64_t bits53 = (hi << 26) | lo;
  return (static_cast<double>(bits53) + 0.5) * 0x1p-53;  // never 0 or 1
}

double CounterRng::normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  const double u1 = uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  have_spare_ = true;
  return r * std::cos(theta);
}

double CounterRng::student_t3() {
  const double z = normal();
  double chi2 = 0;
  for (int i = 0; i < 3; ++i) {
    const double w = normal();
    chi2 += w * w;
  }
  return z / std::sqrt(chi2 / 3.0);
}

uint64_t CounterRng::below(uint64_t n) {
  FP8T_CHECK(n >= 1, "CounterRng::below needs a positive bound, got {}", n);
  const uint64_t r = (static_cast<uint64_t>(next_u32()) << 32) | next_u32();
  return r % n;  // bias below 2^-32 for the small bounds used here
}

std::vector<float> normal_vector(CounterRng& rng, int64_t n, double sigma) {
  FP8T_CHECK(n >= 0, "vector length must be non-negative, got {}", n);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(sigma * rng.normal());
  return v;
}

std::vector<float> student_t3_vector(CounterRng& rng, int64_t n) {
  FP8T_CHECK(n >= 0, "vector length must be non-negative, got {}", n);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.student_t3());
  return v;
}

std::vector<float> correlated_with(CounterRng& rng, const std::vector<float>& a, double rho) {
  FP8T_CHECK(std::fabs(rho) <= 1.0, "a correlation must lie in [-1, 1], got {}", rho);
  const double c = std::sqrt(1.0 - rho * rho);
  std::vector<float> b(a.size());
  for (size_t i = 0; i < a.size(); ++i) b[i] = static_cast<float>(rho * a[i] + c * rng.normal());
  return b;
}

double pearson(const std::vector<float>& a, const std::vector<float>& b) {
  FP8T_CHECK(a.size() == b.size() && a.size() >= 2, "pearson needs two vectors of one length >= 2 ({} vs {})",
             a.size(), b.size());
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double da = a[i] - ma, db = b[i] - mb;
    sab += da * db;
    saa += da * da;
    sbb += db * db;
  }
  return sab / std::sqrt(saa * sbb);
}

std::vector<float> outlier_activations(CounterRng& rng, int64_t rows, int64_t cols, int count, double factor,
                                       std::vector<int64_t>* channels) {
  FP8T_CHECK(rows >= 0 && cols >= 0, "activation shape must be non-negative, got [{}, {}]", rows, cols);
  FP8T_CHECK(count >= 0 && count <= cols, "cannot pick {} outlier channels out of {}", count, cols);
  std::vector<int64_t> chosen;
  while (static_cast<int>(chosen.size()) < count) {
    const auto c = static_cast<int64_t>(rng.below(static_cast<uint64_t>(cols)));
    if (std::find(chosen.begin(), chosen.end(), c) == chosen.end()) chosen.push_back(c);
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<float> x = normal_vector(rng, rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c : chosen) x[r * cols + c] = static_cast<float>(x[r * cols + c] * factor);
  if (channels) *channels = chosen;
  return x;
}

std::vector<float> gradient_like(CounterRng& rng, int64_t rows, int64_t cols) {
  FP8T_CHECK(rows >= 0 && cols >= 0, "gradient shape must be non-negative, got [{}, {}]", rows, cols);
  std::vector<float> g(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double row_scale = 1e-6 * std::exp(rng.normal());
    for (int64_t c = 0; c < cols; ++c) {
      const double z = rng.normal(), v = rng.normal();
      g[r * cols + c] = static_cast<float>(row_scale * z * std::exp(0.75 * v));
    }
  }
  return g;
}

}  // namespace fp8train::lab
