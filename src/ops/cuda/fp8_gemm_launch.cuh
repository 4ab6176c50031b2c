// The templated launch of one FP8 GEMM kernel instantiation, shared by the family files
// fp8_gemm_{dense,grouped,wgrad}.cu. Errors come back as cudaError_t (no fmt in .cu files); the host code
// in fp8_gemm_host.cpp turns them into fp8train::Error.
#pragma once
#include <cuda_runtime_api.h>

#include "ops/cuda/fp8_gemm_kernel.cuh"
#include "ops/cuda/fp8_gemm_plan.h"

namespace fp8train::ops::cuda::fp8gemm {

template <int BN, ScaleB kScaleB, Schedule kSched, Output kOut>
cudaError_t launch_kernel(const CUtensorMap& tmap_a, const CUtensorMap& tmap_b, const CUtensorMap& tmap_d,
                          const KernelArgs& args, int grid, cudaStream_t stream) {
  using Plan = SmemPlan<BN, kScaleB, kOut>;
  auto kernel = fp8_gemm_kernel<BN, kScaleB, kSched, kOut>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Plan::kDynamicBytes);
  if (err != cudaSuccess) return err;
  kernel<<<grid, kThreads, Plan::kDynamicBytes, stream>>>(tmap_a, tmap_b, tmap_d, args);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::fp8gemm
