// Reference block-scaled GEMM on the CPU: D[M, N] = A[M, K] · B[N, K]ᵀ (+ C) from two QTensors.
//
// Shapes and layouts: a is [M, K] and b is [N, K], both row-major ("K-major", the TN layout of cuBLASLt);
// c (optional) and d are [M, N] row-major float32 (d may be BF16: uint16 codes, see ref_gemm_bf16).
//
// Granularity pairs (G = the scale block along K; G must be a multiple of 32 in hopper mode):
//   A per-tensor × B per-tensor : scales applied once at the end: d = (sa * sb) * acc
//   A 1×G        × B G×G        : Fprop / Dgrad (DeepSeek-V3: G = 128)
//   A 1×G        × B 1×G        : Wgrad (both operands tiled along K)
// anything else throws fp8train::Error. Both operands must share K; formats must be pairable (below).
//
// The K axis is cut into scale groups of G elements (per-tensor: one group of all K); group g of row i of A
// and row j of B has the scale product s = sa[i][g] * sb[j][g] (one float32 multiply; per-tensor: s = 1
// during accumulation). Accumulation modes:
//   Exact  : each group's dot product of the unscaled code values is summed in FP64 (in K order) — exact
//            for E4M3×E4M3 and INT8×INT8 (every partial sum fits 53 bits), FP64-rounded otherwise — then
//            promoted: acc = fma(s, float(partial), acc) in float32 (float() rounds to nearest even).
//            Per-tensor operands use groups of kExactBlockK = 128 with s = 1.
//   Hopper : bit-faithful to num::hopper_dot / num::hopper_dot_scaled (FP8 operands, E4M3/E5M2 any pair):
//            blocks of 32 products in the FP22 truncating model, chained; with promote_interval P:
//              P divides G (32, 64, 128 for G = 128) or per-tensor with any P: every P elements the chain is
//                promoted, acc = fma(s, chain, acc), and restarts at zero (s = the scale of the group the
//                P elements lie in). This is exactly num::hopper_dot_scaled with per-promotion scales (and
//                num::hopper_dot for per-tensor operands, where fma(1, chain, acc) == acc + chain).
//              P > G (a multiple of G) or kNeverPromote with block scales — a model, since real kernels
//                must promote where the scale changes: each scale group's chain (restarting at zero) is
//                scaled, t = s * chain (float32), and added into a pending FP22 accumulator with the
//                tensor-core adder rule, pending = fp22_add(pending, t) (both terms aligned to the larger
//                exponent and truncated toward zero to 13 fraction bits, summed exactly, the sum truncated
//                to 13 fraction bits); every P elements (never: at the end) acc = acc + pending, pending = 0.
//              Per-tensor with kNeverPromote: one chain over all K (cuBLASLt fast accumulation).
//   Fp32   : acc = fma(a_value, b_value, acc) over k = 0..K-1 in order, on the dequantized values
//            (code * scale, one float32 multiply each) — what a plain FP32 GEMM of dequantized inputs does.
//   INT8×INT8 operands in Exact and Hopper modes: each group's dot product (per-tensor: groups of
//   kExactBlockK) is accumulated exactly as an integer (the integer tensor-core path; computed in FP64,
//   which is exact and equal to int32 accumulation), then acc = fma(s, float(partial), acc).
// Epilogue: per-tensor operands outside Fp32 mode d = (sa * sb) * acc (Fp32 mode already used dequantized
// values); then with accumulate-into-C d = c + d (one float32 add);
// then BF16 output rounds d to nearest even (num::bf16_encode).
// Supported format pairs: Exact and Fp32: any two of E4M3/E5M2/E5M6/BF16, or INT8×INT8; Hopper: E4M3/E5M2
// pairs or INT8×INT8. Multi-threaded with OpenMP over output tiles.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "numerics/hopper_accum.h"
#include "quant/quant.h"

