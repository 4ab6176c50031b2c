// Device side of infra_gpu_test.cpp: a deliberately invalid launch and a trivial fill kernel.
#include <cuda_runtime.h>

namespace fp8train::gputest {
namespace {
__global__ void oversized_block_kernel(int* out) {
  if (out) *out = 1;
}
__global__ void fill_iota_kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(i);
}
}  // namespace

cudaError_t launch_oversized_block() {
  oversized_block_kernel<<<1, 4096>>>(nullptr);  // more threads than a block may have: a launch error
  return cudaPeekAtLastError();
}

cudaError_t launch_fill_iota(float* out, int n, cudaStream_t stream) {
  fill_iota_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, n);
  return cudaGetLastError();
}

}  // namespace fp8train::gputest
