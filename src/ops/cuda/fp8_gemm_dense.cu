// Dense FP8 block-scaled GEMM for Fprop and Dgrad (DeepSeek-V3 recipe):
//   d[M, N] (BF16, row-major) = A[M, K] . B[N, K]^T,  A E4M3 with 1x128 FP32 scales (per row, per K block),
//   B E4M3 with 128x128 FP32 scales (per 128-row block of B, per K block). K % 16 == 0 (a partial last K block is
//   zero-filled by TMA: zero products leave the chain as the CPU model's shorter block does), N % 16 == 0, any M.
// Fprop: A = x [tokens, in], B = W [out, in]. Dgrad: A = dy [tokens, out], B = W^T [in, out] (the 128x128
// blocks transpose without re-quantization).
//
// Pipeline (fp8_gemm_kernel.cuh has the full description): persistent CTAs, one per SM, 384 threads =
// 1 TMA producer warpgroup (40 registers) + 2 math warpgroups (232 registers) each owning 64 rows of a
// 128 x BN tile. Stages: as many [A 128x128 | B BNx128 | 128 A-scales | B-scales] K-block slots as fit in
// 227 KiB next to the BF16 staging tile (BN 64: 8, 96: 7, 128: 5, 160: 5, 176: 4, 192: 4).
// Scale flow: per K block the producer puts the A scales of the tile's 128 rows and the tile's B scale(s) into
// the stage -- as two bulk copies completing on the stage's barrier when the layouts allow it (A scales
// MN-major and padded to 4 rows, B scale rows padded to 4 K blocks: cuBLASLt's native layouts; +15-18 %,
// docs/fp8_gemm.md), else with 4-byte cp.async (QTensor's row-major layout). A math thread
// reads its two rows' A scales and the B scale of its columns with shared-memory loads issued right after the
// block's WGMMAs (while they run), forms sa*sb (one FP32 multiply, as the CPU model does), releases the stage after
// wgmma.wait_group and promotes the 128-deep partial sum with one FMA per element. The B scale per tile:
// BN dividing 128: one (ScaleB::Uniform); BN 160 / 192: two (every such tile spans exactly two B blocks), the split
// at chunk (128 - n0 % 128) / 8 known per tile (ScaleB::TwoBlocks); 96 and 176: one per 8-column chunk
// (ScaleB::PerChunk, cp.async only).
// Register budget (math thread): BN/2 partial + BN/2 accumulators; BN = 192 is the widest that fits 232.
// Tile rows: 128 (two math warpgroups) or 192 (three, block_n 128 only: Fp8GemmConfig::block_m, kWgs = 3 in the
// kernel; B multicast or none). The heuristic uses 128 rows: with the scale reads issued while the WGMMAs run,
// 128 x 192 tiles in B-sharing pairs measured at or above 192 x 128 on every DeepSeek-V3 shape (docs/fp8_gemm.md).
// Block-size heuristic (fp8_gemm_host.cpp, choose_block_n, fitted to the H200 sweeps): BLOCK_M = 128 (above);
// BLOCK_N from {32, 64, 96, 128, 160, 176, 192}: for M <= 256 the narrowest of 32/64/128/192 whose tiles fit in one
// wave, else the fewest ceil(tiles / SMs) x per-tile cost (K blocks x (BN + 48, + 48 for per-chunk B scales)
// + epilogue). Split-K (M <= 256 only, widths 32/64, Output::Bf16SplitK): when the narrowest of 32/64
// leaves more than half the SMs idle, K is cut into SMs / tiles ranges (choose_split; measured: 128x2112x7168
// 32 x 2 ranges, 1.16x cuBLASLt; 128x4096x7168 64 x 2, 1.08x; docs/fp8_gemm.md, split-K). TMA multicast
// (2-CTA clusters sharing A or B, Fp8GemmConfig::multicast): the heuristic pairs row blocks sharing B for block_n
// 128 / 192 when there are more than two row blocks (+0-5 %); within +-3 % of none before the scale
// reads moved (the K loop, not L2 traffic, was the limit then).
#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda::fp8gemm {
namespace {

// The widths built with the split-K epilogue (fp8_gemm_host.cpp kDenseSplitBlockNs must match): the ones the
// heuristic uses. Wider ones lost in every split-K sweep and their last-range sum spills (BN 128: 40 bytes,
// BN 192: 832 bytes: the range's values in flight on top of 2 x BN/2 accumulators).
template <int BN>
inline constexpr bool kSplitKBuilt = BN == 32 || BN == 64;

template <int BN, bool kBulkScales>
cudaError_t launch_dense_path(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                              const KernelArgs& args, cudaStream_t stream) {
  constexpr ScaleB kScaleB = block_scale_b(BN);
  constexpr Schedule kSched = Schedule::Dense;
  if (spec.out == Output::Bf16SplitK) {  // split-K (few row blocks): no multicast, direct BF16 stores
    if constexpr (kSplitKBuilt<BN>) {
      if (spec.multicast != Multicast::None) return cudaErrorInvalidValue;
      return launch_kernel<BN, kScaleB, kSched, Output::Bf16SplitK, Multicast::None, kBulkScales>(
          a, b, d, args, spec.max_ctas, stream);
    }
    return cudaErrorInvalidValue;
  }
  if (spec.warpgroups == 3) {  // tiles of 192 rows: block_n 128, no multicast or B multicast
    if constexpr (BN == 128) {
      if (spec.multicast == Multicast::ShareA) return cudaErrorInvalidValue;
      if (spec.out == Output::Bf16Tma && spec.multicast == Multicast::ShareB)
        return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::ShareB, kBulkScales, 3>(
            a, b, d, args, spec.max_ctas, stream);
      if (spec.multicast != Multicast::None) return cudaErrorInvalidValue;
      if (spec.out == Output::Bf16Tma)
        return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::None, kBulkScales, 3>(
            a, b, d, args, spec.max_ctas, stream);
      if (spec.out == Output::Bf16Direct)
        return launch_kernel<BN, kScaleB, kSched, Output::Bf16Direct, Multicast::None, kBulkScales, 3>(
            a, b, d, args, spec.max_ctas, stream);
    }
    return cudaErrorInvalidValue;
  }
  if (spec.out == Output::Bf16Direct) {  // the plain fallback epilogue: no multicast variants
    if (spec.multicast != Multicast::None) return cudaErrorInvalidValue;
    return launch_kernel<BN, kScaleB, kSched, Output::Bf16Direct, Multicast::None, kBulkScales>(
        a, b, d, args, spec.max_ctas, stream);
  }
  switch (spec.multicast) {
    case Multicast::None:
      return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::None, kBulkScales>(
          a, b, d, args, spec.max_ctas, stream);
    case Multicast::ShareA:
      return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::ShareA, kBulkScales>(
          a, b, d, args, spec.max_ctas, stream);
    case Multicast::ShareB:
      return launch_kernel<BN, kScaleB, kSched, Output::Bf16Tma, Multicast::ShareB, kBulkScales>(
          a, b, d, args, spec.max_ctas, stream);
  }
  return cudaErrorInvalidValue;
}

// The fixed builds -- INT8 operands, or FP8 never promoting (the promote=never ablation) --: block_n kInt8BlockN,
// 128-row tiles, no multicast, no split-K; the TMA-store epilogue, or the direct one (accumulating into C).
template <bool kBulkScales, bool kInt8, bool kNever>
cudaError_t launch_dense_fixed(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                               const KernelArgs& args, cudaStream_t stream) {
  constexpr int BN = kInt8BlockN;
  constexpr ScaleB kScaleB = block_scale_b(BN);
  if (spec.block_n != BN || spec.warpgroups != 2 || spec.multicast != Multicast::None) return cudaErrorInvalidValue;
  if (spec.out == Output::Bf16Tma)
    return launch_kernel<BN, kScaleB, Schedule::Dense, Output::Bf16Tma, Multicast::None, kBulkScales, 2, kInt8, kNever>(
        a, b, d, args, spec.max_ctas, stream);
  if (spec.out == Output::Bf16Direct)
    return launch_kernel<BN, kScaleB, Schedule::Dense, Output::Bf16Direct, Multicast::None, kBulkScales, 2, kInt8,
                         kNever>(a, b, d, args, spec.max_ctas, stream);
  return cudaErrorInvalidValue;
}

template <int BN>
cudaError_t launch_dense(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                         const KernelArgs& args, cudaStream_t stream) {
  return with_scale_path<block_scale_b(BN)>(
      args, [&]<bool kBulkScales>() { return launch_dense_path<BN, kBulkScales>(spec, a, b, d, args, stream); });
}

}  // namespace

cudaError_t launch_dense_kernel(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream) {
  if (spec.int8)
    return with_scale_path<block_scale_b(kInt8BlockN)>(args, [&]<bool kBulkScales>() {
      return launch_dense_fixed<kBulkScales, true, false>(spec, a, b, d, args, stream);
    });
  if (spec.never_promote)
    return with_scale_path<block_scale_b(kInt8BlockN)>(args, [&]<bool kBulkScales>() {
      return launch_dense_fixed<kBulkScales, false, true>(spec, a, b, d, args, stream);
    });
  switch (spec.block_n) {
    case 32: return launch_dense<32>(spec, a, b, d, args, stream);
    case 64: return launch_dense<64>(spec, a, b, d, args, stream);
    case 96: return launch_dense<96>(spec, a, b, d, args, stream);
    case 128: return launch_dense<128>(spec, a, b, d, args, stream);
    case 160: return launch_dense<160>(spec, a, b, d, args, stream);
    case 176: return launch_dense<176>(spec, a, b, d, args, stream);
    case 192: return launch_dense<192>(spec, a, b, d, args, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fp8train::ops::cuda::fp8gemm
