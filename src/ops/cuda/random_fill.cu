// Device-side random fills for benchmarks (bench_harness.h). Counter-based, so a fill is the same on every
// run and independent of the launch configuration.
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/formats.h"

namespace fp8train::ops::cuda::detail {
namespace {

__device__ __forceinline__ float uniform_pm1(uint64_t seed, uint64_t i) {  // [-1, 1)
  return static_cast<float>(num::counter_random_u32(seed, i) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}
__device__ __forceinline__ float bell(uint64_t seed, uint64_t i) {  // triangular in (-2, 2): never all zero
  return uniform_pm1(seed, 2 * i) + uniform_pm1(seed, 2 * i + 1);
}

template <class Store>
__global__ void fill_kernel(int64_t n, Store store) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) store(i);
}

struct Bf16Store {
  uint16_t* out;
  uint64_t seed;
  float scale;
  __device__ void operator()(int64_t i) const { out[i] = num::bf16_encode(bell(seed, i) * scale); }
};
struct F32Store {
  float* out;
  uint64_t seed;
  float scale;
  __device__ void operator()(int64_t i) const { out[i] = bell(seed, i) * scale; }
};
struct Fp8Store {
  uint8_t* out;
  uint64_t seed;
  bool e5m2;
  __device__ void operator()(int64_t i) const {
    const float v = bell(seed, i) * 100.0f;
    out[i] = e5m2 ? num::e5m2_encode(v) : num::e4m3_encode(v);
  }
};
struct PositiveStore {
  float* out;
  uint64_t seed;
  float lo, hi;
  __device__ void operator()(int64_t i) const { out[i] = lo + (hi - lo) * (0.5f + 0.5f * uniform_pm1(seed, i)); }
};

template <class Store>
cudaError_t launch(int64_t n, Store s, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  fill_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(n, s);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fill_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  return launch(n, Bf16Store{out, seed, scale}, s);
}
cudaError_t launch_fill_f32(float* out, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  return launch(n, F32Store{out, seed, scale}, s);
}
cudaError_t launch_fill_fp8(uint8_t* out, int64_t n, uint64_t seed, bool e5m2, cudaStream_t s) {
  return launch(n, Fp8Store{out, seed, e5m2}, s);
}
cudaError_t launch_fill_positive(float* out, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  return launch(n, PositiveStore{out, seed, lo, hi}, s);
}

}  // namespace fp8train::ops::cuda::detail
