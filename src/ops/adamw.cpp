// AdamW entry point (see adamw.h).
#include "ops/adamw.h"

#include <cmath>

#include "ops/checks.h"

namespace fp8train::ops {

AdamWProblem AdamWProblem::make(int64_t n, DType moment_dtype, const AdamWHyper& h) {
  FP8T_CHECK(h.step >= 1, "adamw: the step count must be >= 1, got {}", h.step);
  const double t = static_cast<double>(h.step);
  const double bias1 = 1.0 - std::pow(h.beta1, t);
  const double bias2 = 1.0 - std::pow(h.beta2, t);
  AdamWProblem p;
  p.n = n;
  p.moment_dtype = moment_dtype;
  p.beta1 = static_cast<float>(h.beta1);
  p.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  p.beta2 = static_cast<float>(h.beta2);
  p.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  p.step_size = static_cast<float>(h.lr / bias1);
  p.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  p.eps = static_cast<float>(h.eps);
  p.decay_factor = h.weight_decay != 0.0 ? static_cast<float>(1.0 - h.lr * h.weight_decay) : 1.0f;
  return p;
}

void adamw_update(const ExecCtx& ctx, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWHyper& hyper) {
  const char* op = "adamw_update";
  check::vector(op, "param", param);
  const int64_t n = param.numel();
  check::dtype(op, "param", param, DType::F32);
  check::vector(op, "grad", grad, n);
  check::dtype(op, "grad", grad, DType::F32);
  check::vector(op, "exp_avg", exp_avg, n);
  check::vector(op, "exp_avg_sq", exp_avg_sq, n);
  FP8T_CHECK(exp_avg.dtype() == DType::F32 || exp_avg.dtype() == DType::BF16, "{}: moments must be f32 or bf16, got {}",
             op, dtype_name(exp_avg.dtype()));
  check::same_dtype(op, {&exp_avg, &exp_avg_sq});
  check::on_device(op, ctx, {&param, &grad, &exp_avg, &exp_avg_sq});
  FP8T_CHECK(hyper.beta1 >= 0.0 && hyper.beta1 < 1.0, "{}: beta1 must be in [0, 1), got {}", op, hyper.beta1);
  FP8T_CHECK(hyper.beta2 >= 0.0 && hyper.beta2 < 1.0, "{}: beta2 must be in [0, 1), got {}", op, hyper.beta2);
  FP8T_CHECK(hyper.eps > 0.0 && std::isfinite(hyper.eps), "{}: eps must be positive and finite, got {}", op, hyper.eps);
  FP8T_CHECK(std::isfinite(hyper.lr) && hyper.lr >= 0.0,
             "{}: the learning rate must be finite and non-negative, got {}", op, hyper.lr);
  FP8T_CHECK(hyper.weight_decay >= 0.0 && std::isfinite(hyper.weight_decay),
             "{}: weight decay must be non-negative and finite, got {}", op, hyper.weight_decay);
  const AdamWProblem p = AdamWProblem::make(n, exp_avg.dtype(), hyper);
  if (n == 0) return;
  launcher(ctx, &OpTable::adamw, op)(ctx, p, param.data<float>(), grad.data<float>(), exp_avg.raw(), exp_avg_sq.raw());
}

}  // namespace fp8train::ops
