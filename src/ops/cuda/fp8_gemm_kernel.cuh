// The one persistent, warp-specialized Hopper FP8 GEMM kernel template behind the three kernel families
// (dense Fprop/Dgrad: fp8_gemm_dense.cu, MoE M-grouped: fp8_gemm_grouped.cu, Wgrad and K-grouped Wgrad:
// fp8_gemm_wgrad.cu). Each family file documents its own problem; this header is the shared machine.
//
// D[m, n] = sum over K blocks kb of  scale_a(m, kb) * scale_b(n, kb) * (A[m, kb-block] . B[n, kb-block])
//   A: [M, K] E4M3 row-major (K contiguous), B: [N, K] E4M3 row-major (per group for grouped-M),
//   one FP32 scale of A per (row, 128-wide K block); B's scale per (128-row block or row, K block).
//
// CTA = 3 warpgroups (384 threads), one CTA per SM, persistent over "units" (a 128 x BN output tile, or with
// TMA multicast the pair of neighbouring tiles a 2-CTA cluster computes together). Template kWgs = 3 (dense or
// Wgrad, BN <= 128, no A multicast): 4 warpgroups (512 threads), three math warpgroups own 192-row tiles, producer
// 24 and math 160 registers (128 * 24 + 384 * 160 = 64512); same tile bytes per MAC as 128 x 192 but a third of
// the promotion per warpgroup (Wgrad's heuristic uses it; for dense, 128 x 192 in B-sharing pairs measured at or
// above it once the scale reads moved, docs/fp8_gemm.md).
//   warpgroup 2 (producer; setmaxnreg 40): warp 8 alone issues, per K block of 128 and stage s,
//       - 32 lanes: cp.async of the 128 A-scales (and the B-scales: 1, BN/8 or BN values) into the stage,
//         then cp.async.mbarrier.arrive.noinc on full[s] (so the scales are part of the stage's arrival),
//       - lane 0: mbarrier.arrive.expect_tx(full[s], 16 KiB + BN*128 B) and two TMA loads (A 128x128,
//         B BNx128 bytes, 128-byte swizzle, zero fill outside the tensor); with multicast, the shared
//         operand's half-tile is loaded by each CTA of the pair and multicast into both;
//     after waiting on empty[s]. full[s] expects 33 arrivals + the TMA bytes; empty[s] expects one arrival per
//     math thread of this CTA (each releases its own reads of the stage, scales included: one arrival per warp
//     after __syncwarp drew 536,846 racecheck WAR reports; per thread: 0, same speed)
//     plus, in a cluster, one per math warp of the partner CTA, whose reads of the multicast data are WGMMA
//     reads, complete at wgmma.wait_group (a remote arrival is expensive: see mbar_arrive_cluster).
//   warpgroups 0 and 1 (math; setmaxnreg 232; 0..2 with kWgs = 3): warpgroup w owns rows 64w..64w+63. Per K block:
//       wait full[s]; 4 x wgmma m64nBNk32 into `partial` (the first with scale-d = 0, i.e. into zeroed
//       registers); commit; SCALE FLOW: while those run, the thread's two A scales and the tile's B scale(s)
//       come from the stage by ld.shared (lds_f32: the stage pointers are integer-aligned, so plain C++ loads
//       were generic LD.E -- 3-6 % on the large shapes) and are multiplied, sa*sb per row (and per B
//       block); wait; release the stage (empty[s], and the partner CTA's empty[s] in a cluster); then
//       PROMOTION in FP32 on the CUDA cores, no memory access left on that path:
//           acc = fma(scale_a * scale_b, partial, acc)        (__fmul_rn then __fmaf_rn, per element)
//       (Wgrad's per-column B scales: read after the wait with three math warpgroups -- 160 registers leave no
//       room for BN/4 more --, while the WGMMAs run with two.) While one warpgroup promotes, the other's
//       WGMMAs keep the tensor cores busy; the producer runs up to kStages K blocks ahead, across tile
//       boundaries. ptxas 13.0 alternates the yield hint on the promotion's FFMAs by itself (the SASS patch
//       DeepGEMM describes; patching the SASS to force all set measured -11 %, all clear -2 %).
//   This is exactly the CPU Hopper model num::hopper_dot_scaled with promote_interval 128: four FP22 blocks
//   of 32 products chained from zero, then acc = fma(sa*sb, chain, acc) in K order. (kNeverPromote, the
//   promote=never ablation, replaces that FMA with the CPU model's pending FP22 sum: promote_block.)
// Register budget (per math thread): BN/2 partial + BN/2 acc FP32 registers (BN = 192: 192) + ~30 for
// addresses and scales (+ BN/4 column scales for the two-warpgroup Wgrad), under the 232 setmaxnreg grants;
// 128*40 + 256*232 = 64512 <= 65536 registers. ptxas reports no spills for the production instantiations.
// Shared memory (dynamic, 1024-aligned): [D staging BM*BN*2 (BF16 TMA-store epilogue only)]
//   [kStages x A 16 KiB][kStages x B BN*128][kStages x 128 A-scales][kStages x B-scales][barriers];
//   kStages is the largest count that fits in 227 KiB (at most 8).
// Epilogues: Bf16Tma (each warpgroup writes its 64 x BN BF16 block into swizzled shared memory (st.shared) in
//   atoms of 64/32/16 columns -- 128/64/32-byte swizzle, conflict-free -- fence.proxy.async, then one thread issues
//   one TMA store per atom; the next tile waits only for the store to finish reading), Bf16Direct and
//   Fp32Direct (st.global per thread, edges predicated; both optionally add C: d = c + acc, one FP32 add, C BF16
//   or FP32 as d),
//   Fp32Tma (Wgrad: C TMA-loaded into a shared buffer per math warpgroup at tile start, d = c + acc formed
//   there, TMA-stored), and its store-warp forms Fp32TmaWs / Fp32TmaWs2 (warp 1 of the producer warpgroup issues
//   every C load and D store, one or two buffers per math warpgroup: see the store warp below), and
//   Bf16SplitK (dense, few row blocks): a unit is one K range of a tile; its FP32 block goes to a workspace,
//   an arrival counter per (tile, warpgroup) finds the last range to finish, and that warpgroup adds the
//   ranges in range order (its own from registers, reusing the partial-sum registers for the total) and
//   stores BF16 -- the arithmetic of num::hopper_dot_scaled_split, deterministic for a given k_splits.
// Measured on the H200 (docs/fp8_gemm.md): every variant here, bit-exact and sanitizer-clean. The experiments
// that measured where the K loop's time goes (no promotion, no loads, ping-pong, two K blocks in flight, stage
// caps) are recorded there, not kept in this kernel.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/fp22_add.cuh"
#include "ops/cuda/fp8_gemm_plan.h"
#include "ops/cuda/fp8_gemm_ptx.cuh"
#include "ops/cuda/fp8_gemm_wgmma.cuh"

