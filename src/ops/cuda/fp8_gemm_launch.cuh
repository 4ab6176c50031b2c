// Host-side pieces shared by the three FP8 GEMM family files: TMA descriptor creation, the block-size
// heuristic, argument checks and the templated launch of one kernel instantiation. Included only by the
// fp8_gemm_*.cu files (it instantiates device code).
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/error.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/fp8_gemm_kernel.cuh"

namespace fp8train::ops::cuda::fp8gemm {

// A 2-D tensor map over a row-major [outer, inner] matrix of `elem_bytes`-byte elements with rows
// `row_stride_bytes` apart; boxes of box_outer x box_inner elements. Defined in fp8_gemm_common.cu.
CUtensorMap make_tensor_map_2d(const void* base, CUtensorMapDataType dtype, int elem_bytes, uint64_t inner,
                               uint64_t outer, uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                               CUtensorMapSwizzle swizzle);
// Operand maps: [rows, k] FP8 bytes, boxes of block_rows x 128 with 128-byte swizzle.
CUtensorMap make_operand_map(const uint8_t* base, int64_t rows, int64_t k, int block_rows);
// Output map for the TMA-store epilogue: [m, n] BF16, boxes of 64 rows x atom_cols, swizzle = atom bytes.
CUtensorMap make_bf16_output_map(uint16_t* base, int64_t m, int64_t n, int atom_cols);

// Heuristic over candidate block_n values: tiles = ceil(m/128) * ceil(n/bn) * groups, per-CTA tile count
// = ceil(tiles / num_sms); cost = that count x (bn + kTileOverheadColumns). Ties go to the wider tile.
int choose_block_n(int64_t m_blocks, int64_t n, int64_t groups, int num_sms, const int* candidates, int count);

void check_operand(const void* p, const char* name);
void check_cuda(cudaError_t err, const char* what);  // throws "<what> failed: <error>"
void set_max_dynamic_smem(const void* kernel, int bytes);

template <int BN, ScaleB kScaleB, Schedule kSched, Output kOut>
void launch_kernel(const CUtensorMap& tmap_a, const CUtensorMap& tmap_b, const CUtensorMap& tmap_d,
                   const KernelArgs& args, int grid, cudaStream_t stream) {
  using Plan = SmemPlan<BN, kScaleB, kOut>;
  auto kernel = fp8_gemm_kernel<BN, kScaleB, kSched, kOut>;
  set_max_dynamic_smem(reinterpret_cast<const void*>(kernel), Plan::kDynamicBytes);
  kernel<<<grid, kThreads, Plan::kDynamicBytes, stream>>>(tmap_a, tmap_b, tmap_d, args);
  check_cuda(cudaGetLastError(), "fp8_gemm_kernel launch");
}

template <int BN, ScaleB kScaleB, Output kOut>
constexpr int stages_of() {
  return SmemPlan<BN, kScaleB, kOut>::kStages;
}

}  // namespace fp8train::ops::cuda::fp8gemm
