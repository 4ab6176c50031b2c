// Internal: the kernel-launch functions of the attention core's .cu files, called by attention_ops.cpp after the
// entry point has validated the tensors. Plain structs only (the .cu files include no fmt). Layouts as in
// ops/attention.h: a head of row r starts at base + r·row_stride + h·head_stride (elements), unit last stride;
// row r = b·seq + t; lse [batch, heads, seq] contiguous F32.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::detail {

struct AttnLayout {
  int64_t row_stride = 0, head_stride = 0;
};

struct AttnArgs {
  bool bf16 = false;  // storage of q, k, v, o, dout, dq, dk, dv: __nv_bfloat16 (true) or float
  int batch = 0, seq = 0, heads = 0, qk_dim = 0, v_dim = 0;
  float scale = 1.0f;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;  // forward output; backward reads it
  float* lse = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* delta = nullptr;  // backward scratch [batch, heads, seq]: rowsum(dO∘O)
  AttnLayout lq, lk, lv, lo, ldout, ldq, ldk, ldv;
};

// Largest head dims the kernels serve (qk_dim and v_dim each).
constexpr int kAttnMaxDim = 256;

// SIMT kernels (attention_simt.cu): any storage (F32 or BF16), any qk_dim, v_dim in [1, kAttnMaxDim], any strides.
// FP32 FMA throughout (F32 inputs stay FP32-accurate: no TF32).
cudaError_t launch_attention_forward_simt(const AttnArgs& a, cudaStream_t stream);
cudaError_t launch_attention_backward_simt(const AttnArgs& a, cudaStream_t stream);  // a.delta: scratch
// a.delta = rowsum(dO∘O) (the first step of both backward paths).
cudaError_t launch_attention_delta(const AttnArgs& a, cudaStream_t stream);

// Tensor-core kernels (attention_mma.cu), BF16 only: attention_mma_supported(a) says whether the form is served
// (qk_dim, v_dim multiples of 8 up to kAttnMaxDim; 16-byte aligned bases and strides).
bool attention_mma_supported(const AttnArgs& a, bool backward);
cudaError_t launch_attention_forward_mma(const AttnArgs& a, cudaStream_t stream);
cudaError_t launch_attention_backward_mma(const AttnArgs& a, cudaStream_t stream);  // a.delta: scratch

}  // namespace fp8train::ops::cuda::detail
