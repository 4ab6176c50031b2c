// Internal: the kernel-launch functions of the quantization .cu files, called by quantize.cpp after it has
// validated the arguments. The .cu files include no fmt (nvcc cannot compile fmt's consteval format checks),
// so they report launch errors by return value and quantize.cpp turns them into fp8train::Error.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/quantize_cuda.h"

namespace fp8train::ops::cuda::detail {

// Parameters of the 128x128-tile kernels (quantize_fast.cu); see Quant1x128Args / Quant128x128Args.
struct FastParams {
  const void* x = nullptr;
  int64_t rows = 0, cols = 0;
  bool pow2 = false, stochastic = false;
  uint64_t seed = 0;
  uint8_t* q = nullptr;
  float* q_scales = nullptr;
  ScaleStrides qs;
  uint8_t* qt = nullptr;
  float* qt_scales = nullptr;
  ScaleStrides qts;
  int64_t groups = 1, qs_group = 0, qts_group = 0;  // row groups (rows / groups % 128 == 0 when groups > 1)
  const float* x_scales = nullptr;                  // 1x128 only: x is codes with these row scales
  ScaleStrides xs;
  int64_t xs_group = 0;
  // SwiGLU fused into the load (1x128, groups == 1): x is the E4M3 codes of gate|up [rows, x_cols = 2F] with
  // x_scales; the quantized values are swiglu_forward's output [rows, F] (swiglu == 1), or swiglu_backward's
  // d(gate|up) [rows, 2F] from dout (BF16 [rows, F], row stride ld_dout) (swiglu == 2), every intermediate
  // rounded to BF16 as dequantize and the SwiGLU kernels round it. F % 128 == 0.
  int swiglu = 0;
  int64_t x_cols = 0;
  const void* dout = nullptr;
  int64_t ld_dout = 0;
};
cudaError_t launch_quant_1x128(const FastParams& p, InType it, quant::Format f, Encoder e, cudaStream_t stream);
// SwiGLU's forward with its row-wise quantizations (quantize_fast.cu; QuantSwigluGateUpArgs, checked).
cudaError_t launch_swiglu_gate_up(const QuantSwigluGateUpArgs& a, cudaStream_t stream);
cudaError_t launch_quant_128x128(const FastParams& p, InType it, quant::Format f, Encoder e, cudaStream_t stream);

// quantize_misc.cu: the generic block quantizer, E5M6, dequantization, per-tensor and delayed scaling.
cudaError_t launch_quant_blocks(const QuantBlocksArgs& a, cudaStream_t stream);  // block_rows, block_cols >= 1
cudaError_t launch_scale_from_amax(const uint32_t* amax_bits, float fmax, bool pow2, float* scale_inverse,
                                   cudaStream_t stream);
cudaError_t launch_quant_e5m6(const QuantE5M6Args& a, cudaStream_t stream);
cudaError_t launch_dequant_e5m6(const uint8_t* packed, const float* scales, ScaleStrides strides, int64_t rows,
                                int64_t cols, void* out, InType out_type, cudaStream_t stream);
cudaError_t launch_dequant(const DequantArgs& a, cudaStream_t stream);  // block dims already resolved (>= 1)
cudaError_t launch_amax(const void* x, InType x_type, int64_t n, uint32_t* amax_bits, cudaStream_t stream);
cudaError_t launch_quant_with_scale(const QuantWithScaleArgs& a, cudaStream_t stream);
cudaError_t launch_delayed_compute(const DeviceAmaxHistoryView& h, float fmax, bool pow2, float* scale_inverse,
                                   cudaStream_t stream);
cudaError_t launch_transpose_codes(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols, int64_t batches,
                                   int64_t src_batch, int64_t dst_batch, cudaStream_t stream);
cudaError_t launch_transpose_scales(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides,
                                    int64_t rows, int64_t cols, int64_t groups, cudaStream_t stream);
cudaError_t launch_expand_scale_rows(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides,
                                     int64_t rows, int64_t cols, int64_t groups, int64_t block_rows,
                                     cudaStream_t stream);
cudaError_t launch_delayed_push(const DeviceAmaxHistoryView& h, const uint32_t* amax_bits, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::detail
