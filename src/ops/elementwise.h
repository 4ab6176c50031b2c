// Elementwise entry points on matrix views (2-D, unit column stride) or contiguous tensors of any rank (leading
// dimensions folded into rows); all arguments the same shape and device. Dtypes: each argument f32 or bf16 (any
// mix: the arithmetic runs in f32 and the output is rounded once), or all f64 — so copy() between f32 and bf16 is
// the cast.
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// out[r,c] = alpha·a[r,c] + beta·b[r,c] over a rows×cols matrix (b may be null: out = alpha·a); out may alias a or b.
struct AxpbyProblem {
  DType dtype = DType::F32;  // of out
  DType a_dtype = DType::F32, b_dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t ld_a = 0, ld_b = 0, ld_out = 0;
  double alpha = 1.0, beta = 0.0;
};

void axpby(const ExecCtx& ctx, double alpha, const Tensor& a, double beta, const Tensor& b,
           const Tensor& out);                                                      // out = α·a + β·b
void copy(const ExecCtx& ctx, const Tensor& src, const Tensor& dst);                // dst = src (casts)
void add(const ExecCtx& ctx, const Tensor& a, const Tensor& b, const Tensor& out);  // out = a + b
void axpy(const ExecCtx& ctx, double alpha, const Tensor& x, const Tensor& y);      // y += α·x
void scale(const ExecCtx& ctx, const Tensor& x, double alpha);                      // x *= α
void fill(const ExecCtx& ctx, const Tensor& x, double value);                       // x = value

}  // namespace fp8train::ops
