// SwiGLU entry points. in: [rows, 2F] matrix view holding gate (= x·W1ᵀ, columns [0,F)) and up (= x·W3ᵀ,
// columns [F,2F)); out: [rows, F].  out = silu(gate)∘up, silu(g) = g·sigmoid(g).
// Backward writes din ([rows, 2F], gate and up halves) from dout.
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// SwiGLU on a fused [rows, 2F] input (gate = columns [0,F), up = [F,2F)): out = silu(gate) ∘ up.
struct SwigluProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, ffn_dim = 0;
  int64_t ld_in = 0, ld_out = 0;  // also the row strides of din and dout
};

void swiglu_forward(const ExecCtx& ctx, const Tensor& in, const Tensor& out);
void swiglu_backward(const ExecCtx& ctx, const Tensor& in, const Tensor& dout, const Tensor& din);

}  // namespace fp8train::ops
