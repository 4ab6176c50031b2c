// K-grouped Wgrad with the store-warp FP32 epilogues (Output::Fp32TmaWs, epilogue "tma-ws": one staging buffer
// per math warpgroup, 128- or 192-row tiles; Output::Fp32TmaWs2, "tma-ws2": two per math warpgroup, 128-row
// tiles), block_n 128, no multicast; the problem and the arithmetic are fp8_gemm_wgrad.cu's, bit for bit. Its
// own translation unit, so that these builds compile beside the other Wgrad builds.
#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda::fp8gemm {
namespace {

template <bool kBulkScales>
cudaError_t launch_ws(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                      const KernelArgs& args, cudaStream_t stream) {
  constexpr int BN = 128;
  constexpr ScaleB kSb = ScaleB::PerColumn;
  constexpr Schedule kSched = Schedule::GroupedK;
  if (spec.out == Output::Fp32TmaWs && spec.warpgroups == 3)
    return launch_kernel<BN, kSb, kSched, Output::Fp32TmaWs, Multicast::None, kBulkScales, 3>(a, b, d, args,
                                                                                              spec.max_ctas, stream);
  if (spec.out == Output::Fp32TmaWs && spec.warpgroups == 2)
    return launch_kernel<BN, kSb, kSched, Output::Fp32TmaWs, Multicast::None, kBulkScales, 2>(a, b, d, args,
                                                                                              spec.max_ctas, stream);
  if (spec.out == Output::Fp32TmaWs2 && spec.warpgroups == 2)
    return launch_kernel<BN, kSb, kSched, Output::Fp32TmaWs2, Multicast::None, kBulkScales, 2>(a, b, d, args,
                                                                                               spec.max_ctas, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_wgrad_ws_kernel(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                   const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  if (spec.block_n != 128 || spec.multicast != Multicast::None || spec.int8 || spec.never_promote)
    return cudaErrorInvalidValue;
  return with_scale_path<ScaleB::PerColumn>(
      args, [&]<bool kBulkScales>() { return launch_ws<kBulkScales>(spec, a, b, d, args, stream); });
}

}  // namespace fp8train::ops::cuda::fp8gemm
