// Attention of new tokens against a key/value cache that every head shares (multi-query form), forward only —
// the core of incremental decoding with MLA's latent cache, where after absorbing W^UK into the queries and W^UV
// into the output every head attends to the same cached rows [c^KV; k^R] (keys) and c^KV (values):
//   q: [m, heads, qk_dim]   the m new tokens' queries, at positions keys−m .. keys−1 of one sequence
//   k: [keys, qk_dim]       cached keys (matrix view, any row stride), the new tokens' rows last
//   v: [keys, v_dim]        cached values (matrix view; may be a column block of the key buffer)
//   o: [m, heads, v_dim]    o[j,h] = Σ_{s ≤ keys−m+j} softmax_s(scale·q[j,h]·k[s])·v[s]
// q and o: any row and head strides with a unit last stride. One storage dtype (f32, bf16, f64); the arithmetic
// runs in its compute dtype (FP32 beside BF16) and o is rounded once. No log-sum-exp is kept (no backward).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

struct AttentionCachedProblem {
  DType dtype = DType::F32;
  int64_t queries = 0, heads = 0, keys = 0, qk_dim = 0, v_dim = 0;
  double scale = 1.0;
  int64_t q_row = 0, q_head = 0;  // strides of q
  int64_t ld_k = 0, ld_v = 0;     // row strides of k and v
  int64_t o_row = 0, o_head = 0;  // strides of o
};

void attention_cached(const ExecCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                      double scale);

}  // namespace fp8train::ops
