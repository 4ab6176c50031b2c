// Causal softmax attention (the attention core; high precision in every recipe), flash-style memory use:
//   q, k: [batch·seq, heads, qk_dim];  v: [batch·seq, heads, v_dim];  o: [batch·seq, heads, v_dim]
//   lse: [batch, heads, seq] contiguous — the per-row log-sum-exp kept for the backward
// Any row and head strides with a unit last stride are accepted (v may be a view into a fused k|v buffer).
//   o_t = Σ_{s ≤ t} softmax_s(scale·q_t·k_s)·v_s.   No [seq, seq] tensor is kept: the backward recomputes the
// probabilities block by block from q, k and lse, so what lives between forward and backward is q, k, v, o, lse.
// Backward overwrites dq, dk, dv (same shapes as q, k, v; their own strides).
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& lse,
                       int64_t batch, double scale);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& lse,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t batch,
                        double scale);

}  // namespace fp8train::ops
