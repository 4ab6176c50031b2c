// Broadcast into and reduction over attention heads: a [rows, dim] matrix view and the same rows seen per head,
// a [rows, heads, dim] view with unit last stride and any row and head strides (the part of each head's wider
// vector that Tensor::as_strided picks out). MLA shares one rotated key k^R across every head: repeat_heads
// writes it into each head of k, sum_heads gives its gradient Σ_h dk^R_h, each in one launch instead of one per
// head.
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// mat: the [rows, dim] matrix (row stride ld_mat); per-head: [rows, heads, dim] (row stride ld_heads, head
// stride head_stride); both of `dtype`, unit last stride.
struct HeadsProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, heads = 0, dim = 0;
  int64_t ld_mat = 0;
  int64_t ld_heads = 0, head_stride = 0;
};

// dst[t, h, :] = src[t, :] for every head h: an exact copy. src [rows, dim] matrix view, dst [rows, heads, dim]
// (unit last stride, heads that do not overlap), same dtype (f32, bf16, f64); src must not overlap dst.
void repeat_heads(const ExecCtx& ctx, const Tensor& src, const Tensor& dst);

// dst[t, :] = Σ_h src[t, h, :]: summed in the compute dtype (FP32 beside BF16, FP64 for f64) in increasing h
// from head 0's value, rounded once to dst's dtype (a fixed order: deterministic, the same bits on every
// backend). src [rows, heads, dim] (unit last stride, heads >= 1), dst [rows, dim] matrix view, same dtype.
void sum_heads(const ExecCtx& ctx, const Tensor& src, const Tensor& dst);

}  // namespace fp8train::ops
