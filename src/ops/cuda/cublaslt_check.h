// FP8T_CUBLAS_CHECK(expr): throws fp8train::Error naming the cuBLASLt call, its status name and description.
#pragma once
#include <cublasLt.h>

namespace fp8train::ops::cuda {
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line);
}  // namespace fp8train::ops::cuda

#define FP8T_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                     \
    const cublasStatus_t fp8t_cublas_status_ = (expr);                                     \
    if (fp8t_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::fp8train::ops::cuda::throw_cublas_error(fp8t_cublas_status_, #expr, __FILE__, __LINE__); \
  } while (0)
