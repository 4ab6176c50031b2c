// Dense FP8 block-scaled GEMM for Fprop and Dgrad (DeepSeek-V3 recipe):
//   d[M, N] (BF16, row-major) = A[M, K] . B[N, K]^T,  A E4M3 with 1x128 FP32 scales (per row, per K block),
//   B E4M3 with 128x128 FP32 scales (per 128-row block of B, per K block). K % 128 == 0, N % 16 == 0, any M.
// Fprop: A = x [tokens, in], B = W [out, in]. Dgrad: A = dy [tokens, out], B = W^T [in, out] (the 128x128
// blocks transpose without re-quantization).
//
// Pipeline (fp8_gemm_kernel.cuh has the full description): persistent CTAs, one per SM, 384 threads =
// 1 TMA producer warpgroup (40 registers) + 2 math warpgroups (232 registers) each owning 64 rows of a
// 128 x BN tile. Stages: as many [A 128x128 | B BNx128 | 128 A-scales | B-scales] K-block slots as fit in
// 227 KiB next to the BF16 staging tile (BN 64: 8, 96: 7, 128: 5, 160: 5, 176: 4, 192: 4).
// Scale flow: the producer copies the A scales of the 128 rows and the B scale(s) of the tile into the stage
// with cp.async; a math thread reads its two rows' A scales and the B scale of its columns after the full
// barrier, forms sa*sb (one FP32 multiply, as the CPU model does) and promotes the 128-deep partial sum
// with one FMA. When BN divides 128 a tile never straddles two 128-column blocks of B, so one B scale
// serves the tile (ScaleB::Uniform); otherwise each 8-column chunk gets its own (ScaleB::PerChunk).
// Register budget (math thread): BN/2 partial + BN/2 accumulators; BN = 192 is the widest that fits 232.
// Block-size heuristic (choose_block_n): BLOCK_M = 128 always; BLOCK_N from {64, 96, 128, 160, 176, 192} to
// minimise ceil(tiles / SMs) x (BN + 32), i.e. wave quantisation weighted by tile cost.
#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda {
namespace {

using namespace fp8gemm;

constexpr int kDenseBlockNs[] = {64, 96, 128, 160, 176, 192};
constexpr int kNumDenseBlockNs = sizeof(kDenseBlockNs) / sizeof(int);

template <int BN>
void launch_dense(const Fp8GemmDenseProblem& p, const Fp8GemmConfig& config, cudaStream_t stream) {
  constexpr ScaleB kScaleB = (128 % BN == 0) ? ScaleB::Uniform : ScaleB::PerChunk;
  KernelArgs args;
  args.m = static_cast<int>(p.m);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.m_blocks = static_cast<int>((p.m + kBlockM - 1) / kBlockM);
  args.n_blocks = static_cast<int>((p.n + BN - 1) / BN);
  args.num_tiles = args.m_blocks * args.n_blocks;
  args.raster_group_m = config.raster_group_m;
  args.sfa = p.a_scales.data;
  args.sfa_row = p.a_scales.row_stride;
  args.sfa_kb = p.a_scales.kblock_stride;
  args.sfb = p.b_scales.data;
  args.sfb_row = p.b_scales.row_stride;
  args.sfb_kb = p.b_scales.kblock_stride;
  args.d = p.d;
  const int sms = config.grid > 0 ? config.grid : fp8_gemm_num_sms();
  const int grid = args.num_tiles < sms ? args.num_tiles : sms;
  const CUtensorMap ta = make_operand_map(p.a, p.m, p.k, kBlockM);
  const CUtensorMap tb = make_operand_map(p.b, p.n, p.k, BN);
  if (config.epilogue == Fp8GemmEpilogue::TmaStore) {
    const CUtensorMap td = make_bf16_output_map(p.d, p.m, p.n, SmemPlan<BN, kScaleB, Output::Bf16Tma>::kAtomCols);
    launch_kernel<BN, kScaleB, Schedule::Dense, Output::Bf16Tma>(ta, tb, td, args, grid, stream);
  } else {
    launch_kernel<BN, kScaleB, Schedule::Dense, Output::Bf16Direct>(ta, tb, ta, args, grid, stream);
  }
}

}  // namespace

const int* fp8_gemm_dense_block_ns(int* count) {
  *count = kNumDenseBlockNs;
  return kDenseBlockNs;
}

Fp8GemmConfig fp8_gemm_dense_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  Fp8GemmConfig config;
  config.block_n = choose_block_n((m + kBlockM - 1) / kBlockM, n, 1, num_sms, kDenseBlockNs, kNumDenseBlockNs);
  return config;
}

void fp8_gemm_dense(const Fp8GemmDenseProblem& p, const Fp8GemmConfig& config_in, cudaStream_t stream) {
  FP8T_CHECK(p.m >= 0 && p.n > 0 && p.k > 0, "dense FP8 GEMM: bad shape m={} n={} k={}", p.m, p.n, p.k);
  FP8T_CHECK(p.k % kBlockK == 0, "dense FP8 GEMM: K = {} must be a multiple of 128 (the scale block)", p.k);
  FP8T_CHECK(p.n % 16 == 0, "dense FP8 GEMM: N = {} must be a multiple of 16", p.n);
  FP8T_CHECK(p.m < (int64_t{1} << 31) && p.n < (int64_t{1} << 31) && p.k < (int64_t{1} << 31),
             "dense FP8 GEMM: dimensions must fit in 31 bits");
  if (p.m == 0) return;
  check_operand(p.a, "A");
  check_operand(p.b, "B");
  check_operand(p.d, "D");
  FP8T_CHECK(p.a_scales.data != nullptr && p.b_scales.data != nullptr, "dense FP8 GEMM: scales are null");
  Fp8GemmConfig config = config_in;
  if (config.block_n == 0) config.block_n = fp8_gemm_dense_heuristic(p.m, p.n, p.k, fp8_gemm_num_sms()).block_n;
  FP8T_CHECK(config.raster_group_m >= 1, "dense FP8 GEMM: raster_group_m must be >= 1");
  switch (config.block_n) {
    case 64: return launch_dense<64>(p, config, stream);
    case 96: return launch_dense<96>(p, config, stream);
    case 128: return launch_dense<128>(p, config, stream);
    case 160: return launch_dense<160>(p, config, stream);
    case 176: return launch_dense<176>(p, config, stream);
    case 192: return launch_dense<192>(p, config, stream);
    default:
      FP8T_FAIL("dense FP8 GEMM: block_n {} is not built (choose 64, 96, 128, 160, 176 or 192)", config.block_n);
  }
}

}  // namespace fp8train::ops::cuda
