// Host side of fp8train's Hopper FP8 GEMMs (fp8_gemm.h): argument validation (fp8train::Error with a clear
// sentence), TMA descriptors (cuTensorMapEncodeTiled reached through the runtime's driver entry point, so
// nothing links libcuda directly), the block-size heuristic, and the calls into the per-family launchers
// of fp8_gemm_{dense,grouped,wgrad}.cu.
#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "common/error.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/fp8_gemm_plan.h"

namespace fp8train::ops::cuda {
namespace {

using namespace fp8gemm;

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

void check_cuda(cudaError_t err, const char* what) {
  FP8T_CHECK(err == cudaSuccess, "{} failed: {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    FP8T_CHECK(err == cudaSuccess && q == cudaDriverEntryPointSuccess && p != nullptr,
               "cannot reach the CUDA driver's cuTensorMapEncodeTiled (TMA descriptors need a CUDA 12+ driver): {}",
               cudaGetErrorString(err));
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// A 2-D tensor map over a row-major [outer, inner] matrix with rows `row_stride_bytes` apart, boxes of
// box_outer x box_inner elements, zero fill outside.
CUtensorMap make_tensor_map_2d(const void* base, CUtensorMapDataType dtype, uint64_t inner, uint64_t outer,
                               uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer,
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
  FP8T_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult {}) for a [{}, {}] tensor, box {} x {}",
             static_cast<int>(r), outer, inner, box_outer, box_inner);
  return map;
}

// Operand [rows, k] FP8 bytes: boxes of block_rows x 128 bytes, 128-byte swizzle (what the WGMMA
// descriptors of fp8_gemm_ptx.cuh expect).
CUtensorMap operand_map(const uint8_t* base, int64_t rows, int64_t k, int block_rows) {
  return make_tensor_map_2d(base, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(k),
                            static_cast<uint64_t>(rows), static_cast<uint64_t>(k), kBlockK,
                            static_cast<uint32_t>(block_rows), CU_TENSOR_MAP_SWIZZLE_128B);
}

// BF16 output [m, n] for the TMA-store epilogue: boxes of 64 rows x atom_cols, swizzle span = atom bytes.
CUtensorMap bf16_output_map(uint16_t* base, int64_t m, int64_t n, int block_n) {
  const int atom_cols = atom_cols_for(block_n);
  const CUtensorMapSwizzle swizzle = atom_cols == 64   ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : atom_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_32B;
  return make_tensor_map_2d(base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<uint64_t>(n),
                            static_cast<uint64_t>(m), static_cast<uint64_t>(n) * 2, static_cast<uint32_t>(atom_cols),
                            64, swizzle);
}

// FP32 Wgrad output [groups, m, n] for Output::Fp32Tma: boxes of 1 x 64 rows x 32 columns (128 bytes, the
// 128-byte swizzle span); the group is its own dimension, so a tile's rows past M are clipped, not written into
// the next expert's gradient.
CUtensorMap f32_output_map_3d(float* base, int64_t groups, int64_t m, int64_t n) {
  FP8T_CHECK(reinterpret_cast<uintptr_t>(base) % 16 == 0, "TMA needs a 16-byte aligned base address");
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(n), static_cast<cuuint64_t>(m), static_cast<cuuint64_t>(groups)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(n) * 4, static_cast<cuuint64_t>(m * n) * 4};
  const cuuint32_t box[3] = {32, 64, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, base, dims, strides, box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FP8T_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult {}) for an FP32 [{}, {}, {}] tensor",
             static_cast<int>(r), groups, m, n);
  return map;
}

bool is_built(int v, const int* values, int count) {
  for (int i = 0; i < count; ++i)
    if (values[i] == v) return true;
  return false;
}

// The block-size heuristic, fitted to the block_n sweep measured on the H200 (docs/fp8_gemm.md),
// all choices among the widths a family builds:
//  - one or two row blocks (M <= 256, memory- and latency-bound): the narrowest of {64, 128, 192} whose tiles
//    fit in one wave on the SMs (more CTAs stream B in parallel), else 128;
//  - otherwise the fewest ceil(tiles / SMs) x per-tile cost, cost = K/128 x (block_n + 48 + q) + r x block_n:
//    q = 48 for widths other than the divisors of 128 and 192 (per-chunk B scales: 96, 176; and 160, measured
//    below 192 at equal cost), r = epilogue weight by TMA-store atom width (1 for 64-column atoms, 1.5
//    for 32, 2.5 for 16); block_n 64 and 96 are left out there: 30-60 % slower than 128 on every large shape.
// Ties go to the narrower tile. Checked against the latest H200 sweeps (docs/fp8_gemm.md): the
// measured best or within 1.5 % on the 13 dense shapes and the grouped shape.
int choose_block_n(int64_t m_blocks, int64_t n, int64_t k, int64_t groups, int num_sms, const int* candidates,
                   int count) {
  FP8T_CHECK(count > 0 && num_sms > 0, "block-size heuristic needs candidates and a positive SM count");
  auto built = [&](int bn) { return is_built(bn, candidates, count); };
  if (m_blocks <= 2) {
    for (int bn : {32, 64, 128, 192})
      if (built(bn) && m_blocks * ((n + bn - 1) / bn) * groups <= num_sms) return bn;
    return built(128) ? 128 : candidates[count - 1];
  }
  const int64_t kb = (k + 127) / 128;
  int best = 0;
  double best_cost = 0;
  for (int i = 0; i < count; ++i) {
    const int bn = candidates[i];
    if (bn < 128 && built(128)) continue;
    const int64_t tiles = m_blocks * ((n + bn - 1) / bn) * groups;
    const int64_t per_cta = (tiles + num_sms - 1) / num_sms;
    // Per K block: bn + 48 (fixed cost per block, fitted) + 48 more when every 8-column chunk has its own B scale
    // (no bulk scale copies, heavier promotion); per tile: the epilogue, r x bn by store-atom width.
    // (160 keeps the penalty although its B scales are now two per tile: at equal waves-cost 128 x 160
    // measured 2-3 % below 128 x 192 on 4096 x 7168 x {2048, 16384}.)
    const double q = (128 % bn == 0 || bn == 192) ? 0.0 : 48.0;
    const int atom = atom_cols_for(bn);
    const double r = atom == 64 ? 1.0 : (atom == 32 ? 1.5 : 2.5);
    const double cost = static_cast<double>(per_cta) * (static_cast<double>(kb) * (bn + 48 + q) + r * bn);
    if (best == 0 || cost < best_cost) {
      best = bn;
      best_cost = cost;
    }
  }
  return best;
}