namespace fp8train::ops::cuda::fp8gemm {

struct TileCoord {
  int m0, n0, group, kb_begin, kb_end;
  int split, tile;  // split-K: the K range and the tile's index among the units_m x units_n tiles
};

// Unit order: bands of raster_group_m row units; inside a band, row units vary fastest so the CTAs running
// at the same time share both the A rows and the B columns in L2. A unit is one tile, or for a cluster of two
// the tile pair (2i, n) + (2i + 1, n) (ShareB) or (m, 2j) + (m, 2j + 1) (ShareA); `rank` picks the CTA's tile.
// A pair member past the last row or column block computes on zero-filled data and stores nothing.
template <Schedule kSched, Multicast kMc, int BN, int BM = kBlockM>
__device__ __forceinline__ TileCoord tile_coord(const KernelArgs& a, int unit, int rank) {
  int group = 0;
  int local = unit;
  int split = 0;
  if constexpr (kSched == Schedule::Dense) {
    if (a.k_splits > 1) {
      const int tiles = a.units_m * a.units_n;
      split = unit / tiles;
      local = unit - split * tiles;
    }
  }
  if constexpr (kSched == Schedule::GroupedK) {
    const int per_group = a.units_m * a.units_n;
    group = unit / per_group;
    local = unit - group * per_group;
  }
  const int span = a.raster_group_m * a.units_n;
  const int band = local / span;
  const int r = local - band * span;
  const int band_rows = min(a.raster_group_m, a.units_m - band * a.raster_group_m);
  const int um = band * a.raster_group_m + r % band_rows;
  const int un = r / band_rows;
  TileCoord t;
  t.m0 = (kMc == Multicast::ShareB ? 2 * um + rank : um) * BM;
  t.n0 = (kMc == Multicast::ShareA ? 2 * un + rank : un) * BN;
  if constexpr (kSched == Schedule::GroupedM) {
    // Last group whose first row is <= m0 (empty groups share their offset with the next one).
    const int row = min(t.m0, a.m - 1);
    int lo = 0, hi = a.num_groups;
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (__ldg(a.group_offsets + mid) <= row) lo = mid; else hi = mid;
    }
    group = lo;
  }
  t.group = group;
  if constexpr (kSched == Schedule::GroupedK) {
    t.kb_begin = __ldg(a.group_offsets + group) / kBlockK;
    t.kb_end = __ldg(a.group_offsets + group + 1) / kBlockK;
  } else {
    const int kb = (a.k + kBlockK - 1) / kBlockK;  // a partial last block: TMA zero-fills past K
    t.kb_begin = static_cast<int>(static_cast<long long>(split) * kb / a.k_splits);
    t.kb_end = static_cast<int>(static_cast<long long>(split + 1) * kb / a.k_splits);
  }
  t.split = split;
  t.tile = local;
  return t;
}

