// Plain launch functions of the per-head broadcast and reduction (ops/heads.h; kernels in heads_kernels.cu,
// launchers in elementwise_ops.cpp). No fmt here: nvcc compiles this header. A [rows, dim] matrix (row stride
// ld_mat) and a [rows, heads, dim] view (row stride ld_heads, head stride head_stride), unit last strides, both
// F32 or BF16 (uint16_t codes). Every launch runs on `stream` and returns the launch's cudaError_t.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/elementwise_launch.h"

namespace fp8train::ops::cuda::ew {

struct HeadsArgs {
  Ty type = Ty::F32;
  int64_t rows = 0, heads = 0, dim = 0;
  int64_t ld_mat = 0;
  int64_t ld_heads = 0, head_stride = 0;
};

// dst[t, h, :] = src[t, :] (src the matrix, dst the per-head view): element bits copied unchanged.
cudaError_t repeat_heads(const HeadsArgs& args, const void* src, void* dst, cudaStream_t stream);
// dst[t, :] = Σ_h src[t, h, :] (src the per-head view, heads >= 1, dst the matrix): FP32 sum in increasing h from
// head 0's value, one thread per output element group, rounded once to nearest even (the CPU's bits).
cudaError_t sum_heads(const HeadsArgs& args, const void* src, void* dst, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::ew