bool is_one_of(int v, const int* values, int count) { return is_built(v, values, count); }

std::string list_of(const int* values, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s;
}

void check_operand(const void* p, const char* family, const char* name) {
  FP8T_CHECK(p != nullptr, "{} FP8 GEMM: {} is a null pointer", family, name);
  FP8T_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "{} FP8 GEMM: {} must be 16-byte aligned (TMA)", family, name);
}

void check_scales(const ScaleView& v, const char* family, const char* name) {
  FP8T_CHECK(v.data != nullptr, "{} FP8 GEMM: {} scales are a null pointer", family, name);
  FP8T_CHECK(reinterpret_cast<uintptr_t>(v.data) % 4 == 0, "{} FP8 GEMM: {} scales must be 4-byte aligned", family,
             name);
}

Multicast to_multicast(Fp8GemmMulticast m) {
  switch (m) {
    case Fp8GemmMulticast::ShareA: return Multicast::ShareA;
    case Fp8GemmMulticast::ShareB: return Multicast::ShareB;
    default: return Multicast::None;
  }
}

const char* epilogue_name(Fp8GemmEpilogue e) {
  switch (e) {
    case Fp8GemmEpilogue::TmaStore: return "tma";
    case Fp8GemmEpilogue::Direct: return "direct";
    case Fp8GemmEpilogue::TmaStoreWarp: return "tma-ws";
    case Fp8GemmEpilogue::TmaStoreWarp2: return "tma-ws2";
  }
  return "?";
}

bool is_store_warp(Fp8GemmEpilogue e) {
  return e == Fp8GemmEpilogue::TmaStoreWarp || e == Fp8GemmEpilogue::TmaStoreWarp2;
}

const char* multicast_name(Fp8GemmMulticast m) {
  switch (m) {
    case Fp8GemmMulticast::Auto: return "auto";
    case Fp8GemmMulticast::None: return "none";
    case Fp8GemmMulticast::ShareA: return "A";
    case Fp8GemmMulticast::ShareB: return "B";
  }
  return "?";
}

// Multicast for an explicit block_n with multicast Auto: none. The heuristics (block_n 0) choose TMA multicast
// where it measured faster (dense: B shared by row pairs; grouped: A shared by column pairs).
Fp8GemmMulticast default_multicast() { return Fp8GemmMulticast::None; }

// Scheduling units for the multicast mode (see KernelArgs), the raster band converted to row units, and the
// grid cap; fills spec.multicast / max_ctas.
void fill_units(KernelArgs& args, LaunchSpec& spec, const Fp8GemmConfig& config, int groups) {
  FP8T_CHECK(config.grid >= 0, "FP8 GEMM: grid must be >= 0 (0 = as many CTAs as are resident), got {}", config.grid);
  FP8T_CHECK(config.raster_group_m >= 1, "FP8 GEMM: raster_group_m must be >= 1, got {}", config.raster_group_m);
  spec.multicast = to_multicast(config.multicast);
  spec.max_ctas = config.grid;
  args.units_m = spec.multicast == Multicast::ShareB ? (args.m_blocks + 1) / 2 : args.m_blocks;
  args.units_n = spec.multicast == Multicast::ShareA ? (args.n_blocks + 1) / 2 : args.n_blocks;
  args.num_units = args.units_m * args.units_n * groups;
  const int band = spec.multicast == Multicast::ShareB ? config.raster_group_m / 2 : config.raster_group_m;
  args.raster_group_m = band > 0 ? band : 1;
}

// Whether the stage's scales can move as bulk copies (kFlagBulkScales; the kernel uses them for block widths
// with one or two B blocks per tile): the A scales of a tile's rows are one 16-byte-aligned run, readable up to
// the next multiple of 4 rows (MN-major A scales, K-block stride padded to 4 rows), and the aligned group of
// four B scales around any (row block, K block) lies inside the array (B rows padded to a multiple of four K
// blocks, or, MN-major, the row-block count padded to four). cuBLASLt's native layouts qualify when padded;
// QTensor's row-major A scales do not (those stages use 4-byte cp.async).
// One scale per row, MN-major (rows contiguous per K block), 16-byte aligned, K-block stride padded to 4 rows.
bool mn_major_padded(const ScaleView& v, int64_t rows) {
  return v.row_stride == 1 && v.kblock_stride % 4 == 0 && v.kblock_stride >= (rows + 3) / 4 * 4 &&
         reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
}

bool bulk_scales_ok(const ScaleView& a, const ScaleView& b, int64_t m, int64_t n_blocks, int64_t k_blocks) {
  const auto aligned16 = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool a_ok = mn_major_padded(a, m);
  const bool b_kmajor = b.kblock_stride == 1 && b.row_stride % 4 == 0 && b.row_stride >= (k_blocks + 3) / 4 * 4;
  const bool b_mnmajor = b.row_stride == 1 && b.kblock_stride % 4 == 0 && b.kblock_stride >= (n_blocks + 3) / 4 * 4;
  return a_ok && (b_kmajor || b_mnmajor) && b.group_stride % 4 == 0 && aligned16(b.data);
}

void fill_scales(KernelArgs& args, const ScaleView& a, const ScaleView& b) {
  args.bulk_scales = bulk_scales_ok(a, b, args.m, (args.n + 127) / 128, (args.k + 127) / 128) ? 1 : 0;
  args.sfb_group4_along_kb = b.kblock_stride == 1 ? 1 : 0;
  args.sfa = a.data;
  args.sfa_row = a.row_stride;
  args.sfa_kb = a.kblock_stride;
  args.sfb = b.data;
  args.sfb_row = b.row_stride;
  args.sfb_kb = b.kblock_stride;
  args.sfb_group = b.group_stride;
}

