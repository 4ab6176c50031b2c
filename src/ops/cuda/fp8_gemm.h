// fp8train's own Hopper FP8 block-scaled GEMMs (WGMMA + TMA, FP32 promotion every 128 elements of K):
// launchers on raw device pointers and dimensions (tier 2 of the op design). The kernels live in
// fp8_gemm_kernel.cuh; one .cu file per family documents its problem:
//   fp8_gemm_dense.cu   Fprop / Dgrad   d[M, N] bf16 = A[M, K] (1x128 scales) . B[N, K]^T (128x128 scales)
//   fp8_gemm_grouped.cu MoE experts     d[Mtot, N] bf16, rows of E experts concatenated, B[E, N, K]
//   fp8_gemm_wgrad.cu   Wgrad           d[M, N] fp32 = c + A[M, K] (1x128) . B[N, K]^T (1x128), and the
//                                       K-grouped form d[e] = c[e] + A[:, Ke] . B[:, Ke]^T for MoE experts
// Arithmetic (all families): per output element, per 128-wide K block g in order,
//   partial = 4 chained tensor-core steps of 32 products (FP22, truncating, the first from zero),
//   acc = fmaf(scale_a[g] * scale_b[g], partial, acc)    (FP32, the scale product rounded first),
// which is num::hopper_dot_scaled(..., promote_interval = 128) bit for bit; then d = bf16_rn(acc), or
// d = c + acc (one FP32 add) for Wgrad. The one exception is the dense family's split-K for M <= 256 (below):
// a fixed, documented sum of per-range chains, mirrored by the CPU model. (Tile shape -- 128 or 192 rows, any
// block_n -- never changes the arithmetic: each output element's chain is the same.)
//
// INT8 (each problem's `int8`): the same kernels with INT8 operands (two's complement bytes) through the
// integer tensor-core instruction: each 128-wide K block's products are summed exactly as 32-bit integers
// (partial = that sum, exact in FP32 as well: |partial| < 2^21), then promoted as above -- the CPU model's INT8
// arithmetic (quant/ref_gemm.h) bit for bit. Built for block_n 128, 128-row tiles, no multicast, no split-K.
//
// Never promoting (each problem's `never_promote`, FP8 only; the recipe option promote=never, an ablation): the
// CPU model of ref_gemm.h for kNeverPromote with block scales -- per 128-wide K block t = scale_a[g] * scale_b[g]
// * partial (FP32: the scale product, then the product with the partial, each rounded), pending = fp22_add(
// pending, t) (the truncating FP22 adder, ops/cuda/fp22_add.cuh), and at the end acc = pending; the epilogues
// as above. Built as INT8 is: block_n 128, 128-row tiles, no multicast, no split-K.
//
// Layouts: A, B row-major with K contiguous ("TN"), FP8 E4M3 bytes, 16-byte aligned; K a multiple of 16 (a
// partial last 128-block is zero-filled by TMA, and zero products leave the CPU model's chain unchanged);
// N a multiple of 16; M any positive size. Scales are FP32, addressed through ScaleView so both the
// QTensor row-major layout and cuBLASLt's "MN-major" layout work.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace fp8train::ops::cuda {

// Scale (i, kb) lives at data[group * group_stride + i * row_stride + kb * kblock_stride], where i is the row
// (1x128 tiles) or the 128-row block (128x128 blocks) and kb the 128-wide K block.
struct ScaleView {
  const float* data = nullptr;
  int64_t row_stride = 0;
  int64_t kblock_stride = 0;
  int64_t group_stride = 0;
};
// QTensor's row-major layout: [rows (or row blocks), K/128] row-major.
inline ScaleView row_major_scale_view(const float* data, int64_t k_blocks, int64_t group_stride = 0) {
  return {data, k_blocks, 1, group_stride};
}

enum class Fp8GemmEpilogue : uint8_t {
  TmaStore,  // through swizzled shared memory and TMA stores (default); Wgrad: C TMA-loaded there too (FP32)
  Direct,    // straight from registers with st.global (kept as a tested fallback)
  // K-grouped Wgrad only, block_n 128, C absent or in place (else Direct): the staged FP32 epilogue with its C loads
  // and D stores issued by a dedicated store warp, so no math warp waits for a store to drain; one staging buffer
  // per math warpgroup (128- or 192-row tiles) ...
  TmaStoreWarp,
  // ... or two (128-row tiles; the next tile's C load starts while the current tile computes).
  TmaStoreWarp2,
};

// TMA multicast in clusters of two CTAs computing neighbouring tiles (halves one operand's L2 traffic).
enum class Fp8GemmMulticast : uint8_t {
  Auto,    // the heuristic decides
  None,    // no clusters
  ShareA,  // tiles (m, 2j) and (m, 2j+1) share their A rows
  ShareB,  // tiles (2i, n) and (2i+1, n) share their B rows (dense and Wgrad only: grouped pairs could
           // straddle two experts)
};

