// Causal softmax attention (the attention core; high precision in every recipe), flash-style memory use:
//   q, k: [batch·seq, heads, qk_dim];  v: [batch·seq, heads, v_dim];  o: [batch·seq, heads, v_dim]
//   lse: [batch, heads, seq] contiguous — the per-row log-sum-exp kept for the backward
// q, k, v, o and the gradients in one storage dtype (f32, bf16, f64); lse in its compute dtype (f32 beside bf16).
// Any row and head strides with a unit last stride are accepted (v may be a view into a fused k|v buffer).
//   o_t = Σ_{s ≤ t} softmax_s(scale·q_t·k_s)·v_s.   No [seq, seq] tensor is kept: the backward recomputes the
// probabilities block by block from q, k and lse, so what lives between forward and backward is q, k, v, o, lse.
// Backward overwrites dq, dk, dv (same shapes as q, k, v; their own strides).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// Where head h of row r starts: base + r·row_stride + h·head_stride (elements within a head are contiguous).
struct HeadsLayout {
  int64_t row_stride = 0, head_stride = 0;
};

// Causal softmax attention per (sequence, head): o = softmax(scale·q·kᵀ + causal mask)·v, and the row
// log-sum-exp lse[b,h,t] (contiguous [batch, heads, seq]) that the backward uses to recompute the
// probabilities block by block (flash-style: no seq×seq tensor is kept between forward and backward).
struct AttentionProblem {
  DType dtype = DType::F32;
  int64_t batch = 0, seq = 0, heads = 0, qk_dim = 0, v_dim = 0;
  double scale = 1.0;
  HeadsLayout q, k, v, o;        // forward tensors
  HeadsLayout dout, dq, dk, dv;  // backward tensors (dq, dk, dv are overwritten)
};

void attention_forward(const ExecCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                       const Tensor& lse, int64_t batch, double scale);
void attention_backward(const ExecCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        int64_t batch, double scale);

}  // namespace fp8train::ops