constexpr int kDenseBlockNs[] = {32, 64, 96, 128, 160, 176, 192};
constexpr int kDenseSplitBlockNs[] = {32, 64};  // fp8_gemm_dense.cu kSplitKBuilt must match
constexpr int kNumDenseSplit = sizeof(kDenseSplitBlockNs) / sizeof(int);
constexpr int kMaxKSplits = 32;
constexpr int kGroupedBlockNs[] = {64, 128, 160, 176, 192};
constexpr int kWgradBlockNs[] = {64, 96, 128};
constexpr int kNumDense = sizeof(kDenseBlockNs) / sizeof(int);
constexpr int kNumGrouped = sizeof(kGroupedBlockNs) / sizeof(int);
constexpr int kNumWgrad = sizeof(kWgradBlockNs) / sizeof(int);

constexpr int64_t kMaxDim = int64_t{1} << 31;

// Split-K for one or two row blocks, fitted to the H200 sweep (docs/fp8_gemm.md, split-K; every split-K width
// x 1..16 ranges on the six M = 128 shapes): splitting pays only where the plain kernel leaves half the SMs idle.
// The narrowest of {32, 64} whose tiles fill at most half the SMs, cut into num_sms / tiles ranges (ranges of at
// least 8 K blocks); otherwise no split. Measured: 128x2112x7168 -> 32 x 2 (17.5-19.0 us vs 21.7-24.7 unsplit),
// 128x4096x7168 -> 64 x 2 (21.8-22.3 vs 22.2-25.3); with more tiles every split was slower (the split epilogue
// and the per-range pipeline fill cost more than the extra SMs bring: the shapes are bound by DRAM and latency).
std::pair<int, int> choose_split(int64_t m_blocks, int64_t n, int64_t kb, int num_sms) {
  for (int bn : {32, 64}) {
    const int64_t tiles = m_blocks * ((n + bn - 1) / bn);
    if (2 * tiles > num_sms) continue;
    const int64_t splits = std::min<int64_t>({num_sms / tiles, kb / 8, kMaxKSplits});
    return {bn, splits >= 2 ? static_cast<int>(splits) : 1};
  }
  return {0, 1};
}

// Split-K workspace per (device, stream): FP32 ranges and per-(tile, warpgroup) counters, grown on demand (the
// stream is synchronized before an old buffer is freed) and kept for the process. Counters are zeroed when
// allocated; every launch leaves them zero.
struct SplitWorkspace {
  float* partials = nullptr;
  int* counters = nullptr;
  size_t partial_floats = 0, counter_ints = 0;
};
SplitWorkspace split_workspace(size_t floats, size_t ints, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, SplitWorkspace> pool;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  SplitWorkspace& w = pool[{device, stream}];
  if (w.partial_floats < floats || w.counter_ints < ints) {
    if (w.partials != nullptr || w.counters != nullptr) {
      check_cuda(cudaStreamSynchronize(stream), "split-K workspace: cudaStreamSynchronize");
      check_cuda(cudaFree(w.partials), "split-K workspace: cudaFree");
      check_cuda(cudaFree(w.counters), "split-K workspace: cudaFree");
      w = SplitWorkspace{};
    }
    const size_t f = std::max(floats, w.partial_floats), c = std::max(ints, w.counter_ints);
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&w.partials), f * sizeof(float)), "split-K workspace: cudaMalloc");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&w.counters), c * sizeof(int)), "split-K workspace: cudaMalloc");
    check_cuda(cudaMemsetAsync(w.counters, 0, c * sizeof(int), stream), "split-K workspace: cudaMemsetAsync");
    w.partial_floats = f;
    w.counter_ints = c;
  }
  return w;
}

}  // namespace

std::string Fp8GemmConfig::describe() const {
  return fmt::format("block {}x{}, multicast {}, grid {}, raster {}, epilogue {}, k splits {}",
                     block_m == 0 ? 128 : block_m, block_n, multicast_name(multicast),
                     grid == 0 ? std::string("SMs") : std::to_string(grid), raster_group_m, epilogue_name(epilogue),
                     k_splits == 0 ? std::string("auto") : std::to_string(k_splits));
}
Fp8GemmConfig parse_fp8_gemm_config(const std::string& text) {
  Fp8GemmConfig config;
  auto parse_int = [&](const std::string& key, const std::string& value, int lo, int hi) {
    int v = 0;
    const char* end = value.data() + value.size();
    const auto [ptr, ec] = std::from_chars(value.data(), end, v);
    FP8T_CHECK(ec == std::errc() && ptr == end && v >= lo && v <= hi,
               "FP8 GEMM config '{}': {} = '{}' must be an integer in [{}, {}]", text, key, value, lo, hi);
    return v;
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string pair = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (pair.empty()) {
      FP8T_CHECK(comma == text.size() && !text.empty() && text.back() != ',',
                 "FP8 GEMM config '{}': empty key=value pair", text);
      break;
    }
    const size_t eq = pair.find('=');
    FP8T_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < pair.size(),
               "FP8 GEMM config '{}': '{}' is not key=value (keys: block, multicast, grid, raster, epilogue, splits)",
               text, pair);
    const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
    if (key == "block") {
      const size_t x = value.find('x');
      if (x == std::string::npos) {
        config.block_n = parse_int("block", value, 16, 256);
      } else {
        config.block_m = parse_int("block rows", value.substr(0, x), 64, 256);
        config.block_n = parse_int("block columns", value.substr(x + 1), 16, 256);
      }
    } else if (key == "multicast") {
      if (value == "auto") config.multicast = Fp8GemmMulticast::Auto;
      else if (value == "none") config.multicast = Fp8GemmMulticast::None;
      else if (value == "A") config.multicast = Fp8GemmMulticast::ShareA;
      else if (value == "B") config.multicast = Fp8GemmMulticast::ShareB;
      else FP8T_FAIL("FP8 GEMM config '{}': multicast = '{}' must be auto, none, A or B", text, value);
    } else if (key == "grid") {
      config.grid = parse_int("grid", value, 0, 1 << 20);
    } else if (key == "raster") {
      config.raster_group_m = parse_int("raster", value, 1, 1 << 20);
    } else if (key == "epilogue") {
      if (value == "tma") config.epilogue = Fp8GemmEpilogue::TmaStore;
      else if (value == "direct") config.epilogue = Fp8GemmEpilogue::Direct;
      else if (value == "tma-ws") config.epilogue = Fp8GemmEpilogue::TmaStoreWarp;
      else if (value == "tma-ws2") config.epilogue = Fp8GemmEpilogue::TmaStoreWarp2;
      else FP8T_FAIL("FP8 GEMM config '{}': epilogue = '{}' must be tma, direct, tma-ws or tma-ws2", text, value);
    } else if (key == "splits") {
      config.k_splits = parse_int("splits", value, 0, kMaxKSplits);
    } else {
      FP8T_FAIL("FP8 GEMM config '{}': unknown key '{}' (keys: block, multicast, grid, raster, epilogue, splits)",
                text, key);
    }
  }
  return config;
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

