// CUDA error checking that throws fp8train::Error (never exits): the CUDA half of the FP8T_CHECK family.
//   FP8T_CUDA_CHECK(cudaMemcpyAsync(...));   // throws with the call, the error name and CUDA's sentence
//   my_kernel<<<grid, block, smem, stream>>>(...);
//   FP8T_CHECK_LAUNCH("my_kernel", stream);   // launch errors always; in debug builds (or with the
//                                             // environment variable FP8TRAIN_CUDA_SYNC=1) it also waits
//                                             // for the stream, so a fault is reported at its kernel.
// cuBLASLt statuses are checked by FP8T_CUBLAS_CHECK in ops/cuda/cublaslt_check.h (the ops layer links it).
#pragma once
#include <cuda_runtime_api.h>

#include "common/error.h"

namespace fp8train::cuda {

// Throws Error("<what> failed: cudaErrorX (<CUDA's description>)").
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

// Checks the launch of `kernel_name` on `stream`; see FP8T_CHECK_LAUNCH.
void check_launch(const char* kernel_name, cudaStream_t stream, const char* file, int line);

// True when launches are followed by a stream synchronisation (debug builds, or FP8TRAIN_CUDA_SYNC=1).
bool sync_after_launch();

}  // namespace fp8train::cuda

#define FP8T_CUDA_CHECK(expr)                                                                     \
  do {                                                                                            \
    const cudaError_t fp8t_cuda_err_ = (expr);                                                    \
    if (fp8t_cuda_err_ != cudaSuccess)                                                            \
      ::fp8train::cuda::throw_cuda_error(fp8t_cuda_err_, #expr, __FILE__, __LINE__);              \
  } while (0)

#define FP8T_CHECK_LAUNCH(kernel_name, stream) \
  ::fp8train::cuda::check_launch(kernel_name, stream, __FILE__, __LINE__)