namespace fp8train::quant {

enum class AccumMode : uint8_t { Exact, Hopper, Fp32 };
std::string_view accum_mode_name(AccumMode m);       // "exact", "hopper", "fp32"
AccumMode parse_accum_mode(std::string_view name);   // throws on an unknown name

inline constexpr int kExactBlockK = 128;

struct GemmConfig {
  AccumMode mode = AccumMode::Exact;
  int promote_interval = 128;  // hopper mode: a positive multiple of 32, or num::kNeverPromote (0)
  bool accumulate = false;     // d = c + A·Bᵀ (c required)
  bool force_scalar = false;   // skip the SIMD kernels (same bits, slower): lets tests reach both paths
  // Split-K (block-scaled operands, Exact or Hopper mode; K a multiple of G): the K groups 0..K/G-1 are cut
  // into k_splits contiguous ranges, range s = [floor(s * groups / k_splits), floor((s + 1) * groups /
  // k_splits)), each accumulated on its own from zero, and the range results added in order in FP32
  // (total = r_0, total = total + r_s) before the epilogue: the CUDA dense kernel's split-K
  // (ops/cuda/fp8_gemm.h; per element num::hopper_dot_scaled_split). 1 = no split.
  int k_splits = 1;
};

// One CPU operand as the reference GEMM reads it (a view; nothing is owned): codes_bytes(format, rows·cols) code
// bytes in QTensor's layout and row-major scales [scale_rows, scale_cols].
struct GemmOperand {
  Format format = Format::E4M3;
  Granularity granularity;
  int64_t rows = 0, cols = 0;
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  int64_t scale_rows() const { return granularity.scale_rows(rows); }
  int64_t scale_cols() const { return granularity.scale_cols(cols); }
};
// The view of a CPU QTensor's row-wise payload; throws unless it is one group with contiguous, row-major scales.
GemmOperand gemm_operand(const QTensor& q, const char* name = "operand");

// d [M, N] float32. c: [M, N] float32 when config.accumulate, else ignored (may be null).
void ref_gemm(const QTensor& a, const QTensor& b, const GemmConfig& config, float* d,
              const float* c = nullptr);
std::vector<float> ref_gemm(const QTensor& a, const QTensor& b, const GemmConfig& config,
                            const std::vector<float>* c = nullptr);
// The same with BF16 output: d_bf16 [M, N] = num::bf16_encode(d).
void ref_gemm_bf16(const QTensor& a, const QTensor& b, const GemmConfig& config, uint16_t* d_bf16,
                   const float* c = nullptr);
// The same two on operand views (what the CPU kernels of ops/scaled_gemm.h run).
void ref_gemm(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, float* d,
              const float* c = nullptr);
void ref_gemm_bf16(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, uint16_t* d_bf16,
                   const float* c = nullptr);

// The FP64 reference D[M, N] = Σ_k value_a(i, k) · value_b(j, k) of the dequantized operands (OpenBLAS
// DGEMM). Exact when every partial sum fits 53 bits, e.g. unit-scale E4M3 operands with K <= 2^17 (products
// are multiples of 2^-18 below 2^17.7, so sums stay below 2^35 in units of 2^-18); otherwise within FP64
// rounding.
void ref_gemm_fp64(const QTensor& a, const QTensor& b, double* d);
std::vector<double> ref_gemm_fp64(const QTensor& a, const QTensor& b);

// Columns [g0·G, min(g1·G, K)) of a block-scaled CPU operand (G = its block_cols): codes and the scale
// columns g0..g1-1, copied (split-K and the K-grouped Wgrad cut operands this way).
QTensor k_slice(const QTensor& q, int64_t g0, int64_t g1);
QTensor k_slice(const GemmOperand& q, int64_t g0, int64_t g1);

// The FP22 adder of the hopper model's "P > G" rule (exposed for tests and the CUDA port).
float fp22_add(float x, float y);

}  // namespace fp8train::quant