int fp8_gemm_num_sms() {
  static std::mutex mutex;
  static std::vector<int> cache;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(cache.size()) <= device) cache.resize(device + 1, 0);
  if (cache[device] == 0) {
    int sms = 0;
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    cache[device] = sms;
  }
  return cache[device];
}

void check_group_offsets(const int32_t* host_offsets, int num_groups, int64_t total, const char* what) {
  FP8T_CHECK(num_groups >= 1, "{}: need at least one group, got {}", what, num_groups);
  FP8T_CHECK(host_offsets[0] == 0, "{}: offsets[0] must be 0, got {}", what, host_offsets[0]);
  for (int g = 0; g < num_groups; ++g) {
    FP8T_CHECK(host_offsets[g + 1] >= host_offsets[g], "{}: offsets must not decrease (offsets[{}] = {} < {})", what,
               g + 1, host_offsets[g + 1], host_offsets[g]);
    FP8T_CHECK(host_offsets[g + 1] % kBlockK == 0,
               "{}: offsets[{}] = {} is not a multiple of 128 (pad each group's segment)", what, g + 1,
               host_offsets[g + 1]);
  }
  FP8T_CHECK(host_offsets[num_groups] == total, "{}: offsets[{}] = {} must equal the total {}", what, num_groups,
             host_offsets[num_groups], total);
}

// ---- dense ---------------------------------------------------------------------------------------------
const int* fp8_gemm_dense_block_ns(int* count) {
  *count = kNumDense;
  return kDenseBlockNs;
}

const int* fp8_gemm_dense_split_block_ns(int* count) {
  *count = kNumDenseSplit;
  return kDenseSplitBlockNs;
}

// Many row blocks: 128-row tiles of the cost model's width, in clusters of two sharing B (TMA multicast) for the
// 128 / 160 / 192 widths (one or two B scales per tile). Measured on the H200 once the scale reads became shared-memory loads issued while the WGMMAs
// run (docs/fp8_gemm.md): 128 x 192 with B multicast is at or above the 192 x 128 tiles (three math
// warpgroups) on every DeepSeek-V3 shape (4096 x 7168 x 16384 1219 vs 1166 TFLOP/s, 4096 x 24576 x 1536 1166 vs
// 1121, ties on the others), and B multicast is +0-5 % over none. 192-row tiles stay available by
// Fp8GemmConfig::block_m. Few row blocks: the widths that fill the SMs, split-K where half of them would idle.
Fp8GemmConfig fp8_gemm_dense_heuristic(int64_t m, int64_t n, int64_t k, int num_sms) {
  Fp8GemmConfig config;
  const int64_t m_blocks = (m + kBlockM - 1) / kBlockM;
  config.block_n = choose_block_n(m_blocks, n, k, 1, num_sms, kDenseBlockNs, kNumDense);
  config.block_m = kBlockM;
  config.k_splits = 1;
  config.multicast = Fp8GemmMulticast::None;
  if (m_blocks > 2 && config.block_n >= 128 && block_scale_b(config.block_n) != ScaleB::PerChunk)
    config.multicast = Fp8GemmMulticast::ShareB;
  if (m_blocks <= 2) {
    const auto [bn, splits] = choose_split(m_blocks, n, (k + kBlockK - 1) / kBlockK, num_sms);
    if (splits > 1) {
      config.block_n = bn;
      config.k_splits = splits;
    }
  }
  return config;
}

