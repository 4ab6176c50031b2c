// Rng: a small deterministic generator whose whole state is one uint64 (SplitMix64: the state advances by
// the golden-ratio increment and each output is a bijective mix of it). Chosen because the state can be
// saved in a checkpoint as one number and restored exactly, and the sequence is the same on every platform.
#pragma once
#include <cstdint>

namespace fp8train::train {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}

  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform integer in [0, bound), bound > 0, without modulo bias (rejection of the short last interval).
  uint64_t uniform(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % bound;
  }

  // Uniform double in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  uint64_t state() const { return state_; }
  void set_state(uint64_t state) { state_ = state; }

 private:
  uint64_t state_;
};

// A seed for an independent stream derived from a base seed and a stream number (e.g. data, init, sampling).
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  Rng r(seed ^ (0xD1B54A32D192ED03ull * (stream + 1)));
  return r.next_u64();
}

}  // namespace fp8train::train
