// RMSNorm entry points, over the last dimension of a [rows, dim] matrix view:
//   y = x · rstd · weight,   rstd = 1/sqrt(mean(x²) + eps)      (rstd: [rows] contiguous; optional)
// backward (g = dy∘weight):  dx (+)= rstd·g − x·rstd³·(Σ g∘x)/dim;   dweight += Σ_rows dy∘x·rstd
// x, y, dy, dx: one storage dtype (f32, bf16, f64); weight, dweight, rstd: its compute dtype (f32 beside bf16).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// RMSNorm over the last dimension: y = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps) (one per row).
struct RmsNormProblem {
  DType dtype = DType::F32;  // storage dtype of x, y, dy, dx
  int64_t rows = 0, dim = 0;
  int64_t ld_x = 0, ld_y = 0, ld_dx = 0, ld_dy = 0;
  double eps = 1e-6;
  bool accumulate_dx = false;  // backward: dx += ... instead of dx = ...
};

void rmsnorm_forward(const ExecCtx& ctx, const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                     const Tensor& rstd);
void rmsnorm_backward(const ExecCtx& ctx, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                      const Tensor& dx, const Tensor& dweight, bool accumulate_dx);

}  // namespace fp8train::ops
