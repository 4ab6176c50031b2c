// SwiGLU's per-element arithmetic on the device, shared by the SwiGLU kernels (elementwise_norm.cu) and the
// quantizer that fuses SwiGLU into its load (quantize_fast.cu), so the fused and unfused paths round identically:
// σ(g) = 1/(1 + e^−g) with the device's expf; every product and sum rounded on its own (no FMA contraction), in
// the CPU's order.
#pragma once
#include <cuda_runtime.h>

namespace fp8train::ops::cuda {

__device__ __forceinline__ float swiglu_sigmoid(float g) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g))); }

// out = silu(g)·u = (g·σ(g))·u
__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fmul_rn(g, swiglu_sigmoid(g)), u);
}

// d_up = dout·silu(g);  d_gate = dout·up·σ(g)·(1 + g·(1 − σ(g))).
__device__ __forceinline__ void swiglu_grad(float gc, float uc, float dc, float& dg, float& du) {
  const float sig = swiglu_sigmoid(gc);
  const float silu = __fmul_rn(gc, sig);
  dg = __fmul_rn(__fmul_rn(__fmul_rn(dc, uc), sig), __fadd_rn(1.0f, __fmul_rn(gc, __fsub_rn(1.0f, sig))));
  du = __fmul_rn(dc, silu);
}

}  // namespace fp8train::ops::cuda
