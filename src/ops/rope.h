// Rotary position embedding (RoPE, no YaRN scaling), in place on x: [rows, heads, rope_dim] with unit last stride
// (any row and head strides, so the rope part of a wider per-head vector is passed as a narrow() view).
// Rows are [batch, seq] flattened: position = row % seq_len. Interleaved pairs (x[2i], x[2i+1]) rotate by
// pos·θ_i, θ_i = theta^(−2i/rope_dim) (DeepSeek-V3's complex-pair form). `inverse` rotates back: the backward.
#pragma once
#include "tensor/tensor.h"

namespace fp8train::ops {

void rope_(const Tensor& x, int64_t seq_len, double theta, bool inverse);

}  // namespace fp8train::ops
