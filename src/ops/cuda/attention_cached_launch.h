// Plain launch function of the cached multi-query attention (ops/attention_cached.h; launcher in
// attention_ops.cpp). No fmt here: nvcc compiles this header. q, o: [queries, heads, dim] with row and head strides;
// k, v: [keys, dim] with row strides; all F32 or all BF16 (uint16_t codes). scores: F32 scratch of
// queries·heads·keys. Returns the launch's cudaError_t.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::detail {

struct AttnCachedArgs {
  bool bf16 = false;
  int64_t queries = 0, heads = 0, keys = 0, qk_dim = 0, v_dim = 0;
  float scale = 1.0f;
  int64_t q_row = 0, q_head = 0, ld_k = 0, ld_v = 0, o_row = 0, o_head = 0;
};

cudaError_t launch_attention_cached(const AttnCachedArgs& a, const void* q, const void* k, const void* v, void* o,
                                    float* scores, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::detail
