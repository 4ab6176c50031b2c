// Elementwise entry points on matrix views (2-D, unit column stride) or contiguous tensors of any rank (leading
// dimensions folded into rows); f32/f64; all arguments the same shape, dtype and device.
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

void axpby(double alpha, const Tensor& a, double beta, const Tensor& b, const Tensor& out);  // out = α·a + β·b
void copy(const Tensor& src, const Tensor& dst);                   // dst = src
void add(const Tensor& a, const Tensor& b, const Tensor& out);     // out = a + b
void axpy(double alpha, const Tensor& x, const Tensor& y);         // y += α·x
void scale(const Tensor& x, double alpha);                         // x *= α
void fill(const Tensor& x, double value);                          // x = value

}  // namespace fp8train::ops
