// Rotary position embedding (RoPE, no YaRN scaling), in place on x: [rows, heads, rope_dim] with unit last stride
// (any row and head strides, so the rope part of a wider per-head vector is passed as a narrow() view).
// Rows are [batch, seq] flattened: position = row % seq_len (+ pos_offset). Interleaved pairs (x[2i], x[2i+1]) rotate
// by pos·θ_i, θ_i = theta^(−2i/rope_dim) (DeepSeek-V3's complex-pair form). `inverse` rotates back: the backward.
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// Rotary position embedding on interleaved pairs (x[2i], x[2i+1]) of the last `rope_dim` elements of each head:
// angle = pos·θ_i with θ_i = theta^(−2i/rope_dim), pos = row % seq_len (rows are [batch, seq] flattened).
// In place; `inverse` rotates by −angle, which is the backward (the rotation is orthogonal).
struct RopeProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, heads = 0, rope_dim = 0;
  int64_t ld = 0, head_stride = 0;
  int64_t seq_len = 0;
  double theta = 10000.0;
  bool inverse = false;
  int64_t pos_offset = 0;  // position = pos_offset + row % seq_len (incremental decoding: the first new token's)
};

// pos_offset: positions start there instead of 0 (tokens appended after a cache of pos_offset tokens).
void rope_(const ExecCtx& ctx, const Tensor& x, int64_t seq_len, double theta, bool inverse, int64_t pos_offset = 0);

}  // namespace fp8train::ops
