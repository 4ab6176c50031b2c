// Reproducible random data for the numerics lab. Every stream is a pure function of a 64-bit key (the run's
// seed mixed with the experiment, the configuration and the sample index), drawn from the counter-based
// generator of numerics/formats.h, so a study gives the same numbers whatever the thread count or order.
//
// Distributions (all element values float32, computed in double then rounded once):
//   normal            N(0, 1), Box–Muller on two 53-bit uniforms
//   student_t3        Student-t with ν = 3 degrees of freedom (z / sqrt(χ²₃ / 3); variance 3, heavy tails)
//   correlated pair   a = z1, b = ρ·z1 + √(1−ρ²)·z2 with z1, z2 independent N(0, 1): corr(a, b) = ρ exactly
//                     in the population (the published study's b = ρ·z1 + (1−ρ)·z2 has corr ρ/√(ρ²+(1−ρ)²))
//   outlier activations  [rows, cols] N(0, 1) with `count` distinct channels (columns) multiplied by `factor`
//   gradient-like     [rows, cols] 1e-6 · e^{u_row} · z · e^{0.75 v}: per-token magnitudes spread over decades
//                     (u_row ~ N(0, 1) per row) and heavy-tailed elements (z, v ~ N(0, 1)), like activation
//                     gradients in LLM training
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace fp8train::lab {

// Mixes a base seed with tags (experiment id, configuration, sample, ...) into an independent stream key.
uint64_t stream_key(uint64_t seed, std::initializer_list<uint64_t> tags);

// A sequential reader of one counter-based stream.
class CounterRng {
 public:
  explicit CounterRng(uint64_t key) : key_(key) {}
  uint32_t next_u32();
  double uniform();    // in (0, 1), 53 random bits
  double normal();     // N(0, 1)
  double student_t3(); // Student-t, ν = 3
  // A uniformly random integer in [0, n), n >= 1.
  uint64_t below(uint64_t n);

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  bool have_spare_ = false;
  double spare_ = 0.0;
};

std::vector<float> normal_vector(CounterRng& rng, int64_t n, double sigma = 1.0);
std::vector<float> student_t3_vector(CounterRng& rng, int64_t n);

// b = ρ·a + √(1−ρ²)·z for a fresh standard normal z (a must hold N(0, 1) values for corr = ρ). |ρ| <= 1.
std::vector<float> correlated_with(CounterRng& rng, const std::vector<float>& a, double rho);

// Sample Pearson correlation of two equally long vectors (computed in double).
double pearson(const std::vector<float>& a, const std::vector<float>& b);

// x [rows, cols] row-major N(0, 1) with `count` distinct random columns scaled by `factor`; the chosen
// columns are returned in `channels` (sorted) when not null.
std::vector<float> outlier_activations(CounterRng& rng, int64_t rows, int64_t cols, int count, double factor,
                                       std::vector<int64_t>* channels = nullptr);

// g [rows, cols] row-major gradient-like values (see the file comment).
std::vector<float> gradient_like(CounterRng& rng, int64_t rows, int64_t cols);

}  // namespace fp8train::lab
