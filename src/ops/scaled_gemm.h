// Scaled GEMMs of quantized operands (QTensors, quant/qtensor.h), on any device:
//   scaled_gemm            d [M, N] (+)= a [M, K] · b [N, K]ᵀ                     (Fprop, Dgrad, Wgrad)
//   scaled_gemm_grouped    MoE experts over M: expert e's rows of a times b's group e
//   scaled_gemm_grouped_k  MoE expert Wgrad over K: d [E, M, N] (+)= a[:, K_e] · b[:, K_e]ᵀ
// from the operands' row-wise payloads (a Dgrad passes W.transposed(); a Wgrad passes the column-wise copies
// of dy and x transposed). The numerics are quant::GemmConfig's (quant/ref_gemm.h): block-scaled (1×G · G×G,
// 1×G · 1×G), per-tensor, any pair ref_gemm accepts, INT8 included, in exact, hopper or fp32 accumulation.
// The CPU kernel is quant::ref_gemm bit for bit. The CUDA kernels are fp8train's own FP8 GEMMs (E4M3, hopper
// accumulation promoting every 128, bit-exact against the CPU) and cuBLASLt (per-tensor FP8, and the
// block-scaled forms when ops::cuda::set_fp8_gemm_backend / FP8TRAIN_FP8_GEMM pick it: results within a
// normalized error bound, not bit-exact); forms neither serves throw "not implemented on cuda: <what>".
//   d: F32 or BF16 matrix view (unit column stride, any row stride) on ctx's device; += when accumulate.
#pragma once
#include <cstdint>

#include "ops/op_table.h"
#include "quant/qtensor.h"
#include "quant/ref_gemm.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// Hopper accumulation promoting every 128 elements of K, no split: what fp8train's FP8 GEMMs compute, and the
// default of the op (quant::GemmConfig's own default is the exact mode, which only the CPU serves).
inline quant::GemmConfig hopper_numerics(int k_splits = 1) {
  quant::GemmConfig g;
  g.mode = quant::AccumMode::Hopper;
  g.promote_interval = 128;
  g.k_splits = k_splits;
  return g;
}

struct ScaledGemmOptions {
  quant::GemmConfig numerics = hopper_numerics();  // mode, promote_interval, k_splits (numerics.accumulate must
                                                   // stay false: use `accumulate` below)
  bool accumulate = false;  // d = d + a·bᵀ (one FP32 add per element, after the product is complete)
};

// One operand as the launchers see it: its row-wise payload's pointers and what they hold.
struct ScaledOperand {
  quant::Format format = quant::Format::E4M3;
  quant::Granularity granularity;
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
  int64_t rows = 0, cols = 0;  // all groups
  int64_t groups = 1;
  const void* codes = nullptr;
  const float* scales = nullptr;
};

// The problem of the three launchers. Dense: d [m, n] = a [m, k] · b [n, k]ᵀ. Grouped (over M): a's rows
// split by offsets[0..num_groups], b [num_groups · n, k] with groups = num_groups. Grouped over K: d
// [num_groups, m, n], a [m, k], b [n, k], K split by offsets.
struct ScaledGemmProblem {
  int64_t m = 0, n = 0, k = 0;
  int num_groups = 1;
  ScaledOperand a, b;
  DType out_dtype = DType::F32;
  int64_t ldd = 0;
  bool accumulate = false;
  quant::GemmConfig numerics;
};

void scaled_gemm(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b, const Tensor& d,
                 const ScaledGemmOptions& options = {});

// MoE experts over M: a [M_total, K] holds the rows of E experts, expert e at rows [offsets[e], offsets[e+1])
// (offsets: I32 [E+1] on ctx's device, non-decreasing multiples of 128 from 0, offsets[E] <= M_total — the grouped
// GEMM's row block; the CPU kernel checks them, the CUDA kernel trusts them); b [E·N, K] with groups = E;
// d [M_total, N]. Rows past offsets[E] (the MoE plan's spare capacity, whose rows of a are zero) come out zero
// when not accumulating.
void scaled_gemm_grouped(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b, const Tensor& offsets,
                         const Tensor& d, const ScaledGemmOptions& options = {});

// MoE expert Wgrad over K: d [E, M, N] F32 (contiguous) (+)= a[:, K_e] · b[:, K_e]ᵀ with K_e =
// [k_offsets[e], k_offsets[e+1]) (I32 [E+1] on ctx's device, non-decreasing multiples of the operands' K block
// from 0, k_offsets[E] <= K: columns past it are not read); a [M, K] and b [N, K] tiled 1×G along K, or both per
// tensor (each expert's K range is then a GEMM of its own with the tensors' scales: fp8-tensorwise's experts). An
// expert with an empty range gets d[e] unchanged when accumulating, zeros otherwise.
void scaled_gemm_grouped_k(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b,
                           const Tensor& k_offsets, const Tensor& d, const ScaledGemmOptions& options = {});

}  // namespace fp8train::ops
