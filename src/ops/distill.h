// Cross-entropy plus knowledge distillation toward a teacher's top-k distribution, fused with the head's softmax
// like ops/cross_entropy.h (the logits buffer becomes the logits gradient in place).
//   logits:        F32, F64 or BF16 [rows, vocab] matrix view (BF16 computed in FP32)
//   targets:       i32 [rows], −1 = ignored row (no cross-entropy, no KL, zero gradient)
//   teacher_ids:   i32 [rows, k], each in [0, vocab), distinct within a row
//   teacher_probs: F32 [rows, k], p ≥ 0: the teacher's distribution over its k most likely tokens, renormalised
//   per row, with lse = logsumexp(z) and q = softmax(z) the student's distribution:
//     ce_r = lse − z[target]
//     kl_r = Σ_j p_j·(log p_j − log q[id_j])   (KL(p ‖ q) with p zero off its k tokens; terms with p_j = 0 vanish)
//   compute_grad: z ← grad_scale·((1 + w·P)·q − onehot(target) − w·Σ_j p_j·onehot(id_j)), P = Σ_j p_j — the
//   gradient of grad_scale·(ce_r + w·kl_r), rounded once to the logits' dtype.
// CPU only so far (the CUDA table has no entry: distillation on a GPU says the backend lacks the op).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

struct DistillProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, vocab = 0, ld = 0, k = 0;
  double weight = 0.0;  // w: the KL term's weight
  double grad_scale = 1.0;
  bool compute_grad = false;
};

struct DistillResult {
  double ce_sum = 0.0;  // Σ ce_r over counted rows, in row order
  double kl_sum = 0.0;  // Σ kl_r over counted rows, in row order
  int64_t count = 0;    // rows whose target is not −1
};

DistillResult cross_entropy_distill(const ExecCtx& ctx, const Tensor& logits, const Tensor& targets,
                                    const Tensor& teacher_ids, const Tensor& teacher_probs, double weight,
                                    bool compute_grad, double grad_scale);

}  // namespace fp8train::ops
