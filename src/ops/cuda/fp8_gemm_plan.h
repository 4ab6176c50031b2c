// Compile-time plan of the FP8 GEMM kernels, shared by the device code (fp8_gemm_kernel.cuh) and the host
// code that validates arguments and builds TMA descriptors (fp8_gemm_host.cpp): tile and thread constants,
// the enums that select a kernel variant, the shared-memory layout per variant, the kernel's argument
// block, and the per-family launch functions (implemented in fp8_gemm_{dense,grouped,wgrad}.cu, which
// contain no fmt: nvcc cannot compile fmt's consteval format checks, so launches report by return value).
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::fp8gemm {

inline constexpr int kBlockM = 128;
inline constexpr int kBlockK = 128;
inline constexpr int kMathThreads = 256;
inline constexpr int kThreads = 384;
inline constexpr int kProducerRegs = 40;
inline constexpr int kMathRegs = 232;
inline constexpr int kSmemLimit = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)

// How the B scale varies across a tile's columns.
enum class ScaleB : int {
  Uniform,    // 128x128 blocks and BN divides 128: one value per tile and K block
  PerChunk,   // 128x128 blocks, any BN: one value per 8-column chunk (a chunk never straddles a block)
  PerColumn,  // 1x128 tiles of B (Wgrad): one value per column
};
enum class Schedule : int {
  Dense,     // tiles of one [M, N] output, K blocks 0..K/128-1
  GroupedM,  // MoE contiguous: rows of all groups concatenated, group g owns rows [off[g], off[g+1])
  GroupedK,  // MoE Wgrad: group g owns K range [off[g], off[g+1]) and output D[g] ([M, N])
};
enum class Output : int { Bf16Tma, Bf16Direct, Fp32Direct };

constexpr int align_up(int x, int a) { return (x + a - 1) / a * a; }

template <int BN, ScaleB kScaleB, Output kOut>
struct SmemPlan {
  static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "BN must be a multiple of 16 in [16, 256]");
  static constexpr int kAtomCols = BN % 64 == 0 ? 64 : (BN % 32 == 0 ? 32 : 16);  // TMA-store atom width
  static constexpr int kAtomBytes = kAtomCols * 2;
  static constexpr int kNumAtoms = BN / kAtomCols;
  static constexpr int kDBytes = kOut == Output::Bf16Tma ? align_up(kBlockM * BN * 2, 1024) : 0;
  static constexpr int kABytes = kBlockM * kBlockK;
  static constexpr int kBBytes = BN * kBlockK;
  static constexpr int kSfaBytes = kBlockM * 4;
  static constexpr int kSfbCount = kScaleB == ScaleB::Uniform ? 1 : (kScaleB == ScaleB::PerChunk ? BN / 8 : BN);
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
  static constexpr int kBytes = kBarOffset + 2 * kStages * 8;
  static constexpr int kDynamicBytes = kBytes + kSlack;
};

// Everything the kernel needs besides the three tensor maps. Scale element (i, kb) of A is
// sfa[i * sfa_row + kb * sfa_kb]; of B: sfb[group * sfb_group + i * sfb_row + kb * sfb_kb], where i is the
// 128-row block of B (Uniform/PerChunk) or the row of B (PerColumn).
struct KernelArgs {
  int m = 0, n = 0, k = 0;  // GroupedM: m = total rows; GroupedK: k = total K
  int num_groups = 1;
  const int* group_offsets = nullptr;  // [num_groups + 1], multiples of 128 (GroupedM rows, GroupedK K)
  int m_blocks = 0, n_blocks = 0, num_tiles = 0, raster_group_m = 16;
  const float* sfa = nullptr;
  long long sfa_row = 0, sfa_kb = 0;
  const float* sfb = nullptr;
  long long sfb_row = 0, sfb_kb = 0, sfb_group = 0;
  void* d = nullptr;        // Direct epilogues: [groups, m, n] row-major (BF16 bits or FP32)
  const float* c = nullptr; // Fp32Direct: optional addend, same layout as d (may alias d)
};

// TMA-store atom width in BF16 columns for a tile width (widest swizzle span that divides it).
constexpr int atom_cols_for(int block_n) { return block_n % 64 == 0 ? 64 : (block_n % 32 == 0 ? 32 : 16); }

// Launchers of the three families: `block_n` must be one the family builds (the host code checks), the
// tensor maps describe A ([rows, K], boxes 128 x 128), B (boxes block_n x 128) and, for Output::Bf16Tma, D.
cudaError_t launch_dense_kernel(int block_n, Output out, const CUtensorMap& a, const CUtensorMap& b,
                                const CUtensorMap& d, const KernelArgs& args, int grid, cudaStream_t stream);
cudaError_t launch_grouped_kernel(int block_n, Output out, const CUtensorMap& a, const CUtensorMap& b,
                                  const CUtensorMap& d, const KernelArgs& args, int grid, cudaStream_t stream);
cudaError_t launch_wgrad_kernel(int block_n, bool k_grouped, const CUtensorMap& a, const CUtensorMap& b,
                                const KernelArgs& args, int grid, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::fp8gemm