// Tuning knobs, separate from the problem. block_n = 0 asks the heuristic.
struct Fp8GemmConfig {
  int block_n = 0;           // output tile width (tile = block_m x block_n); see the family's *_block_ns()
  int block_m = 0;           // tile rows: 0 = heuristic (128), 128 (two math warpgroups) or 192 (three; dense,
                             // block_n 128, no multicast, no split-K)
  Fp8GemmMulticast multicast = Fp8GemmMulticast::Auto;
  int grid = 0;              // cap on persistent CTAs; 0 = as many as are resident (one per SM)
  int raster_group_m = 16;   // row blocks per raster band (L2 reuse)
  Fp8GemmEpilogue epilogue = Fp8GemmEpilogue::TmaStore;  // Direct: no multicast
  // Dense only: cut K into this many contiguous ranges computed by different CTAs (0 = the heuristic's choice
  // when block_n is 0 too, else 1; 1 = never). A defined change of the arithmetic: "Split-K" above
  // fp8_gemm_dense_block_ns.
  int k_splits = 0;
  std::string describe() const;  // "block 128x176, multicast B, grid SMs, raster 16, epilogue tma, k splits 1"
};
// A config from text, for benchmarks and tuning: comma-separated key=value pairs, keys as describe() prints
// them -- block=MxN (or block=N: block_n alone), multicast=auto|none|A|B, grid=G, raster=R,
// epilogue=tma|direct|tma-ws|tma-ws2,
// splits=S -- e.g. "block=128x192,multicast=B" or "block=32,splits=2". Keys left out keep the defaults above
// (block_n 0: the heuristic). Throws fp8train::Error naming the bad pair. Whether a family builds the result is
// checked when it runs.
Fp8GemmConfig parse_fp8_gemm_config(const std::string& text);

// ---- dense Fprop / Dgrad ------------------------------------------------------------------------------
struct Fp8GemmDenseProblem {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // [m, k] E4M3
  ScaleView a_scales;          // 1x128: (row, kb)
  const uint8_t* b = nullptr;  // [n, k] E4M3
  ScaleView b_scales;          // 128x128: (n / 128, kb)
  bool int8 = false;           // A and B hold INT8 codes instead of E4M3 (see the top of this file)
  bool never_promote = false;  // FP8: the pending FP22 sum instead of promotion (see the top of this file)
  uint16_t* d = nullptr;       // [m, n] BF16 bits, row-major
  // Optional BF16 addend [m, n] (may equal d): d = bf16_rn(float(c) + acc), one FP32 add -- a Dgrad adding into an
  // input gradient. Runs the direct epilogue without split-K or multicast (the CPU model's accumulate-into-C).
  const uint16_t* c = nullptr;
  std::string describe() const;
};
// Split-K (dense, one or two row blocks: M <= 256). With few output tiles a GEMM cannot fill the SMs, and each
// CTA re-reads the whole of A's K extent; so the K blocks 0..K/128-1 are cut into S contiguous ranges,
// range s = [floor(s * kb / S), floor((s + 1) * kb / S)), each computed by its own CTA with the arithmetic
// below (a promotion chain starting from zero), and the S FP32 results are added in range order,
// total = acc_0, total = total + acc_s (s = 1..S-1, FP32 round to nearest), then d = bf16_rn(total).
// The CPU model is quant::GemmConfig::k_splits (num::hopper_dot_scaled_split); S = 1 is the plain chain.
// The result is deterministic for a given S (no atomics on data: the last CTA to finish reads the others'
// ranges from a workspace in order). S comes from Fp8GemmConfig::k_splits or the heuristic (which depends on
// the shape and the SM count). The workspace (S * M * N floats + counters) is allocated once per device and
// stream and kept; concurrent GEMMs on different streams get different workspaces. Its first allocation (and any
// growth) calls cudaMalloc and synchronizes the stream, so the first split-K GEMM of a shape class must not be
// inside a CUDA graph capture.
//
// The block_n values the dense family is built for, and the heuristic's choice (block_m, block_n, multicast and
// k_splits) for a shape on `num_sms` SMs: the fewest "waves" of tiles weighted by tile cost (fitted to H200 sweeps;
// 192-row tiles where they need no more waves than 128-row ones); for M <= 256 split-K when the narrowest of 32/64
// leaves more than half the SMs idle (fp8_gemm_host.cpp choose_split).
const int* fp8_gemm_dense_block_ns(int* count);
const int* fp8_gemm_dense_split_block_ns(int* count);  // the widths built with the split-K epilogue
Fp8GemmConfig fp8_gemm_dense_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
// Validates (FP8T_CHECK: sizes, alignment, supported block_n) and launches on `stream`.
void fp8_gemm_dense(const Fp8GemmDenseProblem& p, const Fp8GemmConfig& config, cudaStream_t stream);

