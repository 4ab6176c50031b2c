// AdamW (decoupled weight decay, Loshchilov & Hutter) over a contiguous run of parameter-arena elements:
//   m ← β1·m + (1−β1)·g            v ← β2·v + (1−β2)·g²
//   p ← p·(1 − lr·wd) − lr/(1−β1^t) · m / (√v · 1/√(1−β2^t) + ε)
//   param, grad: F32 [n] (FP32 master weights and gradients); exp_avg (m), exp_avg_sq (v): F32 or BF16 [n].
// BF16 moments are decoded to FP32, updated in FP32 and re-encoded with round to nearest even, so only their
// storage is narrow. The coefficients are computed once per call in FP64 and rounded to FP32 (AdamWProblem); each
// element then runs the same FP32 expression on every backend, and elements are independent, so the result does
// not depend on how the range is split. One call per range of one weight-decay kind (wd = 0 for the other).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// What the caller knows: the step's learning rate, the optimizer's constants and its step count t (>= 1).
struct AdamWHyper {
  double lr = 0.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
};

// What a kernel needs: the element count, the moments' dtype and the FP32 coefficients.
struct AdamWProblem {
  int64_t n = 0;
  DType moment_dtype = DType::F32;  // F32 or BF16
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float step_size = 0;       // lr / (1 − β1^t)
  float inv_sqrt_bias2 = 0;  // 1 / sqrt(1 − β2^t)
  float eps = 0;
  float decay_factor = 1;  // 1 − lr·wd (exactly 1 without decay)

  static AdamWProblem make(int64_t n, DType moment_dtype, const AdamWHyper& h);
};

// One AdamW update of param from grad, in place on param, exp_avg and exp_avg_sq (contiguous, n elements each,
// any shape).
void adamw_update(const ExecCtx& ctx, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWHyper& hyper);

}  // namespace fp8train::ops