namespace fp8gemm {

// INT8 operands, and FP8 never promoting, run the one fixed build of each family (kInt8BlockN wide, 128-row tiles,
// no multicast, no split-K); a config asking for anything else is refused, naming it.
Fp8GemmConfig fixed_config(Fp8GemmConfig c, const char* family, bool int8) {
  FP8T_CHECK((c.block_n == 0 || c.block_n == kInt8BlockN) && (c.block_m == 0 || c.block_m == kBlockM) &&
                 c.k_splits <= 1 && (c.multicast == Fp8GemmMulticast::Auto || c.multicast == Fp8GemmMulticast::None),
             "{} {} GEMM: built for block_n {}, 128-row tiles, no multicast and no split-K (asked for {})", family,
             int8 ? "INT8" : "never-promoting FP8", kInt8BlockN, c.describe());
  c.block_n = kInt8BlockN;
  c.block_m = kBlockM;
  c.k_splits = 1;
  c.multicast = Fp8GemmMulticast::None;
  return c;
}

PreparedLaunch prepare_dense(const Fp8GemmDenseProblem& p, const Fp8GemmConfig& config_in, cudaStream_t stream) {
  FP8T_CHECK(p.m > 0 && p.n > 0 && p.k > 0, "dense FP8 GEMM: bad shape m={} n={} k={}", p.m, p.n, p.k);
  FP8T_CHECK(p.k % 16 == 0, "dense FP8 GEMM: K = {} must be a multiple of 16 (TMA rows of 16-byte multiples)", p.k);
  FP8T_CHECK(p.n % 16 == 0, "dense FP8 GEMM: N = {} must be a multiple of 16", p.n);
  FP8T_CHECK(p.m < kMaxDim && p.n < kMaxDim && p.k < kMaxDim, "dense FP8 GEMM: dimensions must fit in 31 bits");
  check_operand(p.a, "dense", "A");
  check_operand(p.b, "dense", "B");
  check_operand(p.d, "dense", "D");
  check_scales(p.a_scales, "dense", "A");
  check_scales(p.b_scales, "dense", "B");
  FP8T_CHECK(!(p.int8 && p.never_promote), "dense FP8 GEMM: never_promote is for FP8 operands");
  Fp8GemmConfig config = p.int8 || p.never_promote ? fixed_config(config_in, "dense", p.int8) : config_in;
  if (p.c != nullptr) {  // accumulate-into-C: the direct epilogue reads C; one K chain, no clusters
    check_operand(p.c, "dense", "C");
    FP8T_CHECK(config.k_splits <= 1 && config.multicast != Fp8GemmMulticast::ShareA &&
                   config.multicast != Fp8GemmMulticast::ShareB,
               "dense FP8 GEMM: accumulating into C runs without split-K or multicast (asked for {})",
               config.describe());
    config.k_splits = 1;
    config.multicast = Fp8GemmMulticast::None;
    config.epilogue = Fp8GemmEpilogue::Direct;
  }
  const int num_sms = fp8_gemm_num_sms();
  const Fp8GemmConfig heuristic = fp8_gemm_dense_heuristic(p.m, p.n, p.k, num_sms);
  const int64_t kb = (p.k + kBlockK - 1) / kBlockK;
  FP8T_CHECK(config.k_splits >= 0 && config.k_splits <= std::min<int64_t>(kMaxKSplits, kb),
             "dense FP8 GEMM: k_splits = {} must be 0 (auto) or 1..{} (at most K/128 = {} and {})", config.k_splits,
             std::min<int64_t>(kMaxKSplits, kb), kb, kMaxKSplits);
  if (config.block_n == 0) {
    // The heuristic's tile, unless the config asks for something it does not combine with: split-K (then the
    // heuristic's split width, or 64), A multicast (then 128-row tiles) or 192-row tiles (then block_n 128);
    // the heuristic's multicast with its own tile.
    const bool share_a = config.multicast == Fp8GemmMulticast::ShareA;
    config.block_n = config.k_splits > 1 && heuristic.k_splits == 1 ? 64 : heuristic.block_n;
    if (config.k_splits == 0) config.k_splits = heuristic.k_splits;
    if (config.block_m == 0) config.block_m = share_a || config.k_splits > 1 ? kBlockM : heuristic.block_m;
    if (config.block_m == kBlockM && heuristic.block_m != kBlockM && config.k_splits <= 1)
      config.block_n = choose_block_n((p.m + kBlockM - 1) / kBlockM, p.n, p.k, 1, num_sms, kDenseBlockNs, kNumDense);
    if (config.block_m == 192) config.block_n = 128;  // the width 192-row tiles are built for
    if (config.multicast == Fp8GemmMulticast::Auto && config.block_n == heuristic.block_n &&
        config.block_m == heuristic.block_m && config.k_splits == heuristic.k_splits &&
        config.epilogue == Fp8GemmEpilogue::TmaStore)
      config.multicast = heuristic.multicast;
  }
  FP8T_CHECK(is_one_of(config.block_n, kDenseBlockNs, kNumDense), "dense FP8 GEMM: block_n {} is not built (one of {})",
             config.block_n, list_of(kDenseBlockNs, kNumDense));
  if (config.k_splits == 0) config.k_splits = 1;  // an explicit block_n without k_splits: no split
  if (config.block_m == 0) config.block_m = kBlockM;
  FP8T_CHECK(config.block_m == kBlockM || config.block_m == 192, "dense FP8 GEMM: block_m {} is not built (128 or 192)",
             config.block_m);
  const bool rows192 = config.block_m == 192;
  FP8T_CHECK(!rows192 || (config.block_n == 128 && config.k_splits <= 1 && config.multicast != Fp8GemmMulticast::ShareA),
             "dense FP8 GEMM: 192-row tiles are built for block_n 128 without split-K or A multicast (asked for {})",
             config.describe());
  const bool split = config.k_splits > 1;
  FP8T_CHECK(!split || is_one_of(config.block_n, kDenseSplitBlockNs, kNumDenseSplit),
             "dense FP8 GEMM: split-K is built for block_n {} (asked for {})", list_of(kDenseSplitBlockNs, kNumDenseSplit),
             config.block_n);
  FP8T_CHECK(!split || (config.multicast != Fp8GemmMulticast::ShareA && config.multicast != Fp8GemmMulticast::ShareB),
             "dense FP8 GEMM: split-K is built without multicast (asked for multicast {})",
             multicast_name(config.multicast));
  FP8T_CHECK(!is_store_warp(config.epilogue), "dense FP8 GEMM: epilogue {} is built for K-grouped Wgrad only",
             epilogue_name(config.epilogue));
  const bool tma = config.epilogue == Fp8GemmEpilogue::TmaStore;
  if (config.multicast == Fp8GemmMulticast::Auto) config.multicast = default_multicast();
  FP8T_CHECK(tma || config.multicast == Fp8GemmMulticast::None,
             "dense FP8 GEMM: the direct epilogue is built without multicast (asked for multicast {})",
             multicast_name(config.multicast));

  PreparedLaunch L;
  KernelArgs& args = L.args;
  args.m = static_cast<int>(p.m);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.m_blocks = static_cast<int>((p.m + config.block_m - 1) / config.block_m);
  args.n_blocks = static_cast<int>((p.n + config.block_n - 1) / config.block_n);
  fill_units(args, L.spec, config, 1);
  fill_scales(args, p.a_scales, p.b_scales);
  args.d = p.d;
  args.c_bf16 = p.c;
  L.spec.int8 = p.int8;
  L.spec.never_promote = p.never_promote;
  L.spec.block_n = config.block_n;
  L.spec.warpgroups = rows192 ? 3 : 2;
  L.spec.out = split ? Output::Bf16SplitK : (tma ? Output::Bf16Tma : Output::Bf16Direct);
  if (split) {
    const int64_t tiles = static_cast<int64_t>(args.units_m) * args.units_n;
    FP8T_CHECK(tiles * config.k_splits < kMaxDim, "dense FP8 GEMM: too many split-K units");
    const SplitWorkspace w = split_workspace(static_cast<size_t>(config.k_splits * p.m * p.n),
                                             static_cast<size_t>(2 * tiles), stream);
    args.k_splits = config.k_splits;
    args.split_partials = w.partials;
    args.split_counters = w.counters;
    args.num_units = static_cast<int>(tiles * config.k_splits);
  }
  L.a = operand_map(p.a, p.m, p.k, L.spec.multicast == Multicast::ShareA ? kBlockM / 2 : config.block_m);
  L.b = operand_map(p.b, p.n, p.k, L.spec.multicast == Multicast::ShareB ? config.block_n / 2 : config.block_n);
  L.d = tma ? bf16_output_map(p.d, p.m, p.n, config.block_n) : L.a;
  return L;
}

}  // namespace fp8gemm

