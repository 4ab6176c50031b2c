// Wgrad FP8 GEMM (weight gradients) and its K-grouped form for MoE experts:
//   d[g][M, N] (FP32) = c[g] + A[M, K_g] . B[N, K_g]^T,  both operands E4M3 with 1x128 FP32 scales along K.
// For dW = dY^T . X over T tokens: A = dY^T [out, T] and B = X^T [in, T], each quantized in 1x128 tiles
// along the token axis (the 128x1 tiles of dY and X, written transposed by the fused quantizer). K-grouped:
// expert g owns tokens [k_offsets[g], k_offsets[g+1]) of the concatenated token axis (multiples of 128) and
// its own output d[g]; an expert with no tokens gets d[g] = c[g] (zeros without c).
// The FP32 output and the accumulate-into-C (c may alias d) are what gradient accumulation over
// micro-batches needs: d = c + acc with one FP32 add after the whole K range, as the CPU reference does.
//
// Pipeline: the persistent warp-specialized kernel of fp8_gemm_kernel.cuh (TMA producer warpgroup + two math
// warpgroups, 128 x BN tiles, stages: BN 64: 8, 96: 7, 128: 6). Scale flow (ScaleB::PerColumn): per K block
// the producer copies 128 A scales and BN B scales (one per output column) into the stage (two bulk copies when
// both scale arrays are MN-major and padded to 4, else 4-byte cp.async); a
// math thread reads its 2 rows' A scales and, per 8-column chunk, a float2 of its two columns' B scales, and
// promotes with acc = fma(sa * sb, partial, acc): one extra FP32 multiply per element compared with the
// Fprop kernel, whose B scale is shared by 128 columns. Register budget: BN/2 partial + BN/2 accumulators
// (BN = 128: 128) — no B scales are held across the WGMMAs. Epilogue: st.global of float2 per thread (each
// quad of lanes writes one full 32-byte sector), rows >= M and columns >= N skipped, C read the same way
// (Output::Fp32Direct); or, the default when C is absent or is D and there is no multicast, Output::Fp32Tma: C is
// TMA-loaded into a shared staging buffer during the K loop and the sum TMA-stored, so the F32 read-modify-write of
// the gradient overlaps the next tile's K loop (one expert's ~768 tokens make the K loop about as long as it).
// K-grouped with block_n 128 can also take the store-warp epilogues (fp8_gemm_wgrad_ws.cu, by config).
// Tile order for K-grouped: group-major, then the dense raster, so one expert's tokens are streamed by all SMs.
#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda::fp8gemm {
namespace {

template <int BN, Schedule kSched, bool kBulkScales>
cudaError_t launch_wgrad(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                         const KernelArgs& args, cudaStream_t stream) {
  constexpr ScaleB kScaleB = ScaleB::PerColumn;
  constexpr Output kOut = Output::Fp32Direct;
  if (spec.out == Output::Fp32Tma && spec.multicast != Multicast::None) return cudaErrorInvalidValue;
  if (spec.warpgroups == 3) {  // 192-row tiles: block_n 128, no multicast
    if constexpr (BN == 128) {
      if (spec.multicast == Multicast::None) {
        if (spec.out == Output::Fp32Tma)
          return launch_kernel<BN, kScaleB, kSched, Output::Fp32Tma, Multicast::None, kBulkScales, 3>(
              a, b, d, args, spec.max_ctas, stream);
        return launch_kernel<BN, kScaleB, kSched, kOut, Multicast::None, kBulkScales, 3>(
            a, b, a, args, spec.max_ctas, stream);
      }
    }
    return cudaErrorInvalidValue;
  }
  if (spec.out == Output::Fp32Tma)
    return launch_kernel<BN, kScaleB, kSched, Output::Fp32Tma, Multicast::None, kBulkScales>(a, b, d, args,
                                                                                           spec.max_ctas, stream);
  switch (spec.multicast) {
    case Multicast::None:
      return launch_kernel<BN, kScaleB, kSched, kOut, Multicast::None, kBulkScales>(
          a, b, a, args, spec.max_ctas, stream);
    case Multicast::ShareA:
      return launch_kernel<BN, kScaleB, kSched, kOut, Multicast::ShareA, kBulkScales>(
          a, b, a, args, spec.max_ctas, stream);
    case Multicast::ShareB:
      return launch_kernel<BN, kScaleB, kSched, kOut, Multicast::ShareB, kBulkScales>(
          a, b, a, args, spec.max_ctas, stream);
  }
  return cudaErrorInvalidValue;
}

// The fixed builds -- INT8 operands, or FP8 never promoting (the promote=never ablation) --: block_n kInt8BlockN,
// 128-row tiles, no multicast; the staged or the direct FP32 epilogue.
template <Schedule kSched, bool kBulkScales, bool kInt8, bool kNever>
cudaError_t launch_wgrad_fixed(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                               const KernelArgs& args, cudaStream_t stream) {
  constexpr int BN = kInt8BlockN;
  if (spec.block_n != BN || spec.warpgroups != 2 || spec.multicast != Multicast::None) return cudaErrorInvalidValue;
  if (spec.out == Output::Fp32Tma)
    return launch_kernel<BN, ScaleB::PerColumn, kSched, Output::Fp32Tma, Multicast::None, kBulkScales, 2, kInt8,
                         kNever>(a, b, d, args, spec.max_ctas, stream);
  return launch_kernel<BN, ScaleB::PerColumn, kSched, Output::Fp32Direct, Multicast::None, kBulkScales, 2, kInt8,
                       kNever>(a, b, a, args, spec.max_ctas, stream);
}

template <Schedule kSched, bool kInt8, bool kNever>
cudaError_t launch_wgrad_fixed(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                               const KernelArgs& args, cudaStream_t stream) {
  return with_scale_path<ScaleB::PerColumn>(args, [&]<bool kBulkScales>() {
    return launch_wgrad_fixed<kSched, kBulkScales, kInt8, kNever>(spec, a, b, d, args, stream);
  });
}

// Bulk scale copies when both scale layouts are MN-major and padded (KernelArgs::bulk_scales), else cp.async.
template <int BN, Schedule kSched>
cudaError_t launch_wgrad(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                         const KernelArgs& args, cudaStream_t stream) {
  return with_scale_path<ScaleB::PerColumn>(
      args, [&]<bool kBulkScales>() { return launch_wgrad<BN, kSched, kBulkScales>(spec, a, b, d, args, stream); });
}

template <int BN>
cudaError_t launch_wgrad(const LaunchSpec& spec, bool k_grouped, const CUtensorMap& a, const CUtensorMap& b,
                         const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  if (k_grouped) return launch_wgrad<BN, Schedule::GroupedK>(spec, a, b, d, args, stream);
  return launch_wgrad<BN, Schedule::Dense>(spec, a, b, d, args, stream);
}

}  // namespace

cudaError_t launch_wgrad_kernel(const LaunchSpec& spec, bool k_grouped, const CUtensorMap& a, const CUtensorMap& b,
                                const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  if (has_store_warp(spec.out))
    return k_grouped ? launch_wgrad_ws_kernel(spec, a, b, d, args, stream) : cudaErrorInvalidValue;
  if (spec.int8)
    return k_grouped ? launch_wgrad_fixed<Schedule::GroupedK, true, false>(spec, a, b, d, args, stream)
                     : launch_wgrad_fixed<Schedule::Dense, true, false>(spec, a, b, d, args, stream);
  if (spec.never_promote)
    return k_grouped ? launch_wgrad_fixed<Schedule::GroupedK, false, true>(spec, a, b, d, args, stream)
                     : launch_wgrad_fixed<Schedule::Dense, false, true>(spec, a, b, d, args, stream);
  switch (spec.block_n) {
    case 64: return launch_wgrad<64>(spec, k_grouped, a, b, d, args, stream);
    case 96: return launch_wgrad<96>(spec, k_grouped, a, b, d, args, stream);
    case 128: return launch_wgrad<128>(spec, k_grouped, a, b, d, args, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fp8train::ops::cuda::fp8gemm
