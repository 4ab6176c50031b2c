// Helpers of the GPU tests: fresh random inputs (seeded from std::random_device; the seed is printed on
// failure through SCOPED_TRACE by the caller), device buffers filled from / read back to host vectors, and
// poisoning so that an element a kernel fails to write cannot pass by accident.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "numerics/formats.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"

namespace fp8train::gputest {

inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

// rows x cols values: normal, with each row (and each 128-column band) scaled by its own power of ten
// between 1e-3 and 1e3 so block scales differ across rows and blocks, never all zero.
inline std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed, float spread_decades = 3.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decades(-spread_decades, spread_decades);
  std::vector<float> row_scale(rows), band_scale((cols + 127) / 128);
  for (auto& s : row_scale) s = std::pow(10.0f, decades(gen));
  for (auto& s : band_scale) s = std::pow(10.0f, decades(gen) / 2);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = normal(gen) * row_scale[r] * band_scale[c / 128];
  return x;
}

// BF16 codes of x (round to nearest even) and the float values they stand for.
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = num::bf16_encode(x[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = num::bf16_decode(x[i]);
  return out;
}

// A device buffer holding a copy of host data (or `count` poisoned elements).
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count), buf_(std::max<size_t>(count, 1) * sizeof(T), nullptr) {
    poison();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  void upload(const std::vector<T>& host) {
    count_ = host.size();
    FP8T_CUDA_CHECK(cudaMemcpy(buf_.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // 0xA5 bytes: a NaN pattern for floats, an unlikely code for bytes.
  void poison() { FP8T_CUDA_CHECK(cudaMemset(buf_.get(), 0xA5, std::max<size_t>(count_, 1) * sizeof(T))); }
  std::vector<T> download() const {
    FP8T_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    FP8T_CUDA_CHECK(cudaMemcpy(host.data(), buf_.get(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return buf_.as<T>(); }
  size_t size() const { return count_; }

 private:
  size_t count_;
  cuda::DeviceBuffer buf_;
};

// Bit equality of floats, with every NaN equal to every NaN (payloads differ between CPU and GPU division).
inline bool same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

// Counts positions where two float vectors differ bitwise (NaN == NaN); reports the first.
inline int64_t count_float_mismatches(const std::vector<float>& got, const std::vector<float>& want,
                                      std::string* first = nullptr) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (!same_float(got[i], want[i])) {
      if (bad == 0 && first) *first = "index " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
                                      std::to_string(want[i]);
      ++bad;
    }
  }
  return bad + static_cast<int64_t>(got.size() > want.size() ? got.size() - want.size() : want.size() - got.size());
}

template <class T>
int64_t count_mismatches(const std::vector<T>& got, const std::vector<T>& want, std::string* first = nullptr) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (bad == 0 && first) *first = "index " + std::to_string(i) + ": got " + std::to_string(+got[i]) + " want " +
                                      std::to_string(+want[i]);
      ++bad;
    }
  }
  return bad + static_cast<int64_t>(got.size() > want.size() ? got.size() - want.size() : want.size() - got.size());
}

}  // namespace fp8train::gputest
