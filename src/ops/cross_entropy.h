// Cross-entropy fused with the output head's softmax (high precision in every recipe).
//   logits: F32, F64 or BF16 [rows, vocab] matrix view (BF16 computed in FP32)
//   targets: i32 [rows], −1 = ignore the row
//   per row: loss_r = logsumexp(logits_r) − logits_r[target_r]
//   compute_grad: logits ← grad_scale·(softmax(logits) − onehot(target)), in place — the buffer becomes dlogits,
//   so the head's logits never need a second [rows, vocab] buffer (callers chunk rows to bound it further).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// Cross-entropy fused with the softmax of the head: per row, loss = logsumexp(logits) − logits[target];
// with compute_grad the logits are overwritten by grad_scale·(softmax − onehot(target)). target −1 = ignored
// row (zero loss, zero gradient).
struct CrossEntropyProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, vocab = 0, ld = 0;
  double grad_scale = 1.0;
  bool compute_grad = false;
};

struct CrossEntropyResult {
  double loss_sum = 0.0;  // Σ over counted rows, summed in row order
  int64_t count = 0;      // rows whose target is not −1
};

CrossEntropyResult cross_entropy_fused(const ExecCtx& ctx, const Tensor& logits, const Tensor& targets,
                                       bool compute_grad, double grad_scale);

}  // namespace fp8train::ops
