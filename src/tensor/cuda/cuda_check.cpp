// CUDA error reporting for FP8T_CUDA_CHECK / FP8T_CHECK_LAUNCH (cuda_check.h).
#include "tensor/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace fp8train::cuda {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw_error(expr, file, line,
              fmt::format("CUDA call failed: {} ({})", cudaGetErrorName(err), cudaGetErrorString(err)));
}

bool sync_after_launch() {
#ifndef NDEBUG
  return true;
#else
  static const bool from_env = [] {
    const char* v = std::getenv("FP8TRAIN_CUDA_SYNC");
    return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
  }();
  return from_env;
#endif
}

void check_launch(const char* kernel_name, cudaStream_t stream, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw_error(kernel_name, file, line,
                fmt::format("launching kernel {} failed: {} ({})", kernel_name, cudaGetErrorName(err),
                            cudaGetErrorString(err)));
  if (!sync_after_launch()) return;
  err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess)
    throw_error(kernel_name, file, line,
                fmt::format("kernel {} failed while running: {} ({})", kernel_name, cudaGetErrorName(err),
                            cudaGetErrorString(err)));
}

}  // namespace fp8train::cuda
