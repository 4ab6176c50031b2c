// The templated launch of one FP8 GEMM kernel instantiation, shared by the family files
// fp8_gemm_{dense,grouped,wgrad}.cu. Errors come back as cudaError_t (no fmt in .cu files); the host code
// in fp8_gemm_host.cpp turns them into fp8train::Error. Clusters of two (TMA multicast) launch through
// cudaLaunchKernelEx; the persistent grid is as many CTAs (or CTA pairs) as can be resident at once, capped
// by the unit count and LaunchSpec::max_ctas.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "ops/cuda/fp8_gemm_kernel.cuh"
#include "ops/cuda/fp8_gemm_plan.h"

namespace fp8train::ops::cuda::fp8gemm {

// Runs launch.template operator()<kBulkScales>() with kBulkScales = true when the host found the scale layouts
// fit for bulk copies (KernelArgs::bulk_scales) and the tile's B scales are not per 8-column chunk.
template <ScaleB kScaleB, class Launch>
cudaError_t with_scale_path(const KernelArgs& args, Launch&& launch) {
  if constexpr (kScaleB != ScaleB::PerChunk) {
    if (args.bulk_scales) return launch.template operator()<true>();
  }
  return launch.template operator()<false>();
}

template <int BN, ScaleB kScaleB, Schedule kSched, Output kOut, Multicast kMc, bool kBulkScales = false, int kWgs = 2,
          bool kInt8 = false, bool kNeverPromote = false>
cudaError_t launch_kernel(const CUtensorMap& tmap_a, const CUtensorMap& tmap_b, const CUtensorMap& tmap_d,
                          const KernelArgs& args, int max_ctas, cudaStream_t stream) {
  using Plan = SmemPlan<BN, kScaleB, kOut, kWgs>;
  constexpr int kCluster = cluster_size(kMc);
  auto kernel = fp8_gemm_kernel<BN, kScaleB, kSched, kOut, kMc, kBulkScales, kWgs, kInt8, kNeverPromote>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Plan::kDynamicBytes);
  if (err != cudaSuccess) return err;
  int device = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;

  cudaLaunchConfig_t config{};
  config.blockDim = dim3(threads_of(kWgs), 1, 1);
  config.dynamicSmemBytes = Plan::kDynamicBytes;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = kCluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;

  // Resident clusters (one CTA per SM): the SM count, or fewer for pairs where a GPC has an odd SM count.
  static int resident[64] = {};
  if (device < 64 && resident[device] == 0) {
    int sms = 0;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
    int clusters = sms / kCluster;
    if (kCluster > 1) {
      config.gridDim = dim3(static_cast<unsigned>(sms / kCluster * kCluster), 1, 1);
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) == cudaSuccess && n > 0) clusters = n;
      (void)cudaGetLastError();
    }
    resident[device] = clusters;
  }
  int clusters = device < 64 ? resident[device] : 1;
  if (max_ctas > 0 && max_ctas / kCluster < clusters) clusters = max_ctas / kCluster > 0 ? max_ctas / kCluster : 1;
  if (args.num_units < clusters) clusters = args.num_units;
  if (clusters <= 0) return cudaSuccess;
  config.gridDim = dim3(static_cast<unsigned>(clusters * kCluster), 1, 1);
  static bool described = false;  // FP8TRAIN_FP8_GEMM_VERBOSE=1: the launch geometry, once per instantiation
  if (!described && std::getenv("FP8TRAIN_FP8_GEMM_VERBOSE") != nullptr) {
    described = true;
    std::printf("fp8 gemm kernel: block_n %d, cluster %d, bulk scales %d, %d stages, %d B smem: "
                "%d resident clusters, grid %u CTAs, %d units\n",
                BN, kCluster, kBulkScales ? 1 : 0, Plan::kStages, Plan::kDynamicBytes,
                device < 64 ? resident[device] : -1, config.gridDim.x, args.num_units);
  }
  err = cudaLaunchKernelEx(&config, kernel, tmap_a, tmap_b, tmap_d, args);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::fp8gemm
