// Compile-time plan of the FP8 GEMM kernels, shared by the device code (fp8_gemm_kernel.cuh) and the host
// code that validates arguments and builds TMA descriptors (fp8_gemm_host.cpp): tile and thread constants,
// the enums that select a kernel variant, the shared-memory layout per variant, the kernel's argument
// block, and the per-family launch functions (implemented in fp8_gemm_{dense,grouped,wgrad}.cu, which
// contain no fmt: nvcc cannot compile fmt's consteval format checks, so launches report by return value).
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/fp8_gemm.h"

namespace fp8train::ops::cuda::fp8gemm {

inline constexpr int kBlockM = 128;
inline constexpr int kBlockK = 128;
inline constexpr int kMathThreads = 256;
inline constexpr int kThreads = 384;
inline constexpr int kProducerRegs = 40;
inline constexpr int kMathRegs = 232;
inline constexpr int kInt8BlockN = 128;    // the one tile width of the INT8 kernels
inline constexpr int kSmemLimit = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)

// How the B scale varies across a tile's columns.
enum class ScaleB : int {
  Uniform,    // 128x128 blocks and BN divides 128: one value per tile and K block
  PerChunk,   // 128x128 blocks, any BN: one value per 8-column chunk (a chunk never straddles a block)
  TwoBlocks,  // 128x128 blocks, BN = 160 or 192: every tile spans exactly two B blocks (it starts at column 0, 32,
              // 64 or 96 of a block for 160; 0 or 64 for 192), so its first (128 - n0 % 128) / 8 chunks use block
              // n0/128 and the rest the next one; two values per tile and K block
  PerColumn,  // 1x128 tiles of B (Wgrad): one value per column
};
enum class Schedule : int {
  Dense,     // tiles of one [M, N] output, K blocks 0..K/128-1
  GroupedM,  // MoE contiguous: rows of all groups concatenated, group g owns rows [off[g], off[g+1])
  GroupedK,  // MoE Wgrad: group g owns K range [off[g], off[g+1]) and output D[g] ([M, N])
};
// Bf16SplitK (dense only, KernelArgs::k_splits > 1): each CTA computes one K range of a tile into FP32, writes it to
// the workspace, and the last of the tile's k_splits CTAs to finish sums the ranges in range order and stores BF16.
// Fp32Tma (Wgrad, c absent or aliasing d, no multicast): each math warpgroup's 64 x BN FP32 block is staged in
// shared memory: C is TMA-loaded into it at the start of the tile (overlapping the K loop), the threads add their
// accumulators there (d = c + acc, the same one FP32 add as Fp32Direct) and TMA-store it, so neither the C read
// nor the D write holds the math warpgroups (Fp32Direct's st.global epilogue does: with a short K per expert the
// F32 read-modify-write is as long as the K loop).
// Fp32TmaWs / Fp32TmaWs2 (K-grouped Wgrad, block_n 128; epilogue "tma-ws" / "tma-ws2"): the same staged sum, but
// the C loads and D stores are issued by a dedicated store warp of the producer warpgroup, so no math warp ever
// waits for a store to drain; the store warp issues the next C load into a buffer as soon as the store that last
// read it has left shared memory. Ws: one buffer per math warpgroup (128- or 192-row tiles); Ws2: two per math
// warpgroup (128-row tiles, tiles alternate), so a tile's C load is issued while the tile before it is still
// computing -- a whole tile earlier than with one buffer (2 K stages fit beside the 128 KiB of buffers).
enum class Output : int { Bf16Tma, Bf16Direct, Fp32Direct, Bf16SplitK, Fp32Tma, Fp32TmaWs, Fp32TmaWs2 };
// The FP32 staged epilogues, and how many staging buffers each math warpgroup owns.
constexpr bool is_fp32_staged(Output o) {
  return o == Output::Fp32Tma || o == Output::Fp32TmaWs || o == Output::Fp32TmaWs2;
}
constexpr bool has_store_warp(Output o) { return o == Output::Fp32TmaWs || o == Output::Fp32TmaWs2; }
constexpr int c_buffers_of(Output o) { return o == Output::Fp32TmaWs2 ? 2 : 1; }
// TMA multicast inside a cluster of two CTAs that work on neighbouring tiles: each CTA loads half of the
// shared operand tile and multicasts it into both CTAs' shared memory, halving that operand's L2 traffic.
enum class Multicast : int {
  None,    // one CTA per cluster, every CTA loads its own A and B tiles
  ShareA,  // the pair works on tiles (m, 2j) and (m, 2j + 1): same A rows, each CTA loads 64 of them
  ShareB,  // the pair works on tiles (2i, n) and (2i + 1, n): same B rows, each CTA loads BN / 2 of them
};
constexpr int cluster_size(Multicast mc) { return mc == Multicast::None ? 1 : 2; }
// The B-scale shape of a dense/grouped tile width (128x128 B blocks).
constexpr ScaleB block_scale_b(int bn) {
  return 128 % bn == 0 ? ScaleB::Uniform : (bn == 160 || bn == 192 ? ScaleB::TwoBlocks : ScaleB::PerChunk);
}

