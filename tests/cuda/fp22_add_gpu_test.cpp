// The FP8 GEMM kernels' truncating FP22 adder (ops/cuda/fp22_add.cuh, the promote=never model) against the CPU's
// quant::fp22_add bit for bit: every pair of a list of edge values (signed zeros, the smallest and largest
// subnormals and normals, FLT_MAX, infinities, NaN, values that cancel or differ by one ulp) and random pairs —
// arbitrary bit patterns, and pairs of nearby exponents of either sign (where alignment, truncation and
// cancellation matter).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "quant/ref_gemm.h"

namespace fp8train::gputest {

cudaError_t launch_fp22_add(const float* x, const float* y, float* out, int n, cudaStream_t stream);  // .cu

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Fp22AddGpu, MatchesTheCpuAdderBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edges = {0.0f,
                              -0.0f,
                              from_bits(1),
                              from_bits(0x007FFFFFu),
                              from_bits(0x00800000u),
                              from_bits(0x00800001u),
                              1.0f,
                              1.0f + std::ldexp(1.0f, -23),
                              1.0f + std::ldexp(1.0f, -13),
                              1.5f,
                              2.0f,
                              3.0f,
                              std::ldexp(1.0f, -14),
                              std::ldexp(1.0f, -13),
                              std::ldexp(1.0f, 13),
                              std::numeric_limits<float>::max(),
                              std::ldexp(1.0f, 127),
                              inf,
                              std::numeric_limits<float>::quiet_NaN()};
  const size_t base = edges.size();
  for (size_t i = 0; i < base; ++i) edges.push_back(-edges[i]);
  std::vector<float> x, y;
  for (float a : edges)
    for (float b : edges) {
      x.push_back(a);
      y.push_back(b);
    }
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<int> exponent(-140, 127), near(-16, 16);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < (1 << 18); ++i) {  // arbitrary bit patterns (NaNs and infinities included)
    x.push_back(from_bits(bits(gen)));
    y.push_back(from_bits(bits(gen)));
  }
  for (int i = 0; i < (1 << 18); ++i) {  // nearby exponents, either sign
    const int e = exponent(gen);
    const float a = std::ldexp(mantissa(gen), e), b = std::ldexp(mantissa(gen), std::min(127, e + near(gen)));
    x.push_back(bits(gen) & 1 ? -a : a);
    y.push_back(bits(gen) & 1 ? -b : b);
  }
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = quant::fp22_add(x[i], y[i]);
  DeviceArray<float> dx(x), dy(y), dout(x.size());
  ASSERT_EQ(launch_fp22_add(dx.get(), dy.get(), dout.get(), static_cast<int>(x.size()), nullptr), cudaSuccess);
  const std::vector<float> got = dout.download();
  std::string first;
  EXPECT_EQ(count_float_mismatches(got, want, &first), 0) << first;
  for (size_t i = 0; i < edges.size() * edges.size(); ++i)
    ASSERT_TRUE(same_float(got[i], want[i])) << x[i] << " + " << y[i] << ": got " << got[i] << " want " << want[i];
}

}  // namespace
}  // namespace fp8train::gputest
