// CUDA cached multi-query attention (attention_cached_launch.h): one CTA per (new token, head). The query is staged
// in shared memory; pass 1 writes the scaled scores against the visible keys to global scratch (a thread per key),
// a block reduction gives their maximum, pass 2 exponentiates and a block reduction sums, pass 3 gives each output
// column to one thread, which sums p_t·v[t] over the keys in increasing t (FP32 throughout, o rounded once).
// Decoding launches few CTAs (heads × new tokens); it is a correct, simple kernel, not a tuned one.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention_cached_launch.h"
#include "ops/cuda/elementwise_device.cuh"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kCachedThreads = 128;

// Block-wide max (is_max) or sum of v over kCachedThreads threads; every thread gets the result.
template <bool is_max>
__device__ float block_reduce(float v, float* red) {
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red may still be read by an earlier reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kCachedThreads / 32; ++w) r = is_max ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

template <class S>
__global__ void __launch_bounds__(kCachedThreads)
    attention_cached_kernel(AttnCachedArgs a, const S* __restrict__ q, const S* __restrict__ k, const S* __restrict__ v,
                            S* __restrict__ o, float* __restrict__ scores) {
  extern __shared__ float q_s[];  // qk_dim
  __shared__ float red[kCachedThreads / 32];
  const int64_t pair = blockIdx.x, j = pair / a.heads, h = pair % a.heads;
  const int64_t visible = a.keys - a.queries + j + 1;
  const S* qh = q + j * a.q_row + h * a.q_head;
  for (int64_t c = threadIdx.x; c < a.qk_dim; c += kCachedThreads) q_s[c] = ew::ld1(qh + c);
  __syncthreads();
  float* s = scores + pair * a.keys;
  float mx = -INFINITY;
  for (int64_t t = threadIdx.x; t < visible; t += kCachedThreads) {
    const S* kt = k + t * a.ld_k;
    float dot = 0.0f;
    for (int64_t c = 0; c < a.qk_dim; ++c) dot = fmaf(q_s[c], ew::ld1(kt + c), dot);
    s[t] = dot * a.scale;
    mx = fmaxf(mx, s[t]);
  }
  mx = block_reduce<true>(mx, red);
  float sum = 0.0f;
  for (int64_t t = threadIdx.x; t < visible; t += kCachedThreads) {
    const float e = expf(s[t] - mx);
    s[t] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum, red);  // its __syncthreads also orders pass 2's stores before pass 3's loads
  const float inv = 1.0f / sum;
  S* oh = o + j * a.o_row + h * a.o_head;
  for (int64_t c = threadIdx.x; c < a.v_dim; c += kCachedThreads) {
    float acc = 0.0f;
    for (int64_t t = 0; t < visible; ++t) acc = fmaf(s[t], ew::ld1(v + t * a.ld_v + c), acc);
    ew::st1(oh + c, acc * inv);
  }
}

}  // namespace

cudaError_t launch_attention_cached(const AttnCachedArgs& a, const void* q, const void* k, const void* v, void* o,
                                    float* scores, cudaStream_t stream) {
  if (a.queries <= 0 || a.heads <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(a.queries * a.heads);
  const size_t smem = static_cast<size_t>(a.qk_dim) * sizeof(float);
  if (a.bf16)
    attention_cached_kernel<uint16_t>
        <<<blocks, kCachedThreads, smem, stream>>>(a, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k),
                                                   static_cast<const uint16_t*>(v), static_cast<uint16_t*>(o), scores);
  else
    attention_cached_kernel<float>
        <<<blocks, kCachedThreads, smem, stream>>>(a, static_cast<const float*>(q), static_cast<const float*>(k),
                                                   static_cast<const float*>(v), static_cast<float*>(o), scores);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
