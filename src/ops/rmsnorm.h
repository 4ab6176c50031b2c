// RMSNorm entry points, over the last dimension of a [rows, dim] matrix view:
//   y = x · rstd · weight,   rstd = 1/sqrt(mean(x²) + eps)      (rstd: [rows] contiguous, same dtype; optional)
// backward (g = dy∘weight):  dx (+)= rstd·g − x·rstd³·(Σ g∘x)/dim;   dweight += Σ_rows dy∘x·rstd
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                      const Tensor& dweight, bool accumulate_dx);

}  // namespace fp8train::ops
