// Fused cross-entropy entry point (see cross_entropy.h).
#include "ops/cross_entropy.h"

#include <vector>

#include "ops/checks.h"

namespace fp8train::ops {

CrossEntropyResult cross_entropy_fused(const ExecCtx& ctx, const Tensor& logits, const Tensor& targets,
                                       bool compute_grad, double grad_scale) {
  const char* op = "cross_entropy_fused";
  check::matrix(op, "logits", logits);
  check::storage_dtype(op, "logits", logits);
  check::vector(op, "targets", targets, logits.size(0));
  check::dtype(op, "targets", targets, DType::I32);
  check::on_device(op, ctx, {&logits, &targets});
  CrossEntropyProblem p;
  p.dtype = logits.dtype();
  p.rows = logits.size(0);
  p.vocab = logits.size(1);
  p.ld = logits.size(0) > 1 ? logits.ld() : p.vocab;
  p.grad_scale = grad_scale;
  p.compute_grad = compute_grad;
  const Tensor row_loss = Tensor::empty({p.rows}, DType::F64, MemCategory::Workspace, ctx.device);
  launcher(ctx, &OpTable::cross_entropy, "cross_entropy")(ctx, p, logits.raw(), targets.data<int32_t>(),
                                                          row_loss.data<double>());
  const std::vector<double> losses = row_loss.to_vector<double>();
  const std::vector<int32_t> t = targets.to_vector<int32_t>();
  CrossEntropyResult r;
  for (size_t i = 0; i < losses.size(); ++i) {
    // The CPU kernel checks the targets before it runs; a device's targets are only seen here, after the kernel
    // (which leaves such a row's loss NaN).
    FP8T_CHECK(t[i] >= -1 && t[i] < p.vocab, "{}: target {} at row {} is outside [-1, {})", op, t[i], i, p.vocab);
    if (t[i] < 0) continue;
    r.loss_sum += losses[i];
    ++r.count;
  }
  return r;
}

}  // namespace fp8train::ops
