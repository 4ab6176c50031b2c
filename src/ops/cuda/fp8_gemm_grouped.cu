// M-grouped contiguous FP8 GEMM for MoE experts (Fprop / Dgrad of the routed experts):
//   d[r, N] (BF16) = A[r, K] . B[e(r), N, K]^T   for every row r of the concatenated token matrix,
//   A [m_total, K] E4M3 with 1x128 scales, B [E, N, K] E4M3 with 128x128 scales per expert
//   (b_scales.group_stride apart), expert e owning rows [row_offsets[e], row_offsets[e+1]).
// Each expert's segment starts at a multiple of 128 (the dispatcher pads it), so a 128-row tile belongs to
// exactly one expert and the dense pipeline applies unchanged; experts with no tokens own no tiles.
//
// Pipeline, register budget and scale flow: identical to the dense kernel (fp8_gemm_dense.cu,
// fp8_gemm_kernel.cuh) with Schedule::GroupedM: both the producer and the math warpgroups find a tile's
// expert by a binary search over the device offsets (E + 1 integers, L1-resident), the producer reads B rows
// e * N + n0 .. through a tensor map over the [E * N, K] weight stack (rows past N of the last column tile
// belong to the next expert or are zero-filled; their outputs fall outside N and are not stored), and the B
// scales come from the expert's 128x128 scale grid. Tiles are ordered in bands of row blocks, so the CTAs
// running together read the same expert's weights. Multicast (opt-in, not yet measured on hardware) shares A
// only: a pair of column tiles of one row block always belongs to one expert, a pair of row blocks may not.
#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda::fp8gemm {
namespace {

template <int BN, bool kBulkScales>
cudaError_t launch_grouped_path(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  constexpr ScaleB kScaleB = block_scale_b(BN);
  constexpr Schedule kSched = Schedule::GroupedM;
  // Pairs along M could straddle two experts (different weights), so only A is ever shared.
  if (spec.multicast == Multicast::ShareB) return cudaErrorInvalidValue;
  if (spec.out == Output::Bf16Direct) {
    if (spec.multicast != Multicast::None) return cudaErrorInvalidValue;
    return launch_kernel<BN, kScaleB, kSched, Output::Bf16Direct, Multicast::None, kBulkScales>(
        a, b, d, args, spec.max_ctas, stream);
  }
  if (spec.multicast == Multicast::ShareA)
    return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::ShareA, kBulkScales>(
        a, b, d, args, spec.max_ctas, stream);
  return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::None, kBulkScales>(
      a, b, d, args, spec.max_ctas, stream);
}

// The fixed builds -- INT8 operands, or FP8 never promoting (the promote=never ablation) --: block_n kInt8BlockN,
// no multicast.
template <bool kBulkScales, bool kInt8, bool kNever>
cudaError_t launch_grouped_fixed(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                 const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  constexpr int BN = kInt8BlockN;
  constexpr ScaleB kScaleB = block_scale_b(BN);
  if (spec.block_n != BN || spec.multicast != Multicast::None) return cudaErrorInvalidValue;
  if (spec.out == Output::Bf16Tma)
    return launch_kernel<BN, kScaleB, Schedule::GroupedM, Output::Bf16Tma, Multicast::None, kBulkScales, 2, kInt8,
                         kNever>(a, b, d, args, spec.max_ctas, stream);
  if (spec.out == Output::Bf16Direct)
    return launch_kernel<BN, kScaleB, Schedule::GroupedM, Output::Bf16Direct, Multicast::None, kBulkScales, 2, kInt8,
                         kNever>(a, b, d, args, spec.max_ctas, stream);
  return cudaErrorInvalidValue;
}

template <int BN>
cudaError_t launch_grouped(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                           const KernelArgs& args, cudaStream_t stream) {
  return with_scale_path<block_scale_b(BN)>(
      args, [&]<bool kBulkScales>() { return launch_grouped_path<BN, kBulkScales>(spec, a, b, d, args, stream); });
}

}  // namespace

cudaError_t launch_grouped_kernel(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                  const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  if (spec.int8)
    return with_scale_path<block_scale_b(kInt8BlockN)>(args, [&]<bool kBulkScales>() {
      return launch_grouped_fixed<kBulkScales, true, false>(spec, a, b, d, args, stream);
    });
  if (spec.never_promote)
    return with_scale_path<block_scale_b(kInt8BlockN)>(args, [&]<bool kBulkScales>() {
      return launch_grouped_fixed<kBulkScales, false, true>(spec, a, b, d, args, stream);
    });
  switch (spec.block_n) {
    case 64: return launch_grouped<64>(spec, a, b, d, args, stream);
    case 128: return launch_grouped<128>(spec, a, b, d, args, stream);
    case 160: return launch_grouped<160>(spec, a, b, d, args, stream);
    case 176: return launch_grouped<176>(spec, a, b, d, args, stream);
    case 192: return launch_grouped<192>(spec, a, b, d, args, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fp8train::ops::cuda::fp8gemm