void fp8_gemm_dense(const Fp8GemmDenseProblem& p, const Fp8GemmConfig& config, cudaStream_t stream) {
  if (p.m == 0 && p.n > 0 && p.k > 0) return;  // nothing to compute
  const PreparedLaunch L = prepare_dense(p, config, stream);
  check_cuda(launch_dense_kernel(L.spec, L.a, L.b, L.d, L.args, stream), "dense FP8 GEMM kernel launch");
}

// ---- grouped (MoE contiguous) ----------------------------------------------------------------------------
const int* fp8_gemm_grouped_block_ns(int* count) {
  *count = kNumGrouped;
  return kGroupedBlockNs;
}

Fp8GemmConfig fp8_gemm_grouped_heuristic(int64_t m_total, int64_t n, int64_t k, int num_sms) {
  Fp8GemmConfig config;
  config.block_n = choose_block_n(m_total / kBlockM, n, k, 1, num_sms, kGroupedBlockNs, kNumGrouped);
  config.block_m = kBlockM;  // experts' rows are padded to 128: a 192-row tile could straddle two
  config.k_splits = 1;       // (dense only)
  // Pairs of column tiles sharing A (B multicast would pair two experts' tiles): 8 x 4096 tokens, N 4096, K 7168
  // at block_n 192: 1149 vs 1090 TFLOP/s without (docs/fp8_gemm.md).
  const int64_t n_blocks = (n + config.block_n - 1) / config.block_n;
  config.multicast = config.block_n >= 128 && n_blocks >= 2 ? Fp8GemmMulticast::ShareA : Fp8GemmMulticast::None;
  return config;
}

namespace fp8gemm {

PreparedLaunch prepare_grouped(const Fp8GemmGroupedProblem& p, const Fp8GemmConfig& config_in) {
  FP8T_CHECK(p.num_groups >= 1, "grouped FP8 GEMM: need at least one group, got {}", p.num_groups);
  FP8T_CHECK(p.m_total > 0 && p.n > 0 && p.k > 0, "grouped FP8 GEMM: bad shape m_total={} n={} k={}", p.m_total,
             p.n, p.k);
  FP8T_CHECK(p.m_total % kBlockM == 0,
             "grouped FP8 GEMM: m_total = {} must be a multiple of 128 (each group's rows are padded to 128)",
             p.m_total);
  FP8T_CHECK(p.k % 16 == 0, "grouped FP8 GEMM: K = {} must be a multiple of 16 (TMA rows of 16-byte multiples)", p.k);
  FP8T_CHECK(p.n % 16 == 0, "grouped FP8 GEMM: N = {} must be a multiple of 16", p.n);
  FP8T_CHECK(p.m_total < kMaxDim && p.n * p.num_groups < kMaxDim && p.k < kMaxDim,
             "grouped FP8 GEMM: dimensions must fit in 31 bits");
  FP8T_CHECK(p.row_offsets != nullptr, "grouped FP8 GEMM: row_offsets is a null pointer");
  check_operand(p.a, "grouped", "A");
  check_operand(p.b, "grouped", "B");
  check_operand(p.d, "grouped", "D");
  check_scales(p.a_scales, "grouped", "A");
  check_scales(p.b_scales, "grouped", "B");
  FP8T_CHECK(!(p.int8 && p.never_promote), "grouped FP8 GEMM: never_promote is for FP8 operands");
  Fp8GemmConfig config = p.int8 || p.never_promote ? fixed_config(config_in, "grouped", p.int8) : config_in;
  if (config.block_n == 0) {
    const Fp8GemmConfig heuristic = fp8_gemm_grouped_heuristic(p.m_total, p.n, p.k, fp8_gemm_num_sms());
    config.block_n = heuristic.block_n;
    if (config.multicast == Fp8GemmMulticast::Auto && config.epilogue == Fp8GemmEpilogue::TmaStore)
      config.multicast = heuristic.multicast;
  }
  FP8T_CHECK(is_one_of(config.block_n, kGroupedBlockNs, kNumGrouped),
             "grouped FP8 GEMM: block_n {} is not built (one of {})", config.block_n,
             list_of(kGroupedBlockNs, kNumGrouped));
  FP8T_CHECK(!is_store_warp(config.epilogue), "grouped FP8 GEMM: epilogue {} is built for K-grouped Wgrad only",
             epilogue_name(config.epilogue));
  const bool tma = config.epilogue == Fp8GemmEpilogue::TmaStore;
  if (config.multicast == Fp8GemmMulticast::Auto) config.multicast = default_multicast();
  FP8T_CHECK(config.multicast != Fp8GemmMulticast::ShareB,
             "grouped FP8 GEMM: multicast of B would pair tiles of two experts; use ShareA or None");
  FP8T_CHECK(config.block_m == 0 || config.block_m == kBlockM,
             "grouped FP8 GEMM: block_m must be 128 (experts' rows are padded to 128; a {}-row tile could straddle two)",
             config.block_m);
  FP8T_CHECK(config.k_splits <= 1, "grouped FP8 GEMM: split-K is dense only (asked for {} ranges)", config.k_splits);
  FP8T_CHECK(tma || config.multicast == Fp8GemmMulticast::None,
             "grouped FP8 GEMM: the direct epilogue is built without multicast");

  PreparedLaunch L;
  KernelArgs& args = L.args;
  args.m = static_cast<int>(p.m_total);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.num_groups = p.num_groups;
  args.group_offsets = p.row_offsets;
  args.m_blocks = static_cast<int>(p.m_total / kBlockM);
  args.n_blocks = static_cast<int>((p.n + config.block_n - 1) / config.block_n);
  fill_units(args, L.spec, config, 1);
  fill_scales(args, p.a_scales, p.b_scales);
  args.d = p.d;
  L.spec.int8 = p.int8;
  L.spec.never_promote = p.never_promote;
  L.spec.block_n = config.block_n;
  L.spec.out = tma ? Output::Bf16Tma : Output::Bf16Direct;
  L.a = operand_map(p.a, p.m_total, p.k, L.spec.multicast == Multicast::ShareA ? kBlockM / 2 : kBlockM);
  L.b = operand_map(p.b, p.n * p.num_groups, p.k, config.block_n);
  L.d = tma ? bf16_output_map(p.d, p.m_total, p.n, config.block_n) : L.a;
  return L;
}

}  // namespace fp8gemm