// The two scale paths (the kernel's template flag kBulkScales): with bulk scales the producer's lane 0 moves the
// stage's scales with bulk copies (cp.async.bulk, completing on the full barrier as transaction bytes) -- the A
// scales of the tile's rows (MN-major: contiguous) and the 16-byte-aligned group of four B scales that holds the
// tile's one (two groups for ScaleB::TwoBlocks; the tile's columns for ScaleB::PerColumn) -- instead of 32
// lanes of 4-byte cp.async. Needs a ScaleB other than PerChunk and KernelArgs::bulk_scales (the host's layout
// check: fill_scales); the cp.async path takes any layout, QTensor's row-major one included.

constexpr int align_up(int x, int a) { return (x + a - 1) / a * a; }

// Math warpgroups per CTA: 2 (tile rows 128, the default) or 3 (tile rows 192: dense only, see fp8_gemm_dense.cu).
// Each math warpgroup owns 64 rows; 3 of them get (65536 - 128 * 24) / 384 -> 160 registers each.
constexpr int block_m_of(int wgs) { return 64 * wgs; }
constexpr int threads_of(int wgs) { return 128 * (wgs + 1); }
constexpr int math_regs_of(int wgs) { return wgs == 2 ? kMathRegs : 160; }
constexpr int producer_regs_of(int wgs) { return wgs == 2 ? kProducerRegs : 24; }