// One K block's promotion of an element: acc = fma(s, partial, acc) (promotion every 128), or with kNeverPromote
// (the recipe option promote=never, an ablation) the CPU model's pending FP22 sum: t = s * partial rounded to
// FP32, acc = fp22_add(acc, t) -- acc starts at zero and is the pending sum, so the CPU's final acc = 0 + pending
// is acc itself (fp22_add never returns -0). The default instantiations compile to the FMA alone.
template <bool kNeverPromote>
__device__ __forceinline__ float promote_block(float s, float partial, float acc) {
  if constexpr (kNeverPromote) {
    return fp22_add(acc, __fmul_rn(s, partial));
  } else {
    return __fmaf_rn(s, partial, acc);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <int BN, ScaleB kScaleB, Schedule kSched, Output kOut, Multicast kMc, bool kBulkScales, int kWgs = 2,
          bool kInt8 = false, bool kNeverPromote = false>
__global__ void __launch_bounds__(threads_of(kWgs), 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                    const __grid_constant__ CUtensorMap tmap_d, const KernelArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Plan = SmemPlan<BN, kScaleB, kOut, kWgs>;
  // kInt8: the operands are INT8 codes; the WGMMAs sum each K block's products exactly into 32-bit integers,
  // which the partial registers hold as raw bits until widen() converts them (exactly: |sum| < 2^21).
  using Mma = std::conditional_t<kInt8, Int8Wgmma<BN>, Fp8Wgmma<BN>>;
  // kNeverPromote: each K block's scaled partial goes into the pending FP22 sum instead (promote_block); built
  // like INT8 (one tile width, 128-row tiles, no multicast, no split-K: fp8_gemm_host.cpp fixed_config).
  static_assert(!kNeverPromote || (!kInt8 && kOut != Output::Bf16SplitK), "never-promote: FP8, no split-K");
  constexpr int kBM = block_m_of(kWgs);
  constexpr int kMathThr = 128 * kWgs;
  static_assert(kWgs == 2 || (kWgs == 3 && kSched != Schedule::GroupedM && kMc != Multicast::ShareA &&
                              kOut != Output::Bf16SplitK && BN <= 128),
                "three math warpgroups: dense or Wgrad, no A multicast, no split-K, block_n <= 128 (160 registers)");
  constexpr int S = Plan::kStages;
  constexpr int kAcc = BN / 2;
  constexpr int kCluster = cluster_size(kMc);
  static_assert(!kBulkScales || kScaleB != ScaleB::PerChunk, "bulk scale copies: not for per-chunk B scales");
  static_assert(kScaleB != ScaleB::TwoBlocks || BN == 160 || BN == 192, "ScaleB::TwoBlocks: block_n 160 or 192");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t smem_base = smem_addr(smem);
  auto full_bar = [&](uint32_t s) { return smem_base + Plan::kBarOffset + 8 * s; };
  auto empty_bar = [&](uint32_t s) { return smem_base + Plan::kBarOffset + 8 * (S + s); };
  auto c_bar = [&](int wg) { return smem_base + Plan::kCBarOffset + 8 * wg; };  // Fp32Tma: C landed
  // Store-warp epilogues: buffer b of math warpgroup wg, its "ready" barrier (C landed, or the buffer free) and its
  // "summed" barrier (the warpgroup's sums are in it).
  auto c_buf = [&](int b, int wg) { return smem_base + static_cast<uint32_t>((b * kWgs + wg) * Plan::kWgBufBytes); };
  auto ready_bar = [&](int b, int wg) { return smem_base + Plan::kCBarOffset + 8 * (b * kWgs + wg); };
  auto summed_bar = [&](int b, int wg) { return smem_base + Plan::kSumBarOffset + 8 * (b * kWgs + wg); };
  auto sfa_stage = [&](uint32_t s) { return reinterpret_cast<float*>(smem + Plan::kSfaOffset + s * Plan::kSfaBytes); };
  auto sfb_stage = [&](uint32_t s) { return reinterpret_cast<float*>(smem + Plan::kSfbOffset + s * Plan::kSfbBytes); };
  // Shared-window addresses of the same scale slots (the math warpgroups read them with LDS: lds_f32).
  auto sfa_addr = [&](uint32_t s) { return smem_base + Plan::kSfaOffset + s * Plan::kSfaBytes; };
  auto sfb_addr = [&](uint32_t s) { return smem_base + Plan::kSfbOffset + s * Plan::kSfbBytes; };

  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int rank = kCluster > 1 ? static_cast<int>(cluster_cta_rank()) : 0;
  const int cluster_id = static_cast<int>(blockIdx.x) / kCluster;
  const int num_clusters = static_cast<int>(gridDim.x) / kCluster;

  if (threadIdx.x == kMathThr) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    if constexpr (kOut == Output::Bf16Tma || is_fp32_staged(kOut)) tma_prefetch_descriptor(&tmap_d);
    if constexpr (kOut == Output::Fp32Tma)
      for (int w = 0; w < kWgs; ++w) mbar_init(c_bar(w), 1);  // one expect_tx arrival + C's bytes
    if constexpr (has_store_warp(kOut))
      for (int b = 0; b < Plan::kCBufs; ++b)
        for (int w = 0; w < kWgs; ++w) {
          mbar_init(ready_bar(b, w), 1);   // the store warp's arrival (with C: expect_tx + C's bytes)
          mbar_init(summed_bar(b, w), 1);  // one thread of the math warpgroup, after its warpgroup barrier
        }
    for (int s = 0; s < S; ++s) {
      mbar_init(full_bar(s), kBulkScales ? 1 : 1 + 32);  // expect_tx arrival of lane 0 (+ one per cp.async lane)
      // Every math thread of this CTA, and one arrival per math warp of the partner CTA (its consumers read
      // the operands multicast into it only through WGMMA, complete for the whole warp at wgmma.wait_group).
      mbar_init(empty_bar(s), kMathThr + (kCluster - 1) * (kMathThr / 32));
    }
    fence_barrier_init();
  }
  if constexpr (kCluster > 1) cluster_sync(); else __syncthreads();

  if (warp >= kMathThr / 32) {
    // ---------------------------------------------------------------- producer warpgroup
    regs_decrease<producer_regs_of(kWgs)>();
    if (warp == kMathThr / 32) {
      uint32_t it = 0;
      for (int unit = cluster_id; unit < args.num_units; unit += num_clusters) {
        const TileCoord t = tile_coord<kSched, kMc, BN, kBM>(args, unit, rank);
        const int b_row = (kSched == Schedule::GroupedM ? t.group * args.n : 0) + t.n0;
        const float* sfb = args.sfb + (kSched == Schedule::GroupedM ? t.group * args.sfb_group : 0);
        for (int kb = t.kb_begin; kb < t.kb_end; ++kb, ++it) {
          const uint32_t s = it % S;
          mbar_wait(empty_bar(s), ((it / S) & 1) ^ 1);
          float* sfa_dst = sfa_stage(s);
          for (int r = lane; r < (kBulkScales ? 0 : kBM); r += 32) {
            const long long row = min(t.m0 + r, args.m - 1);
            cp_async_4(smem_addr(sfa_dst + r), args.sfa + row * args.sfa_row + kb * args.sfa_kb);
          }
          float* sfb_dst = sfb_stage(s);
          if constexpr (kBulkScales) {
          } else if constexpr (kScaleB == ScaleB::Uniform) {
            if (lane == 0) cp_async_4(smem_addr(sfb_dst), sfb + (t.n0 / 128) * args.sfb_row + kb * args.sfb_kb);
          } else if constexpr (kScaleB == ScaleB::TwoBlocks) {
            if (lane < 2) {
              const long long block = min(t.n0 / 128 + lane, (args.n - 1) / 128);
              cp_async_4(smem_addr(sfb_dst + 4 * lane), sfb + block * args.sfb_row + kb * args.sfb_kb);
            }
          } else if constexpr (kScaleB == ScaleB::PerChunk) {
            for (int j = lane; j < BN / 8; j += 32) {
              const long long block = min(t.n0 + 8 * j, args.n - 1) / 128;
              cp_async_4(smem_addr(sfb_dst + j), sfb + block * args.sfb_row + kb * args.sfb_kb);
            }
          } else {
            for (int j = lane; j < BN; j += 32) {
              const long long col = min(t.n0 + j, args.n - 1);
              cp_async_4(smem_addr(sfb_dst + j), sfb + col * args.sfb_row + kb * args.sfb_kb);
            }
          }
          if constexpr (!kBulkScales) cp_async_arrive_noinc(full_bar(s));
          if (lane == 0) {
            // Each CTA receives the whole A and B tiles, whoever of the pair loaded which half.
            // Bulk scales: the tile's rows inside A rounded up to 4 (the host checked the padding; none for a
            // pair member past the last row block), and 16 bytes per B block.
            const uint32_t a_scale_bytes =
                kBulkScales ? 16u * static_cast<uint32_t>((max(0, min(kBM, args.m - t.m0)) + 3) / 4) : 0u;
            const uint32_t b_scale_bytes =
                !kBulkScales                    ? 0u
                : kScaleB == ScaleB::PerColumn ? 16u * static_cast<uint32_t>((max(0, min(BN, args.n - t.n0)) + 3) / 4)
                : kScaleB == ScaleB::TwoBlocks ? 32u
                                               : 16u;
            mbar_arrive_expect_tx(full_bar(s), Plan::kABytes + Plan::kBBytes + a_scale_bytes + b_scale_bytes);
            if constexpr (kBulkScales) {
              if (a_scale_bytes > 0)
                bulk_copy_g2s(smem_addr(sfa_dst), args.sfa + t.m0 + static_cast<long long>(kb) * args.sfa_kb,
                              a_scale_bytes, full_bar(s));
              if constexpr (kScaleB == ScaleB::PerColumn) {
                // One scale per column, MN-major: the tile's columns inside B, rounded up to 4.
                if (b_scale_bytes > 0)
                  bulk_copy_g2s(smem_addr(sfb_dst), sfb + t.n0 + static_cast<long long>(kb) * args.sfb_kb,
                                b_scale_bytes, full_bar(s));
              } else {
              constexpr int kGroups = kScaleB == ScaleB::TwoBlocks ? 2 : 1;
#pragma unroll
              for (int q = 0; q < kGroups; ++q) {
                const long long blk = min(t.n0 / 128 + q, (args.n - 1) / 128);
                const float* group4 = args.sfb_group4_along_kb
                                          ? sfb + blk * args.sfb_row + (kb & ~3)
                                          : sfb + (blk & ~3LL) * args.sfb_row + static_cast<long long>(kb) * args.sfb_kb;
                bulk_copy_g2s(smem_addr(sfb_dst + 4 * q), group4, 16u, full_bar(s));
              }
              }
            }
            const uint32_t a_dst = smem_base + Plan::kAOffset + s * Plan::kABytes;
            const uint32_t b_dst = smem_base + Plan::kBOffset + s * Plan::kBBytes;
            if constexpr (kMc == Multicast::ShareA) {
              tma_load_2d_multicast(a_dst + rank * 64 * kBlockK, &tmap_a, full_bar(s), kb * kBlockK, t.m0 + rank * 64,
                                    0x3);
            } else {
              tma_load_2d(a_dst, &tmap_a, full_bar(s), kb * kBlockK, t.m0);
            }
            if constexpr (kMc == Multicast::ShareB) {
              tma_load_2d_multicast(b_dst + rank * (BN / 2) * kBlockK, &tmap_b, full_bar(s), kb * kBlockK,
                                    b_row + rank * (BN / 2), 0x3);
            } else {
              tma_load_2d(b_dst, &tmap_b, full_bar(s), kb * kBlockK, b_row);
            }
          }
          __syncwarp();
        }
      }
    }
    if constexpr (has_store_warp(kOut)) {
      // ------------------------------------------------------------ store warp (one thread)
      // Walks the CTA's tiles in the math warpgroups' order. Tile i of this CTA uses buffer i % kCBufs of each
      // math warpgroup. The buffers of the first kCBufs tiles are made ready at once; after tile i's sums are
      // stored and the stores have finished READING shared memory, buffer i % kCBufs is made ready for tile
      // i + kCBufs: C's block TMA-loaded into it (expect_tx; boxes wholly right of N neither loaded nor counted),
      // or without C (or for a warpgroup whose rows lie past M) a plain arrival. Every phase of every barrier
      // completes once per tile, whatever the tile holds, so the math warpgroups and this thread count alike.
      if (warp == kMathThr / 32 + 1 && lane == 0) {
        auto make_ready = [&](int unit, int b) {
          const TileCoord t = tile_coord<kSched, kMc, BN, kBM>(args, unit, rank);
          for (int w = 0; w < kWgs; ++w) {
            if (args.c != nullptr && t.m0 + w * 64 < args.m) {
              const int atoms = min(Plan::kF32Atoms, (args.n - t.n0 + 31) / 32);
              mbar_arrive_expect_tx(ready_bar(b, w), static_cast<uint32_t>(atoms) * 64u * 128u);
              for (int atom = 0; atom < atoms; ++atom)
                tma_load_3d(c_buf(b, w) + atom * 64 * 128, &tmap_d, ready_bar(b, w), t.n0 + 32 * atom, t.m0 + w * 64,
                            t.group);
            } else {
              mbar_arrive(ready_bar(b, w));
            }
          }
        };
        for (int b = 0; b < Plan::kCBufs; ++b)
          if (cluster_id + b * num_clusters < args.num_units) make_ready(cluster_id + b * num_clusters, b);
        uint32_t i = 0;
        for (int unit = cluster_id; unit < args.num_units; unit += num_clusters, ++i) {
          const TileCoord t = tile_coord<kSched, kMc, BN, kBM>(args, unit, rank);
          const int b = static_cast<int>(i % Plan::kCBufs);
          const uint32_t phase = (i / Plan::kCBufs) & 1;
          for (int w = 0; w < kWgs; ++w) {
            mbar_wait(summed_bar(b, w), phase);
            if (t.m0 + w * 64 < args.m) {
#pragma unroll 1
              for (int atom = 0; atom < Plan::kF32Atoms; ++atom)
                if (t.n0 + 32 * atom < args.n)
                  tma_store_3d(&tmap_d, c_buf(b, w) + atom * 64 * 128, t.n0 + 32 * atom, t.m0 + w * 64, t.group);
            }
          }
          tma_store_commit();
          const int next = unit + Plan::kCBufs * num_clusters;
          if (next < args.num_units) {
            tma_store_wait_read_all();
            make_ready(next, b);
          }
        }
        tma_store_wait_all();  // the stores must finish before the CTA's shared memory goes away
      }
    }
    // A CTA's shared memory must outlive its partner's multicasts into it and arrivals on its barriers.
    if constexpr (kCluster > 1) cluster_sync();
  } else {
    // ---------------------------------------------------------------- math warpgroups
    regs_increase<math_regs_of(kWgs)>();
    const int wg = warp / 4;                 // 0 .. kWgs-1: rows 64*wg .. 64*wg+63 of the tile
    const int wl = static_cast<int>(threadIdx.x) % 128;
    const int row_in_wg = (warp % 4) * 16 + lane / 4;  // and row_in_wg + 8
    const int quad_col = 2 * (lane % 4);
    const uint32_t peer_bar_base =
        kCluster > 1 ? map_to_cta(smem_base + Plan::kBarOffset, static_cast<uint32_t>(rank ^ 1)) : 0;
    uint32_t it = 0;
    uint32_t c_loads = 0;  // Fp32Tma: C loads this warpgroup has waited for (the C barrier's phase)
    uint32_t local_tile = 0;  // store-warp epilogues: tiles this CTA has finished (buffer and barrier phase)
    for (int unit = cluster_id; unit < args.num_units; unit += num_clusters) {
      const TileCoord t = tile_coord<kSched, kMc, BN, kBM>(args, unit, rank);
      // Fp32Tma: this warpgroup's rows of the tile exist (else it loads and stores nothing).
      const bool wg_rows = t.m0 + wg * 64 < args.m;
      if constexpr (kOut == Output::Fp32Tma) {
        // C's block goes into this warpgroup's staging buffer while the K loop runs, once the previous tile's
        // store has finished reading the buffer. Boxes wholly right of N are not loaded (nor counted).
        if (args.c != nullptr && wg_rows && wl == 0) {
          tma_store_wait_read_all();
          const int atoms = min(Plan::kF32Atoms, (args.n - t.n0 + 31) / 32);
          mbar_arrive_expect_tx(c_bar(wg), static_cast<uint32_t>(atoms) * 64u * 128u);
          const uint32_t d_wg = smem_base + wg * (Plan::kDBytes / kWgs);
          for (int atom = 0; atom < atoms; ++atom)
            tma_load_3d(d_wg + atom * 64 * 128, &tmap_d, c_bar(wg), t.n0 + 32 * atom, t.m0 + wg * 64, t.group);
        }
      }
      if constexpr (kOut == Output::Fp32Direct) {
        // Wgrad += C: the tile's C lines go to L2 now, so that the epilogue's loads after the K loop hit L2 and
        // C's DRAM traffic overlaps the K loop. The quad of threads holding a row's fragments splits its lines.
        if (args.c != nullptr) {
          const long long base =
              (kSched == Schedule::GroupedK ? static_cast<long long>(t.group) * args.m * args.n : 0) + t.n0;
          constexpr int kLines = BN * 4 / 128;  // 128-byte lines per tile row
          for (int l = lane % 4; l < kLines; l += 4) {
            const int col = t.n0 + 32 * l;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = t.m0 + wg * 64 + row_in_wg + 8 * half;
              if (row < args.m && col < args.n)
                prefetch_l2(args.c + base + static_cast<long long>(row) * args.n + 32 * l);
            }
          }
        }
      }
      float acc[kAcc];
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
      float partial[kAcc];

      // One K block: 4 WGMMAs (K = 32 each) of the stage into P, the first into zeroed registers (scale-d 0).
      auto issue = [&](float (&P)[kAcc], uint32_t s) {
        const uint32_t a_addr = smem_base + Plan::kAOffset + s * Plan::kABytes + wg * 64 * kBlockK;
        const uint32_t b_addr = smem_base + Plan::kBOffset + s * Plan::kBBytes;
#pragma unroll
        for (int i = 0; i < kAcc; ++i) fence_register(P[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 32; ++kk) {
          if constexpr (kInt8)
            Mma::mma(reinterpret_cast<uint32_t(&)[kAcc]>(P), smem_desc_k_major_sw128(a_addr + 32 * kk),
                     smem_desc_k_major_sw128(b_addr + 32 * kk), kk > 0 ? 1u : 0u);
          else
            Mma::mma(P, smem_desc_k_major_sw128(a_addr + 32 * kk), smem_desc_k_major_sw128(b_addr + 32 * kk),
                     kk > 0 ? 1u : 0u);
        }
        wgmma_commit();
      };
      // INT8: the integer sums (raw bits in P after the wait) as FP32 values, exact; FP8: nothing to do.
      auto widen = [&](float(&P)[kAcc]) {
        if constexpr (kInt8) {
#pragma unroll
          for (int i = 0; i < kAcc; ++i) P[i] = __int2float_rn(__float_as_int(P[i]));
        }
      };
      // A stage is released after this thread's last read of it (in a cluster both CTAs' producers write into
      // it, so both hear).
      // Every thread arrives on its own CTA's barrier after its own reads of the stage (scales included), so the
      // release covers them directly (one arrival per warp after __syncwarp drew racecheck WAR reports:
      // docs/fp8_gemm.md); the partner CTA hears one arrival per warp (its multicast data is read only by WGMMA).
      auto release = [&](uint32_t s) {
        mbar_arrive(empty_bar(s));
        if constexpr (kCluster > 1) {
          __syncwarp();
          if (lane == 0) mbar_arrive_cluster(peer_bar_base + 8 * (S + s));
        }
      };
      // This thread's two A scales of stage s (rows row_in_wg and row_in_wg + 8 of its warpgroup).
      auto a_scales = [&](uint32_t s) {
        const uint32_t sfa = sfa_addr(s) + 4 * (wg * 64 + row_in_wg);
        return make_float2(lds_f32(sfa), lds_f32(sfa + 32));
      };
      // Per-column promotion (Wgrad) of 8-column chunk j: two products sa*sb per element (the model's order).
      auto fma_column_chunk = [&](float (&P)[kAcc], int j, float2 sa, float2 sb) {
        acc[4 * j + 0] = promote_block<kNeverPromote>(__fmul_rn(sa.x, sb.x), P[4 * j + 0], acc[4 * j + 0]);
        acc[4 * j + 1] = promote_block<kNeverPromote>(__fmul_rn(sa.x, sb.y), P[4 * j + 1], acc[4 * j + 1]);
        acc[4 * j + 2] = promote_block<kNeverPromote>(__fmul_rn(sa.y, sb.x), P[4 * j + 2], acc[4 * j + 2]);
        acc[4 * j + 3] = promote_block<kNeverPromote>(__fmul_rn(sa.y, sb.y), P[4 * j + 3], acc[4 * j + 3]);
      };
      // The scale products of a K block for this thread's two rows: (sa0*sb, sa1*sb) for ScaleB::Uniform,
      // (sa0*sb0, sa1*sb0, sa0*sb1, sa1*sb1) for ScaleB::TwoBlocks (sb0: block n0/128, sb1: the next one).
      auto scale_products = [&](uint32_t s, int kb) {
        const uint32_t sfb = sfb_addr(s);
        const float2 sa = a_scales(s);
        const float sa0 = sa.x, sa1 = sa.y;
        if constexpr (kScaleB == ScaleB::TwoBlocks) {
          // Slot of this K block's value in each group of four (bulk copies), or slot 0 (cp.async).
          auto slot = [&](int q) {
            if constexpr (!kBulkScales) return 0;
            const int blk = min(t.n0 / 128 + q, (args.n - 1) / 128);
            return args.sfb_group4_along_kb ? (kb & 3) : (blk & 3);
          };
          const float sb0 = lds_f32(sfb + 4 * slot(0)), sb1 = lds_f32(sfb + 16 + 4 * slot(1));
          return make_float4(__fmul_rn(sa0, sb0), __fmul_rn(sa1, sb0), __fmul_rn(sa0, sb1), __fmul_rn(sa1, sb1));
        } else {
          const float sb = lds_f32(sfb + (kBulkScales ? 4 * (args.sfb_group4_along_kb ? (kb & 3) : ((t.n0 / 128) & 3)) : 0));
          const float p0 = __fmul_rn(sa0, sb), p1 = __fmul_rn(sa1, sb);
          return make_float4(p0, p1, p0, p1);
        }
      };
      // acc = fma(product, P, acc) for ScaleB::Uniform / TwoBlocks. TwoBlocks: chunks [0, kSplit) lie in block
      // n0/128, the rest in the next one (kSplit = (128 - n0 % 128) / 8: 16 or 8 for BN = 192, 16, 12, 8 or 4 for
      // BN = 160; one unrolled copy per value, no per-chunk select).
      auto fma_products = [&](float (&P)[kAcc], float4 q) {
        auto fma_all = [&]<int kSplit>() {
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            const float q0 = j < kSplit ? q.x : q.z, q1 = j < kSplit ? q.y : q.w;
            acc[4 * j + 0] = promote_block<kNeverPromote>(q0, P[4 * j + 0], acc[4 * j + 0]);
            acc[4 * j + 1] = promote_block<kNeverPromote>(q0, P[4 * j + 1], acc[4 * j + 1]);
            acc[4 * j + 2] = promote_block<kNeverPromote>(q1, P[4 * j + 2], acc[4 * j + 2]);
            acc[4 * j + 3] = promote_block<kNeverPromote>(q1, P[4 * j + 3], acc[4 * j + 3]);
          }
        };
        if constexpr (kScaleB == ScaleB::TwoBlocks && BN == 192) {
          if ((t.n0 & 127) == 0) fma_all.template operator()<16>();
          else fma_all.template operator()<8>();
        } else if constexpr (kScaleB == ScaleB::TwoBlocks) {
          switch ((t.n0 & 127) >> 5) {
            case 0: fma_all.template operator()<16>(); break;
            case 1: fma_all.template operator()<12>(); break;
            case 2: fma_all.template operator()<8>(); break;
            default: fma_all.template operator()<4>(); break;
          }
        } else {
          fma_all.template operator()<kAcc / 4>();
        }
      };
      // Promotion after the wait, scales read then (ScaleB::PerChunk, and PerColumn with three math warpgroups,
      // whose 160 registers leave no room to hold the column scales across the WGMMAs).
      auto promote_release = [&](float (&P)[kAcc], uint32_t s) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) fence_register(P[i]);
        widen(P);
        const uint32_t sfb = sfb_addr(s);
        const float2 sa = a_scales(s);
        if constexpr (kScaleB == ScaleB::PerChunk) {
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            const float sb = lds_f32(sfb + 4 * j);
            const float p0 = __fmul_rn(sa.x, sb), p1 = __fmul_rn(sa.y, sb);
            acc[4 * j + 0] = promote_block<kNeverPromote>(p0, P[4 * j + 0], acc[4 * j + 0]);
            acc[4 * j + 1] = promote_block<kNeverPromote>(p0, P[4 * j + 1], acc[4 * j + 1]);
            acc[4 * j + 2] = promote_block<kNeverPromote>(p1, P[4 * j + 2], acc[4 * j + 2]);
            acc[4 * j + 3] = promote_block<kNeverPromote>(p1, P[4 * j + 3], acc[4 * j + 3]);
          }
        } else {  // ScaleB::PerColumn (Wgrad): two multiplies per element
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) fma_column_chunk(P, j, sa, lds_f32x2(sfb + 4 * (8 * j + quad_col)));
        }
        release(s);
      };
      auto wait_full = [&](uint32_t iter) { mbar_wait(full_bar(iter % S), (iter / S) & 1); };

      if constexpr (kScaleB == ScaleB::Uniform || kScaleB == ScaleB::TwoBlocks) {
        // The K block's scale products are read from shared memory (LDS) after its WGMMAs are issued, while they
        // run; after wgmma.wait_group the stage is released and only the FMAs remain. (Measured: reading
        // them after the wait, as the generic loads of earlier versions did, cost 3-6 % on the large shapes;
        // reading them before the issue made the WGMMA issue wait for the loads.)
        for (int kb = t.kb_begin; kb < t.kb_end; ++kb, ++it) {
          wait_full(it);
          issue(partial, it % S);
          const float4 q = scale_products(it % S, kb);
          wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < kAcc; ++i) fence_register(partial[i]);
          release(it % S);
          widen(partial);
          fma_products(partial, q);
        }
      } else if constexpr (kScaleB == ScaleB::PerColumn && kWgs == 2) {
        // Wgrad with 232 registers: the same, with this thread's two A scales and its 2 x BN/8 column scales
        // (BN/4 registers) read while the WGMMAs run; the promotion forms each product sa*sb and adds it.
        for (int kb = t.kb_begin; kb < t.kb_end; ++kb, ++it) {
          wait_full(it);
          issue(partial, it % S);
          const uint32_t sfb = sfb_addr(it % S) + 4 * quad_col;
          const float2 sa = a_scales(it % S);
          float2 sb[kAcc / 4];
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) sb[j] = lds_f32x2(sfb + 32 * j);
          wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < kAcc; ++i) fence_register(partial[i]);
          release(it % S);
          widen(partial);
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) fma_column_chunk(partial, j, sa, sb[j]);
        }
      } else {
        for (int kb = t.kb_begin; kb < t.kb_end; ++kb, ++it) {
          wait_full(it);
          issue(partial, it % S);
          wgmma_wait<0>();
          promote_release(partial, it % S);
        }
      }

      // ---------------------------------------------------------------- epilogue
      if constexpr (kOut == Output::Bf16Tma) {
        uint8_t* d_wg = smem + wg * (Plan::kDBytes / kWgs);
        if (wl == 0) tma_store_wait_read_all();  // this warpgroup's previous tile has left the buffer
        named_barrier_sync(1 + wg, 128);
        // Swizzle: the 16-byte chunk index inside a row is XORed with address bits 7.. of the row start;
        // rows r and r + 8 share that value, so it is computed once per thread.
        const int chunk_xor = ((row_in_wg * Plan::kAtomBytes) >> 7) & (Plan::kAtomBytes / 16 - 1);
        const uint32_t d_thread = smem_addr(d_wg) + row_in_wg * Plan::kAtomBytes + quad_col * 2;
#pragma unroll
        for (int j = 0; j < kAcc / 4; ++j) {
          const int atom = (8 * j) / Plan::kAtomCols;
          const int chunk = ((8 * j) % Plan::kAtomCols) / 8;
          const uint32_t p = d_thread + atom * (64 * Plan::kAtomBytes) + ((chunk ^ chunk_xor) << 4);
          sts_u32(p, pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]));
          sts_u32(p + 8 * Plan::kAtomBytes, pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
        }
        fence_proxy_async_smem();
        named_barrier_sync(1 + wg, 128);
        if (wl == 0 && t.m0 + wg * 64 < args.m) {
#pragma unroll 1
          for (int atom = 0; atom < Plan::kNumAtoms; ++atom) {
            if (t.n0 + atom * Plan::kAtomCols < args.n)
              tma_store_2d(&tmap_d, smem_addr(d_wg + atom * (64 * Plan::kAtomBytes)), t.n0 + atom * Plan::kAtomCols,
                           t.m0 + wg * 64);
          }
          tma_store_commit();
        }
      } else if constexpr (is_fp32_staged(kOut)) {
        // d = c + acc in the staging buffer (atoms of 64 rows x 32 columns, 128-byte swizzle: the 16-byte chunk
        // index XOR the row's bits 0..2), then TMA stores.
        auto sum_into = [&](uint32_t d_wg, bool with_c) {
          const uint32_t row_base = d_wg + row_in_wg * 128;
          const int chunk_xor = row_in_wg & 7;  // rows row_in_wg and row_in_wg + 8 share it
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            const int col = 8 * j + quad_col;  // in the tile; even, so a float2 stays inside its 16-byte chunk
            const uint32_t p =
                row_base + (col >> 5) * (64 * 128) + ((((col & 31) >> 2) ^ chunk_xor) << 4) + (col & 3) * 4;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const uint32_t q = p + half * 8 * 128;
              float2 v = make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
              if (with_c) {
                const float2 c = lds_f32x2(q);
                v.x = __fadd_rn(c.x, v.x);
                v.y = __fadd_rn(c.y, v.y);
              }
              sts_f32x2(q, v);
            }
          }
          fence_proxy_async_smem();
        };
        if constexpr (has_store_warp(kOut)) {
          // The store warp made this tile's buffer ready (C landed, or the buffer free); once the warpgroup's sums
          // are in it, one thread tells the store warp, which stores them and refills the buffer.
          const int b = static_cast<int>(local_tile % Plan::kCBufs);
          mbar_wait(ready_bar(b, wg), (local_tile / Plan::kCBufs) & 1);
          ++local_tile;
          if (wg_rows) sum_into(c_buf(b, wg), args.c != nullptr);
          named_barrier_sync(1 + wg, 128);
          if (wl == 0) mbar_arrive(summed_bar(b, wg));
        } else {
          // Without C the buffer is free once the previous tile's store has read it; with C, once C has landed
          // (its load was issued after that read).
          const bool with_c = args.c != nullptr && wg_rows;
          if (with_c) {
            mbar_wait(c_bar(wg), c_loads & 1);
            ++c_loads;
          } else {
            if (wl == 0) tma_store_wait_read_all();
            named_barrier_sync(1 + wg, 128);
          }
          const uint32_t d_wg = smem_base + wg * (Plan::kDBytes / kWgs);
          sum_into(d_wg, with_c);
          named_barrier_sync(1 + wg, 128);
          if (wl == 0 && wg_rows) {
#pragma unroll 1
            for (int atom = 0; atom < Plan::kF32Atoms; ++atom)
              if (t.n0 + 32 * atom < args.n)
                tma_store_3d(&tmap_d, d_wg + atom * 64 * 128, t.n0 + 32 * atom, t.m0 + wg * 64, t.group);
            tma_store_commit();
          }
        }
      } else if constexpr (kOut == Output::Bf16SplitK) {
        // Split-K: store this K range's FP32 block, then count the tile's arrivals (per warpgroup: its 64 rows).
        // The last of the k_splits arrivals sums the ranges in range order, total = p0, total = total + p_s
        // (FP32, round to nearest) -- its own range from registers -- and stores BF16. Ordering (the CUDA
        // threadfence-reduction pattern): every thread fences its own stores (__threadfence) before the warpgroup
        // barrier that precedes the counter increment; the last arrival fences again and reads the others'
        // blocks through L2 (ld.global.cg). Measured: one thread's acquire-release atomic after the barrier,
        // without the per-thread fences, let a last arrival read stale ranges (docs/fp8_gemm.md, split-K).
        __shared__ int split_last[2];
        const long long plane = static_cast<long long>(args.m) * args.n;
        float* mine = args.split_partials + static_cast<long long>(t.split) * plane;
#pragma unroll
        for (int j = 0; j < kAcc / 4; ++j) {
          const int col = t.n0 + 8 * j + quad_col;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = t.m0 + wg * 64 + row_in_wg + 8 * half;
            if (col < args.n && row < args.m)
              __stcg(reinterpret_cast<float2*>(mine + static_cast<long long>(row) * args.n + col),
                     make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]));
          }
        }
        __threadfence();
        named_barrier_sync(1 + wg, 128);
        int* counter = args.split_counters + 2 * t.tile + wg;
        if (wl == 0) split_last[wg] = atomicAdd(counter, 1) == args.k_splits - 1 ? 1 : 0;
        named_barrier_sync(1 + wg, 128);
        if (split_last[wg]) {
          __threadfence();
          // The partial-sum registers are free now: they hold the running total. One range at a time, all of
          // this thread's values of that range are loaded before any is added (independent loads in flight;
          // a load-add chain per element would pay the memory latency k_splits x kAcc / 2 times).
          float (&total)[kAcc] = partial;
          for (int s = 0; s < args.k_splits; ++s) {
            const float* src = args.split_partials + s * plane;
#pragma unroll
            for (int j = 0; j < kAcc / 4; ++j) {
              const int col = t.n0 + 8 * j + quad_col;
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                const int row = t.m0 + wg * 64 + row_in_wg + 8 * half;
                float2 v = make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
                if (s != t.split && col < args.n && row < args.m)
                  v = __ldcg(reinterpret_cast<const float2*>(src + static_cast<long long>(row) * args.n + col));
                if (s == 0) {
                  total[4 * j + 2 * half] = v.x;
                  total[4 * j + 2 * half + 1] = v.y;
                } else {
                  total[4 * j + 2 * half] = __fadd_rn(total[4 * j + 2 * half], v.x);
                  total[4 * j + 2 * half + 1] = __fadd_rn(total[4 * j + 2 * half + 1], v.y);
                }
              }
            }
          }
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            const int col = t.n0 + 8 * j + quad_col;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = t.m0 + wg * 64 + row_in_wg + 8 * half;
              if (col < args.n && row < args.m)
                *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(args.d) + static_cast<long long>(row) * args.n +
                                             col) = pack_bf16x2(total[4 * j + 2 * half], total[4 * j + 2 * half + 1]);
            }
          }
          if (wl == 0) atomicExch(counter, 0);  // every range has arrived: ready for the next launch
        }
      } else {
        const long long group_offset =
            kSched == Schedule::GroupedK ? static_cast<long long>(t.group) * args.m * args.n : 0;
#pragma unroll
        for (int j = 0; j < kAcc / 4; ++j) {
          const int col = t.n0 + 8 * j + quad_col;
          if (col >= args.n) continue;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = t.m0 + wg * 64 + row_in_wg + 8 * half;
            if (row >= args.m) continue;
            const long long idx = group_offset + static_cast<long long>(row) * args.n + col;
            const float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
            if constexpr (kOut == Output::Bf16Direct) {
              float a0 = v0, a1 = v1;
              if (args.c_bf16 != nullptr) {
                const uint32_t c = *reinterpret_cast<const uint32_t*>(args.c_bf16 + idx);
                a0 = __fadd_rn(__uint_as_float(c << 16), v0);
                a1 = __fadd_rn(__uint_as_float(c & 0xFFFF0000u), v1);
              }
              *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(args.d) + idx) = pack_bf16x2(a0, a1);
            } else {
              float2 out = make_float2(v0, v1);
              if (args.c != nullptr) {
                const float2 c = *reinterpret_cast<const float2*>(args.c + idx);
                out.x = __fadd_rn(c.x, v0);
                out.y = __fadd_rn(c.y, v1);
              }
              *reinterpret_cast<float2*>(static_cast<float*>(args.d) + idx) = out;
            }
          }
        }
      }
    }
    if constexpr (kOut == Output::Bf16Tma || kOut == Output::Fp32Tma) {
      if (wl == 0) tma_store_wait_all();
    }
    if constexpr (kCluster > 1) cluster_sync();
  }
#endif
}

}  // namespace fp8train::ops::cuda::fp8gemm
