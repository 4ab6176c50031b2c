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
// running together read the same expert's weights.
#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda::fp8gemm {
namespace {

template <int BN>
cudaError_t launch_grouped(Output out, const CUtensorMap& a, const CUtensorMap& b, const CUtensorMap& d,
                           const KernelArgs& args, int grid, cudaStream_t stream) {
  constexpr ScaleB kScaleB = (128 % BN == 0) ? ScaleB::Uniform : ScaleB::PerChunk;
  if (out == Output::Bf16Tma) return launch_kernel<BN, kScaleB, Schedule::GroupedM, Output::Bf16Tma>(a, b, d, args, grid, stream);
  return launch_kernel<BN, kScaleB, Schedule::GroupedM, Output::Bf16Direct>(a, b, d, args, grid, stream);
}

}  // namespace

cudaError_t launch_grouped_kernel(int block_n, Output out, const CUtensorMap& a, const CUtensorMap& b,
                                  const CUtensorMap& d, const KernelArgs& args, int grid, cudaStream_t stream) {
  switch (block_n) {
    case 64: return launch_grouped<64>(out, a, b, d, args, grid, stream);
    case 128: return launch_grouped<128>(out, a, b, d, args, grid, stream);
    case 160: return launch_grouped<160>(out, a, b, d, args, grid, stream);
    case 176: return launch_grouped<176>(out, a, b, d, args, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fp8train::ops::cuda::fp8gemm