template <int BN, ScaleB kScaleB, Output kOut, int kWgs = 2>
struct SmemPlan {
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "BN must be a multiple of 16 in [16, 256]");
  static constexpr int kAtomCols = BN % 64 == 0 ? 64 : (BN % 32 == 0 ? 32 : 16);  // TMA-store atom width
  static constexpr int kAtomBytes = kAtomCols * 2;
  static constexpr int kNumAtoms = BN / kAtomCols;
  static constexpr int kBM = block_m_of(kWgs);
  static constexpr int kCBufs = c_buffers_of(kOut);
  static constexpr int kDBytes = kOut == Output::Bf16Tma ? align_up(kBM * BN * 2, 1024)
                                 : is_fp32_staged(kOut)  ? kCBufs * align_up(kBM * BN * 4, 1024)
                                                         : 0;
  // FP32 staged: atoms of 64 rows x 32 FP32 columns (128 bytes, the 128-byte swizzle span), 8 KiB each; buffer b
  // of math warpgroup w at (b * kWgs + w) * kWgBufBytes.
  static_assert(!is_fp32_staged(kOut) || BN % 32 == 0, "the FP32 TMA epilogue needs block_n a multiple of 32");
  static constexpr int kWgBufBytes = 64 * BN * 4;
  static constexpr int kF32Atoms = BN / 32;
  static constexpr int kABytes = kBM * kBlockK;
  static constexpr int kBBytes = BN * kBlockK;
  static constexpr int kSfaBytes = kBM * 4;
  static constexpr int kSfbCount = kScaleB == ScaleB::Uniform     ? 4   // bulk copies move an aligned group of 4
                                  : kScaleB == ScaleB::TwoBlocks ? 8   // two such groups
                                  : kScaleB == ScaleB::PerChunk  ? BN / 8
                                                                 : BN;
  static constexpr int kSfbBytes = align_up(kSfbCount * 4, 16);
  static constexpr int kPerStage = kABytes + kBBytes + kSfaBytes + kSfbBytes + 16;  // + two barriers
  static constexpr int kSlack = 1024;  // to align the dynamic buffer to 1024 bytes (128-byte swizzle)
  static constexpr int kStagesFit = (kSmemLimit - kSlack - kDBytes) / kPerStage;
  static constexpr int kStages = kStagesFit > 8 ? 8 : kStagesFit;
  static_assert(kStages >= 2, "tile too large for shared memory");
  static constexpr int kAOffset = kDBytes;
  static constexpr int kBOffset = kAOffset + kStages * kABytes;
  static constexpr int kSfaOffset = kBOffset + kStages * kBBytes;
  static constexpr int kSfbOffset = kSfaOffset + kStages * kSfaBytes;
  static constexpr int kBarOffset = kSfbOffset + kStages * kSfbBytes;
  // Fp32Tma: one C-load barrier per warpgroup. Store warp: per (buffer, warpgroup) a "ready" barrier (C landed, or
  // without C the buffer free) and a "summed" barrier (the warpgroup's sums are in the buffer), 8 * kWgs * kCBufs
  // bytes each.
  static constexpr int kCBarOffset = kBarOffset + 2 * kStages * 8;
  static constexpr int kSumBarOffset = kCBarOffset + 8 * 4 * kCBufs;
  static constexpr int kBytes = has_store_warp(kOut) ? kSumBarOffset + 8 * 4 * kCBufs : kCBarOffset + 4 * 8;
  static constexpr int kDynamicBytes = kBytes + kSlack;
  static_assert(!has_store_warp(kOut) || kDynamicBytes <= kSmemLimit, "store-warp epilogue: shared memory overflow");
};

// Everything the kernel needs besides the three tensor maps. Scale element (i, kb) of A is
// sfa[i * sfa_row + kb * sfa_kb]; of B: sfb[group * sfb_group + i * sfb_row + kb * sfb_kb], where i is the
// 128-row block of B (Uniform/PerChunk) or the row of B (PerColumn).
struct KernelArgs {
  int m = 0, n = 0, k = 0;  // GroupedM: m = total rows; GroupedK: k = total K
  int num_groups = 1;
  const int* group_offsets = nullptr;  // [num_groups + 1], multiples of 128 (GroupedM rows, GroupedK K)
  int m_blocks = 0, n_blocks = 0, raster_group_m = 16;
  // Scheduling units: a unit is one tile (Multicast::None) or the pair of neighbouring tiles a cluster of two
  // CTAs computes together; units_m x units_n units per group, num_units in all.
  int units_m = 0, units_n = 0, num_units = 0;
  const float* sfa = nullptr;
  long long sfa_row = 0, sfa_kb = 0;
  const float* sfb = nullptr;
  long long sfb_row = 0, sfb_kb = 0, sfb_group = 0;
  void* d = nullptr;        // Direct epilogues: [groups, m, n] row-major (BF16 bits or FP32)
  const float* c = nullptr; // Fp32Direct: optional addend, same layout as d (may alias d); Fp32Tma: null or d
  // Bf16Direct: optional BF16 addend, same layout as d (may alias d): d = bf16_rn(float(c) + acc), one FP32 add
  // (a Dgrad accumulating into an input gradient another Linear already wrote).
  const uint16_t* c_bf16 = nullptr;
  // Set by the host when the scale layouts allow bulk scale copies: A scales MN-major (sfa_row == 1, each K block's
  // column 16-byte aligned and padded to a multiple of 4 rows) and B scales padded so that the aligned group of
  // four around any scale is inside the array. sfb_group4_along_kb: the group runs along K blocks (B K-major)
  // or along row blocks (B MN-major).
  int bulk_scales = 0;
  int sfb_group4_along_kb = 1;
  // Split-K (Schedule::Dense with Output::Bf16SplitK): the K blocks are cut into k_splits contiguous ranges,
  // range s = [s * kb / k_splits, (s + 1) * kb / k_splits); unit u is range u / tiles of tile u % tiles. Range s of
  // a tile goes to split_partials[s, m, n] (FP32); split_counters holds one arrival counter per (tile, math
  // warpgroup), zero before the launch and left zero after it (the last arrival resets it).
  int k_splits = 1;
  float* split_partials = nullptr;
  int* split_counters = nullptr;
};

