// Host code shared by the FP8 GEMM families: TMA descriptors (cuTensorMapEncodeTiled reached through the
// runtime's driver entry point, so nothing links libcuda directly), the block-size heuristic, argument
// checks, and the printable problem/config descriptions.
#include <fmt/format.h>

#include <mutex>
#include <vector>

#include "ops/cuda/fp8_gemm_launch.cuh"

namespace fp8train::ops::cuda {
namespace fp8gemm {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    FP8T_CHECK(err == cudaSuccess && q == cudaDriverEntryPointSuccess && p != nullptr,
               "cannot reach the CUDA driver's cuTensorMapEncodeTiled (TMA descriptors need a CUDA 12+ driver): {}",
               cudaGetErrorString(err));
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// Per-tile fixed cost in "columns": loading the 128-row A tile, the promotion's scale work and the
// epilogue do not shrink with block_n, so narrow tiles pay relatively more.
constexpr int kTileOverheadColumns = 32;

}  // namespace

CUtensorMap make_tensor_map_2d(const void* base, CUtensorMapDataType dtype, int elem_bytes, uint64_t inner,
                               uint64_t outer, uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                               CUtensorMapSwizzle swizzle) {
  FP8T_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA needs a 16-byte aligned base address");
  FP8T_CHECK(row_stride_bytes % 16 == 0, "TMA needs rows a multiple of 16 bytes apart, got {}", row_stride_bytes);
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, dtype, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP8T_CHECK(r == CUDA_SUCCESS,
             "cuTensorMapEncodeTiled failed (error {}) for a [{}, {}] tensor of {}-byte elements, box {}x{}",
             static_cast<int>(r), outer, inner, elem_bytes, box_outer, box_inner);
  return map;
}

CUtensorMap make_operand_map(const uint8_t* base, int64_t rows, int64_t k, int block_rows) {
  return make_tensor_map_2d(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, static_cast<uint64_t>(k),
                            static_cast<uint64_t>(rows), static_cast<uint64_t>(k), kBlockK,
                            static_cast<uint32_t>(block_rows), CU_TENSOR_MAP_SWIZZLE_128B);
}

CUtensorMap make_bf16_output_map(uint16_t* base, int64_t m, int64_t n, int atom_cols) {
  const CUtensorMapSwizzle swizzle = atom_cols == 64   ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : atom_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_32B;
  return make_tensor_map_2d(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, static_cast<uint64_t>(n),
                            static_cast<uint64_t>(m), static_cast<uint64_t>(n) * 2, static_cast<uint32_t>(atom_cols),
                            64, swizzle);
}

int choose_block_n(int64_t m_blocks, int64_t n, int64_t groups, int num_sms, const int* candidates, int count) {
  FP8T_CHECK(count > 0 && num_sms > 0, "block-size heuristic needs candidates and a positive SM count");
  int best = candidates[0];
  int64_t best_cost = -1;
  for (int i = 0; i < count; ++i) {
    const int bn = candidates[i];
    const int64_t tiles = m_blocks * ((n + bn - 1) / bn) * groups;
    const int64_t per_cta = (tiles + num_sms - 1) / num_sms;
    const int64_t cost = per_cta * (bn + kTileOverheadColumns);
    if (best_cost < 0 || cost < best_cost || (cost == best_cost && bn > best)) {
      best = bn;
      best_cost = cost;
    }
  }
  return best;
}

void check_operand(const void* p, const char* name) {
  FP8T_CHECK(p != nullptr, "FP8 GEMM: {} is a null pointer", name);
  FP8T_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "FP8 GEMM: {} must be 16-byte aligned (TMA)", name);
}

void check_cuda(cudaError_t err, const char* what) {
  FP8T_CHECK(err == cudaSuccess, "{} failed: {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

void set_max_dynamic_smem(const void* kernel, int bytes) {
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  FP8T_CHECK(err == cudaSuccess, "cannot give the FP8 GEMM kernel {} bytes of shared memory: {}", bytes,
             cudaGetErrorString(err));
}

}  // namespace fp8gemm

std::string Fp8GemmConfig::describe() const {
  return fmt::format("block 128x{}, grid {}, raster {}, epilogue {}", block_n, grid == 0 ? std::string("SMs") : std::to_string(grid),
                     raster_group_m, epilogue == Fp8GemmEpilogue::TmaStore ? "tma" : "direct");
}

std::string Fp8GemmDenseProblem::describe() const {
  return fmt::format("dense fp8 gemm m={} n={} k={} (A 1x128, B 128x128, bf16 out)", m, n, k);
}
std::string Fp8GemmGroupedProblem::describe() const {
  return fmt::format("grouped fp8 gemm groups={} m_total={} n={} k={} (A 1x128, B 128x128, bf16 out)", num_groups,
                     m_total, n, k);
}
std::string Fp8GemmWgradProblem::describe() const {
  return fmt::format("wgrad fp8 gemm groups={} m={} n={} k={} (A 1x128, B 1x128, fp32 out{})", num_groups, m, n, k,
                     c != nullptr ? ", += c" : "");
}

void check_group_offsets(const int32_t* host_offsets, int num_groups, int64_t total, const char* what) {
  FP8T_CHECK(num_groups >= 1, "{}: need at least one group, got {}", what, num_groups);
  FP8T_CHECK(host_offsets[0] == 0, "{}: offsets[0] must be 0, got {}", what, host_offsets[0]);
  for (int g = 0; g < num_groups; ++g) {
    FP8T_CHECK(host_offsets[g + 1] >= host_offsets[g], "{}: offsets must not decrease (offsets[{}] = {} < {})", what,
               g + 1, host_offsets[g + 1], host_offsets[g]);
    FP8T_CHECK(host_offsets[g + 1] % fp8gemm::kBlockK == 0,
               "{}: offsets[{}] = {} is not a multiple of 128 (pad each group's segment)", what, g + 1,
               host_offsets[g + 1]);
  }
  FP8T_CHECK(host_offsets[num_groups] == total, "{}: offsets[{}] = {} must equal the total {}", what, num_groups,
             host_offsets[num_groups], total);
}

int fp8_gemm_num_sms() {
  static std::mutex mutex;
  static std::vector<int> cache;
  int device = 0;
  fp8gemm::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(cache.size()) <= device) cache.resize(device + 1, 0);
  if (cache[device] == 0) {
    int sms = 0;
    fp8gemm::check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                          "cudaDeviceGetAttribute");
    cache[device] = sms;
  }
  return cache[device];
}

}  // namespace fp8train::ops::cuda
