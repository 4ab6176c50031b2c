// Tier 3 of the CUDA quantizers and GEMMs: validating entry points on Tensors (tensor/tensor.h). Each checks
// device (a registered CUDA backend), dtype, rank, contiguity and shape, allocates its outputs on the input's
// device (booked under the given MemCategory), and launches on the backend's compute stream; the launchers
// underneath (quantize_cuda.h, cublaslt_gemm.h) add the kernel-specific rules.
//
//   x:      [rows, cols] F32 or BF16 (uint16 codes), contiguous, on a CUDA device
//   codes:  [rows, cols] U8 (E4M3 / E5M2 / INT8); E5M6: U8 [12 * rows * cols / 8] packed (quant.h)
//   scales: F32, one per block in the QTensor's scale layout (quant/qtensor.h: ScaleLayout::RowMajor is the CPU
//           reference's [srows, scols]; ScaleLayout::GemmNative is cuBLASLt's layout, cublaslt_gemm.h)
#pragma once
#include <cstdint>

#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/quantize_cuda.h"
#include "quant/qtensor.h"
#include "tensor/tensor.h"

namespace fp8train::ops::cuda {

// 1x128 tiles of x (a quant::QTensor with a row-wise payload); with_colwise also writes the column-wise payload,
// xᵀ [cols, rows] with the 128x1 tiles of x (Wgrad), in one read.
quant::QTensor quantize_activation(const Tensor& x, const QuantOptions& opt, bool with_colwise,
                                   quant::ScaleLayout layout = quant::ScaleLayout::GemmNative,
                                   MemCategory category = MemCategory::Workspace);

// 128x128 blocks of w; with_colwise also writes wᵀ (same codes, transposed scales) for Dgrad.
quant::QTensor quantize_weight(const Tensor& w, const QuantOptions& opt, bool with_colwise,
                               quant::ScaleLayout layout = quant::ScaleLayout::GemmNative,
                               MemCategory category = MemCategory::Workspace);

// E5M6 with 1x128 tiles (power-of-two scales by default): the cached input of the Linear after attention.
quant::QTensor quantize_e5m6(const Tensor& x, bool pow2_scales = true, MemCategory category = MemCategory::Workspace);

// [rows, cols] F32 or BF16 = decoded codes times their block scales.
Tensor dequantize(const quant::QTensor& q, DType out_dtype, MemCategory category = MemCategory::Workspace);

// out[M, N] (F32 or BF16, contiguous, on the operands' device) = a · bᵀ (+ out when accumulate), a: [M, K],
// b: [N, K], FP8 with tensor / 1x128 / 128x128 scales (cublaslt_gemm.h lists what cuBLASLt serves).
void scaled_gemm(const quant::QTensor& a, const quant::QTensor& b, Tensor& out, bool accumulate = false,
                 bool fast_accum = false);
// out[M, N] = a[M, K] · b[N, K]ᵀ with BF16 operands (DType::BF16) and F32 or BF16 output.
void gemm_bf16(const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace fp8train::ops::cuda