void fp8_gemm_grouped(const Fp8GemmGroupedProblem& p, const Fp8GemmConfig& config, cudaStream_t stream) {
  if (p.m_total == 0 && p.num_groups >= 1 && p.n > 0 && p.k > 0) return;  // every expert empty
  const PreparedLaunch L = prepare_grouped(p, config);
  check_cuda(launch_grouped_kernel(L.spec, L.a, L.b, L.d, L.args, stream), "grouped FP8 GEMM kernel launch");
}

// ---- Wgrad -------------------------------------------------------------------------------------------------
const int* fp8_gemm_wgrad_block_ns(int* count) {
  *count = kNumWgrad;
  return kWgradBlockNs;
}

// Wgrad: 192-row tiles (block_n 128) when their waves x 1.5 (the work of a 192-row tile) x 0.85 (the per-MAC
// gain of three math warpgroups on the two-multiply per-column promotion, fitted to the H200 Wgrad sweep:
// 7168x2048x16384 800 vs 717 TFLOP/s, 8 experts x 4096x7168 over 2048 tokens each 458 vs 360) is below the
// 128-row tiles' waves.
Fp8GemmConfig fp8_gemm_wgrad_heuristic(int64_t m, int64_t n, int64_t k, int num_groups, int num_sms) {
  Fp8GemmConfig config;
  const int64_t m_blocks = (m + kBlockM - 1) / kBlockM;
  config.block_n = choose_block_n(m_blocks, n, k, num_groups, num_sms, kWgradBlockNs, kNumWgrad);
  config.block_m = kBlockM;
  config.k_splits = 1;  // (dense only)
  if (config.block_n == 128 && m_blocks > 2) {
    const int64_t n_blocks = (n + 127) / 128;
    const int64_t waves128 = (m_blocks * n_blocks * num_groups + num_sms - 1) / num_sms;
    const int64_t waves192 = (((m + 191) / 192) * n_blocks * num_groups + num_sms - 1) / num_sms;
    if (static_cast<double>(waves192) * 1.5 * 0.85 < static_cast<double>(waves128)) config.block_m = 192;
  }
  config.multicast = default_multicast();
  return config;
}

