// SwiGLU entry points. in: [rows, 2F] matrix view holding gate (= x·W1ᵀ, columns [0,F)) and up (= x·W3ᵀ,
// columns [F,2F)); out: [rows, F].  out = silu(gate)∘up, silu(g) = g·sigmoid(g).
// Backward writes din ([rows, 2F], gate and up halves) from dout.
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

void swiglu_forward(const Tensor& in, const Tensor& out);
void swiglu_backward(const Tensor& in, const Tensor& dout, const Tensor& din);

}  // namespace fp8train::ops
