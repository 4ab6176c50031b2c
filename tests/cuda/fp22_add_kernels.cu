// Device side of fp22_add_gpu_test.cpp: the kernels' FP22 adder applied element by element.
#include <cuda_runtime.h>

#include "ops/cuda/fp22_add.cuh"

namespace fp8train::gputest {
namespace {
__global__ void fp22_add_kernel(const float* x, const float* y, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = ops::cuda::fp22_add(x[i], y[i]);
}
}  // namespace

cudaError_t launch_fp22_add(const float* x, const float* y, float* out, int n, cudaStream_t stream) {
  fp22_add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, out, n);
  return cudaGetLastError();
}

}  // namespace fp8train::gputest