namespace fp8gemm {

PreparedLaunch prepare_wgrad(const Fp8GemmWgradProblem& p, const Fp8GemmConfig& config_in) {
  FP8T_CHECK(p.num_groups >= 1, "Wgrad FP8 GEMM: need at least one group, got {}", p.num_groups);
  FP8T_CHECK(p.num_groups == 1 || p.k_offsets != nullptr,
             "Wgrad FP8 GEMM: {} groups need k_offsets (device memory, num_groups + 1 entries)", p.num_groups);
  FP8T_CHECK(p.m > 0 && p.n > 0 && p.k > 0, "Wgrad FP8 GEMM: bad shape m={} n={} k={}", p.m, p.n, p.k);
  FP8T_CHECK(p.k % 16 == 0, "Wgrad FP8 GEMM: K = {} must be a multiple of 16 (TMA rows of 16-byte multiples)", p.k);
  FP8T_CHECK(p.n % 16 == 0, "Wgrad FP8 GEMM: N = {} must be a multiple of 16", p.n);
  FP8T_CHECK(p.m * p.num_groups < kMaxDim && p.n < kMaxDim && p.k < kMaxDim,
             "Wgrad FP8 GEMM: dimensions must fit in 31 bits");
  check_operand(p.a, "Wgrad", "A");
  check_operand(p.b, "Wgrad", "B");
  FP8T_CHECK(p.d != nullptr && reinterpret_cast<uintptr_t>(p.d) % 8 == 0,
             "Wgrad FP8 GEMM: D must be a non-null, 8-byte aligned pointer");
  FP8T_CHECK(p.c == nullptr || reinterpret_cast<uintptr_t>(p.c) % 8 == 0, "Wgrad FP8 GEMM: C must be 8-byte aligned");
  check_scales(p.a_scales, "Wgrad", "A");
  check_scales(p.b_scales, "Wgrad", "B");
  FP8T_CHECK(!(p.int8 && p.never_promote), "Wgrad FP8 GEMM: never_promote is for FP8 operands");
  Fp8GemmConfig config = p.int8 || p.never_promote ? fixed_config(config_in, "Wgrad", p.int8) : config_in;
  if (config.block_n == 0) {
    const Fp8GemmConfig heuristic = fp8_gemm_wgrad_heuristic(p.m, p.n, p.k, p.num_groups, fp8_gemm_num_sms());
    config.block_n = heuristic.block_n;
    // The experts' K-grouped FP8 Wgrad takes the store-warp epilogue when the heuristic picks the tile: on an H200
    // (docs/fp8_gemm.md) 17-20 % faster than the staged one at moe_bench's expert shapes (64 experts x 768-896
    // tokens), on 128-row tiles there (~2-5 % ahead of 192 rows), and 8 % faster on 192-row tiles at 8 experts x
    // 2,048 tokens; an expert's mean token range decides between the two (1,536: between the measured 896 and 2,048).
    const bool store_warp = p.k_offsets != nullptr && !p.int8 && !p.never_promote && config.block_n == 128 &&
                            config.epilogue == Fp8GemmEpilogue::TmaStore;
    if (store_warp) config.epilogue = Fp8GemmEpilogue::TmaStoreWarp;
    if (config.block_m == 0 && config.multicast != Fp8GemmMulticast::ShareA &&
        config.multicast != Fp8GemmMulticast::ShareB)
      config.block_m = config.epilogue == Fp8GemmEpilogue::TmaStoreWarp2               ? kBlockM
                       : store_warp && p.k < 1536 * static_cast<int64_t>(p.num_groups) ? kBlockM
                                                                                       : heuristic.block_m;
  }
  FP8T_CHECK(is_one_of(config.block_n, kWgradBlockNs, kNumWgrad), "Wgrad FP8 GEMM: block_n {} is not built (one of {})",
             config.block_n, list_of(kWgradBlockNs, kNumWgrad));
  FP8T_CHECK(config.epilogue == Fp8GemmEpilogue::TmaStore || config.epilogue == Fp8GemmEpilogue::Direct ||
                 is_store_warp(config.epilogue),
             "Wgrad FP8 GEMM: unknown epilogue");
  if (is_store_warp(config.epilogue)) {
    FP8T_CHECK(p.k_offsets != nullptr && config.block_n == 128 && !p.int8 && !p.never_promote,
               "Wgrad FP8 GEMM: epilogue {} is built for K-grouped FP8 Wgrad with block_n 128 (asked for {}, {})",
               epilogue_name(config.epilogue), config.describe(), p.describe());
    FP8T_CHECK(config.epilogue != Fp8GemmEpilogue::TmaStoreWarp2 || config.block_m == 0 || config.block_m == kBlockM,
               "Wgrad FP8 GEMM: epilogue tma-ws2 (two staging buffers) is built for 128-row tiles (asked for {})",
               config.describe());
  }
  if (config.multicast == Fp8GemmMulticast::Auto)
    config.multicast = default_multicast();
  FP8T_CHECK(config.k_splits <= 1, "Wgrad FP8 GEMM: split-K is dense only (asked for {} ranges)", config.k_splits);
  if (config.block_m == 0) config.block_m = kBlockM;
  FP8T_CHECK(config.block_m == kBlockM ||
                 (config.block_m == 192 && config.block_n == 128 && config.multicast == Fp8GemmMulticast::None),
             "Wgrad FP8 GEMM: block_m {} is not built (128, or 192 with block_n 128 and no multicast)", config.block_m);

  PreparedLaunch L;
  KernelArgs& args = L.args;
  args.m = static_cast<int>(p.m);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.num_groups = p.num_groups;
  args.group_offsets = p.k_offsets;
  args.m_blocks = static_cast<int>((p.m + config.block_m - 1) / config.block_m);
  L.spec.warpgroups = config.block_m == 192 ? 3 : 2;
  args.n_blocks = static_cast<int>((p.n + config.block_n - 1) / config.block_n);
  fill_units(args, L.spec, config, p.num_groups);
  fill_scales(args, p.a_scales, p.b_scales);
  // Per-column B scales: bulk copies need both arrays MN-major and padded (the tile's rows / columns
  // contiguous per K block).
  args.bulk_scales = mn_major_padded(p.a_scales, p.m) && mn_major_padded(p.b_scales, p.n) ? 1 : 0;
  args.d = p.d;
  args.c = p.c;
  L.spec.int8 = p.int8;
  L.spec.never_promote = p.never_promote;
  L.spec.block_n = config.block_n;
  // The staged TMA epilogue (epilogue "tma", the default) needs C absent or in place, no multicast and a 16-byte
  // aligned D; otherwise, or with epilogue "direct", st.global from registers. Same arithmetic either way.
  // The store-warp variants (tma-ws, tma-ws2) stage the same way, under the same conditions.
  const bool staged = config.epilogue != Fp8GemmEpilogue::Direct && L.spec.multicast == Multicast::None &&
                      (p.c == nullptr || p.c == p.d) && reinterpret_cast<uintptr_t>(p.d) % 16 == 0;
  L.spec.out = !staged                                             ? Output::Fp32Direct
               : config.epilogue == Fp8GemmEpilogue::TmaStoreWarp  ? Output::Fp32TmaWs
               : config.epilogue == Fp8GemmEpilogue::TmaStoreWarp2 ? Output::Fp32TmaWs2
                                                                   : Output::Fp32Tma;
  L.k_grouped = p.k_offsets != nullptr;
  L.a = operand_map(p.a, p.m, p.k, L.spec.multicast == Multicast::ShareA ? kBlockM / 2 : config.block_m);
  L.b = operand_map(p.b, p.n, p.k, L.spec.multicast == Multicast::ShareB ? config.block_n / 2 : config.block_n);
  L.d = staged ? f32_output_map_3d(p.d, p.num_groups, p.m, p.n) : L.a;
  return L;
}

}  // namespace fp8gemm

void fp8_gemm_wgrad(const Fp8GemmWgradProblem& p, const Fp8GemmConfig& config, cudaStream_t stream) {
  if (p.m == 0 && p.n > 0 && p.k > 0 && p.num_groups >= 1) return;  // nothing to compute
  const PreparedLaunch L = prepare_wgrad(p, config);
  check_cuda(launch_wgrad_kernel(L.spec, L.k_grouped, L.a, L.b, L.d, L.args, stream), "Wgrad FP8 GEMM kernel launch");
}

}  // namespace fp8train::ops::cuda
