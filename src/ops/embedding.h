// Embedding entry points.  ids: i32 [tokens];  table: [vocab, dim] contiguous;  out/dout: [tokens, dim] matrix view.
//   forward:  out[t] = table[ids[t]]          backward: dtable[ids[t]] += dout[t]  (accumulates)
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

}  // namespace fp8train::ops