// TMA-store atom width in BF16 columns for a tile width (widest swizzle span that divides it).
constexpr int atom_cols_for(int block_n) { return block_n % 64 == 0 ? 64 : (block_n % 32 == 0 ? 32 : 16); }

// Launchers of the three families: `block_n` must be one the family builds (the host code checks), the
// tensor maps describe A ([rows, K], boxes 128 x 128), B (boxes block_n x 128) and, for Output::Bf16Tma, D.
// `max_ctas` caps the persistent grid (0 = as many CTAs, or pairs of CTAs, as can be resident at once).
struct LaunchSpec {
  // INT8 operands (wgmma .s32.s8.s8: each K block's products summed exactly as integers, then promoted as FP8's
  // partials are): built for block_n kInt8BlockN, 128-row tiles, no multicast and no split-K only.
  bool int8 = false;
  // FP8 never promoting (promote=never): each K block's scaled partial added into a pending FP22 sum
  // (fp8_gemm_kernel.cuh promote_block); built as INT8 is.
  bool never_promote = false;
  int block_n = 128;
  int warpgroups = 2;  // math warpgroups (2: tiles of 128 rows; 3: 192 rows, dense block_n 128 only)
  Output out = Output::Bf16Tma;
  Multicast multicast = Multicast::None;
  int max_ctas = 0;
};
cudaError_t launch_dense_kernel(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream);
cudaError_t launch_grouped_kernel(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                  const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream);
// Wgrad: `d` is the FP32 output map of the staged epilogues ([groups, m, n], boxes 1 x 64 x 32, 128-byte swizzle).
// launch_wgrad_ws_kernel (fp8_gemm_wgrad_ws.cu, its own translation unit so the builds compile in parallel): the
// store-warp epilogues, K-grouped, block_n 128.
cudaError_t launch_wgrad_ws_kernel(const LaunchSpec& spec, const CUtensorMap& a, const CUtensorMap& b,
                                   const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream);
cudaError_t launch_wgrad_kernel(const LaunchSpec& spec, bool k_grouped, const CUtensorMap& a, const CUtensorMap& b,
                                const CUtensorMap& d, const KernelArgs& args, cudaStream_t stream);

// Everything one launch needs, built and validated by fp8_gemm_host.cpp from a problem and a config (the
// public fp8_gemm_* functions are prepare + launch; `fp8train bench gemm` reads the resolved split-K ranges
// from a prepared dense launch for its bit-exactness check).
struct PreparedLaunch {
  LaunchSpec spec;
  CUtensorMap a{}, b{}, d{};
  KernelArgs args;
  bool k_grouped = false;
};
// prepare_dense takes the stream the launch will run on (the split-K workspace is per stream).
PreparedLaunch prepare_dense(const Fp8GemmDenseProblem& p, const Fp8GemmConfig& config, cudaStream_t stream = nullptr);
PreparedLaunch prepare_grouped(const Fp8GemmGroupedProblem& p, const Fp8GemmConfig& config);
PreparedLaunch prepare_wgrad(const Fp8GemmWgradProblem& p, const Fp8GemmConfig& config);

}  // namespace fp8train::ops::cuda::fp8gemm
