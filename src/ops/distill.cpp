// Cross-entropy + top-k distillation entry point (see distill.h).
#include "ops/distill.h"

#include <vector>

#include "ops/checks.h"

namespace fp8train::ops {

DistillResult cross_entropy_distill(const ExecCtx& ctx, const Tensor& logits, const Tensor& targets,
                                    const Tensor& teacher_ids, const Tensor& teacher_probs, double weight,
                                    bool compute_grad, double grad_scale) {
  const char* op = "cross_entropy_distill";
  check::matrix(op, "logits", logits);
  check::storage_dtype(op, "logits", logits);
  check::vector(op, "targets", targets, logits.size(0));
  check::dtype(op, "targets", targets, DType::I32);
  check::dtype(op, "teacher_ids", teacher_ids, DType::I32);
  check::dtype(op, "teacher_probs", teacher_probs, DType::F32);
  FP8T_CHECK(teacher_ids.dim() == 2 && teacher_ids.size(0) == logits.size(0) && teacher_ids.is_contiguous() &&
                 teacher_probs.shape() == teacher_ids.shape() && teacher_probs.is_contiguous(),
             "{}: teacher_ids and teacher_probs must be contiguous [{}, k], got {} and {}", op, logits.size(0),
             teacher_ids.str(), teacher_probs.str());
  check::on_device(op, ctx, {&logits, &targets, &teacher_ids, &teacher_probs});
  FP8T_CHECK(weight >= 0.0, "{}: the KL weight must be non-negative, got {}", op, weight);
  DistillProblem p;
  p.dtype = logits.dtype();
  p.rows = logits.size(0);
  p.vocab = logits.size(1);
  p.ld = logits.size(0) > 1 ? logits.ld() : p.vocab;
  p.k = teacher_ids.size(1);
  p.weight = weight;
  p.grad_scale = grad_scale;
  p.compute_grad = compute_grad;
  const Tensor row_ce = Tensor::empty({p.rows}, DType::F64, MemCategory::Workspace, ctx.device);
  const Tensor row_kl = Tensor::empty({p.rows}, DType::F64, MemCategory::Workspace, ctx.device);
  launcher(ctx, &OpTable::cross_entropy_distill, "cross_entropy_distill")(
      ctx, p, logits.raw(), targets.data<int32_t>(), teacher_ids.data<int32_t>(), teacher_probs.data<float>(),
      row_ce.data<double>(), row_kl.data<double>());
  const std::vector<double> ce = row_ce.to_vector<double>(), kl = row_kl.to_vector<double>();
  const std::vector<int32_t> t = targets.to_vector<int32_t>();
  DistillResult r;
  for (size_t i = 0; i < ce.size(); ++i) {
    if (t[i] < 0) continue;
    r.ce_sum += ce[i];
    r.kl_sum += kl[i];
    ++r.count;
  }
  return r;
}

}  // namespace fp8train::ops