// ---- MoE M-grouped contiguous ------------------------------------------------------------------------
// Rows of all experts concatenated: expert e owns rows [row_offsets[e], row_offsets[e+1]); every offset is a
// multiple of 128 (pad each expert's segment), row_offsets[0] = 0, row_offsets[E] = m_total; an expert
// with no tokens has row_offsets[e] == row_offsets[e+1]. row_offsets lives in DEVICE memory (it is produced
// on the GPU by routing); the kernel trusts it, so a CPU caller checks it first (check_group_offsets).
struct Fp8GemmGroupedProblem {
  int64_t m_total = 0, n = 0, k = 0;
  int num_groups = 0;
  const int32_t* row_offsets = nullptr;  // device, [num_groups + 1]
  const uint8_t* a = nullptr;            // [m_total, k] E4M3
  ScaleView a_scales;                    // 1x128: (row, kb)
  const uint8_t* b = nullptr;            // [num_groups, n, k] E4M3
  bool int8 = false;                     // A and B hold INT8 codes instead of E4M3 (see the top of this file)
  bool never_promote = false;            // FP8: the pending FP22 sum instead of promotion (see the top)
  ScaleView b_scales;                    // 128x128: (group, n / 128, kb)
  uint16_t* d = nullptr;                 // [m_total, n] BF16
  std::string describe() const;
};
const int* fp8_gemm_grouped_block_ns(int* count);
Fp8GemmConfig fp8_gemm_grouped_heuristic(int64_t m_total, int64_t n, int64_t k, int num_sms);
void fp8_gemm_grouped(const Fp8GemmGroupedProblem& p, const Fp8GemmConfig& config, cudaStream_t stream);

// ---- Wgrad (dense and K-grouped) ------------------------------------------------------------------------
// d[g] (fp32 [m, n]) = c[g] + A[:, K_g] . B[:, K_g]^T with 1x128 scales on both operands (A = dY^T tiled
// along tokens, B = X^T tiled along tokens). Dense: num_groups = 1 and k_offsets = nullptr (K_0 = [0, k)).
// K-grouped (MoE experts): k_offsets in DEVICE memory, [num_groups + 1], multiples of 128, k_offsets[0] = 0,
// k_offsets[E] = k; an expert with no tokens gets d[e] = c[e] (or zeros without c).
// c may be null (d = A.B^T) or equal to d (accumulate in place).
struct Fp8GemmWgradProblem {
  int64_t m = 0, n = 0, k = 0;
  int num_groups = 1;
  const int32_t* k_offsets = nullptr;
  const uint8_t* a = nullptr;  // [m, k] E4M3
  ScaleView a_scales;          // 1x128: (row, kb)
  const uint8_t* b = nullptr;  // [n, k] E4M3
  ScaleView b_scales;          // 1x128: (row of B, kb)
  bool int8 = false;           // A and B hold INT8 codes instead of E4M3 (see the top of this file)
  bool never_promote = false;  // FP8: the pending FP22 sum instead of promotion (see the top of this file)
  const float* c = nullptr;    // [num_groups, m, n] or null
  float* d = nullptr;          // [num_groups, m, n]
  std::string describe() const;
};
const int* fp8_gemm_wgrad_block_ns(int* count);
Fp8GemmConfig fp8_gemm_wgrad_heuristic(int64_t m, int64_t n, int64_t k, int num_groups, int num_sms);
void fp8_gemm_wgrad(const Fp8GemmWgradProblem& p, const Fp8GemmConfig& config, cudaStream_t stream);

// ---- backend choice: our kernels by default on sm_90, cuBLASLt by flag --------------------------------
// The entry points the recipes call for block-scaled FP8 GEMMs. Backend resolution: set_fp8_gemm_backend()
// if called with Own or CublasLt, else the environment variable FP8TRAIN_FP8_GEMM ("own" or "cublaslt"),
// else Own on an sm_90 device (the kernels are built for sm_90a only) and CublasLt elsewhere. cuBLASLt has no
// grouped FP8 GEMM, so the grouped entry point and K-grouped Wgrad always use our kernels.
enum class Fp8GemmBackend : uint8_t { Auto, Own, CublasLt };
void set_fp8_gemm_backend(Fp8GemmBackend backend);  // Auto: back to environment / device default
Fp8GemmBackend fp8_gemm_backend();                  // the resolved choice (never Auto)
const char* fp8_gemm_backend_name(Fp8GemmBackend backend);  // "auto", "own", "cublaslt"
// Fprop / Dgrad (BF16 out) and Wgrad (FP32, c == d or c == nullptr for cuBLASLt) through the chosen backend,
// with the heuristic's configuration. For cuBLASLt the scales must be in a layout it reads: A 1x128 (and B
// 1x128) row-major or MN-major, B 128x128 row-major (re-pitched when K/128 % 4 != 0) or [N/128, round4(K/128)].
void fp8_scaled_gemm(const Fp8GemmDenseProblem& p, cudaStream_t stream);
void fp8_scaled_gemm_wgrad(const Fp8GemmWgradProblem& p, cudaStream_t stream);

// Host-side check of a group-offset table (values as they will be copied to the device): non-decreasing,
// multiples of 128, first 0, last == total. Throws fp8train::Error naming the first bad entry.
void check_group_offsets(const int32_t* host_offsets, int num_groups, int64_t total, const char* what);

// Number of SMs of the current device (cached per device).
int fp8_gemm_num_sms();

}  // namespace fp8train::ops::cuda
