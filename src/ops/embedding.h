// Embedding entry points.  ids: i32 [tokens];  table: [vocab, dim] contiguous;  out/dout: [tokens, dim] matrix view.
// out/dout in a storage dtype (f32, bf16, f64); the table and its gradient in its compute dtype (f32 beside bf16).
//   forward:  out[t] = table[ids[t]]          backward: dtable[ids[t]] += dout[t]  (accumulates)
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// out[t,:] = table[ids[t],:]; backward: dtable[ids[t],:] += dout[t,:].
struct EmbeddingProblem {
  DType dtype = DType::F32;  // storage dtype of out / dout
  int64_t tokens = 0, vocab = 0, dim = 0;
  int64_t ld_out = 0;  // row stride of out / dout
};

void embedding_forward(const ExecCtx& ctx, const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const ExecCtx& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable);

}  // namespace fp8train::ops
