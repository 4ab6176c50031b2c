// Cross-entropy fused with the output head's softmax (high precision in every recipe).
//   logits: [rows, vocab] matrix view;  targets: i32 [rows], −1 = ignore the row
//   per row: loss_r = logsumexp(logits_r) − logits_r[target_r]
//   compute_grad: logits ← grad_scale·(softmax(logits) − onehot(target)), in place — the buffer becomes dlogits,
//   so the head's logits never need a second [rows, vocab] buffer (callers chunk rows to bound it further).
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

struct CrossEntropyResult {
  double loss_sum = 0.0;  // Σ over counted rows, summed in row order
  int64_t count = 0;      // rows whose target is not −1
};

CrossEntropyResult cross_entropy_fused(const Tensor& logits, const Tensor& targets, bool compute_grad,
                                       double grad_scale);

}  // namespace fp8train::ops
