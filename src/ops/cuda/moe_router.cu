// CUDA kernels of the DeepSeekMoE sigmoid router and the sequence balance loss (formulas in ops/router.h; the CPU
// kernels in ops/cpu/router.cpp are the reference these mirror).
//   router forward   one warp per token; the token's scores and selection keys (s + b) in shared memory; the
//                    selection is top_k rounds of a warp arg-max under the CPU's order (larger key first, ties to
//                    the lower index), so `selected` lists the experts exactly as the CPU does; group-limited
//                    routing ranks the groups the same way first. Scores, keys, group keys and gates use the
//                    CPU's float operations one by one (explicit _rn intrinsics: no FMA contraction); only the
//                    exponential differs (FP64 exp rounded to float against the host's expf).
//   router backward  one warp per token, the CPU's float expression element by element.
//   balance loss     per-sequence selection counts (integer atomics: order-free), then one warp per token for
//                    S_t = Σ_e s and Σ_e f_e·s in FP64 (fixed shuffle tree: deterministic, in another order than
//                    the CPU's serial sums), then one CTA sums the tokens' terms in a fixed order.
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>

#include "ops/cuda/moe_launch.h"

namespace fp8train::ops::cuda::moe {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kRouterWarps = 4;

// The CPU's selection order: larger key first, ties to the lower index.
__device__ __forceinline__ bool better(float ka, int ia, float kb, int ib) { return ka > kb || (ka == kb && ia < ib); }

// Leaves every lane holding the warp's best (key, index).
__device__ __forceinline__ void warp_argmax(float& key, int& idx) {
  for (int o = 16; o > 0; o >>= 1) {
    const float k2 = __shfl_xor_sync(kFull, key, o);
    const int i2 = __shfl_xor_sync(kFull, idx, o);
    if (better(k2, i2, key, idx)) {
      key = k2;
      idx = i2;
    }
  }
}

// Shared memory per warp: scores [E], keys [E], group keys / kept-group flags [n_group].
__global__ void router_forward_kernel(RouterArgs a) {
  extern __shared__ float smem[];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int E = a.n_experts, G = a.n_group, K = a.top_k;
  float* s_sh = smem + static_cast<int64_t>(warp) * (2 * E + G);
  float* key_sh = s_sh + E;
  float* gk_sh = key_sh + E;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouterWarps + warp;
  if (t >= a.tokens) return;  // the whole warp leaves together
  const float* lt = a.logits + t * E;
  float* st = a.scores + t * E;
  for (int e = lane; e < E; e += 32) {
    const float ex = static_cast<float>(exp(-static_cast<double>(lt[e])));
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, ex));  // s = 1 / (1 + exp(-logit)), as the CPU in float
    st[e] = s;
    s_sh[e] = s;
    key_sh[e] = __fadd_rn(s, a.bias[e]);  // the bias steers selection only
  }
  __syncwarp();
  const int gs = E / G;
  uint32_t excluded = 0;  // bit j: expert lane + 32·j is not a candidate (or already taken)
  if (G > 1) {
    for (int g = lane; g < G; g += 32) {  // group key: the sum of the group's two largest keys
      float best = -INFINITY, second = -INFINITY;
      for (int e = g * gs; e < (g + 1) * gs; ++e) {
        const float k = key_sh[e];
        if (k > best) {
          second = best;
          best = k;
        } else if (k > second) {
          second = k;
        }
      }
      gk_sh[g] = gs >= 2 ? __fadd_rn(best, second) : best;
    }
    __syncwarp();
    uint32_t kept = 0;  // bit j: group lane + 32·j kept
    for (int r = 0; r < a.topk_group; ++r) {
      float bk = -INFINITY;
      int bi = INT_MAX;
      for (int g = lane, j = 0; g < G; g += 32, ++j)
        if (!((kept >> j) & 1u) && better(gk_sh[g], g, bk, bi)) {
          bk = gk_sh[g];
          bi = g;
        }
      warp_argmax(bk, bi);
      if ((bi & 31) == lane) kept |= 1u << (bi >> 5);
    }
    __syncwarp();  // every lane has read the group keys before they become flags
    for (int g = lane, j = 0; g < G; g += 32, ++j) gk_sh[g] = ((kept >> j) & 1u) ? 1.0f : 0.0f;
    __syncwarp();
    for (int e = lane, j = 0; e < E; e += 32, ++j)
      if (gk_sh[e / gs] == 0.0f) excluded |= 1u << j;
  }
  int mine = -1;  // lane k: the k-th selected expert
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) {
    float bk = -INFINITY;
    int bi = INT_MAX;
    for (int e = lane, j = 0; e < E; e += 32, ++j)
      if (!((excluded >> j) & 1u) && better(key_sh[e], e, bk, bi)) {
        bk = key_sh[e];
        bi = e;
      }
    warp_argmax(bk, bi);
    if (bi >= E) bi = 0;  // unreachable: the entry point checked top_k against the candidates
    if ((bi & 31) == lane) excluded |= 1u << (bi >> 5);
    if (lane == k) mine = bi;
    sum = __fadd_rn(sum, s_sh[bi]);  // Σ_selected s in selection order, as the CPU
  }
  const float factor = __fdiv_rn(a.scale, sum);
  if (lane < K) {
    a.selected[t * K + lane] = mine;
    a.gates[t * K + lane] = __fmul_rn(s_sh[mine], factor);
    if (a.counts != nullptr) atomicAdd(a.counts + mine, 1);  // integer: the same counts in any order
  }
}

// ∂L/∂s_j = r/S·(dg_j − Σ_k dg_k·s_k/S) for selected j (+ dscores_extra), then ·s(1 − s).
__global__ void router_backward_kernel(RouterBackwardArgs a) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouterWarps + warp;
  if (t >= a.tokens) return;
  const int E = a.n_experts, K = a.top_k;
  const float* st = a.scores + t * E;
  float sum = 0.0f, weighted = 0.0f;
  for (int k = 0; k < K; ++k) {  // every lane the same serial sums (the CPU's order)
    const float s = st[a.selected[t * K + k]];
    sum = __fadd_rn(sum, s);
    weighted = __fadd_rn(weighted, __fmul_rn(a.dgates[t * K + k], s));
  }
  int my_e = -1;
  float my_coef = 0.0f;
  if (lane < K) {
    my_e = a.selected[t * K + lane];
    my_coef = __fmul_rn(__fdiv_rn(a.scale, sum), __fsub_rn(a.dgates[t * K + lane], __fdiv_rn(weighted, sum)));
  }
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e = e0 + lane;
    float d = 0.0f;
    if (e < E && a.dscores_extra != nullptr) d = a.dscores_extra[t * E + e];
    for (int k = 0; k < K; ++k) {
      const int ek = __shfl_sync(kFull, my_e, k);
      const float ck = __shfl_sync(kFull, my_coef, k);
      if (ek == e) d = __fadd_rn(d, ck);
    }
    if (e < E) {
      const float s = st[e];
      a.dlogits[t * E + e] = __fmul_rn(d, __fmul_rn(s, __fsub_rn(1.0f, s)));
    }
  }
}

__global__ void balance_counts_kernel(BalanceArgs a) {
  const int64_t pairs = a.batch * a.seq * a.top_k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int e = a.selected[i];
    const int64_t b = i / a.top_k / a.seq;
    if (e >= 0 && e < a.n_experts) atomicAdd(a.counts + b * a.n_experts + e, 1);
  }
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// One warp per token: S_t = Σ_e s, fs = Σ_e f_e·s (FP64); forward writes fs/S_t, backward adds the gradient.
template <bool kBackward>
__global__ void balance_token_kernel(BalanceArgs a, double c, double* per_token, float* dscores) {
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  if (t >= a.batch * a.seq) return;
  const int E = a.n_experts;
  const int32_t* cnt = a.counts + (t / a.seq) * E;
  const double norm = static_cast<double>(E) / static_cast<double>(a.top_k * a.seq);
  const float* st = a.scores + t * E;
  double total = 0, fs = 0;
  for (int e = lane; e < E; e += 32) {
    const double s = st[e];
    total += s;
    fs += static_cast<double>(cnt[e]) * norm * s;
  }
  total = warp_sum(total);
  fs = warp_sum(fs);
  if constexpr (kBackward) {
    for (int e = lane; e < E; e += 32) {
      const double f = static_cast<double>(cnt[e]) * norm;
      dscores[t * E + e] = __fadd_rn(dscores[t * E + e], static_cast<float>(c * (f / total - fs / (total * total))));
    }
  } else {
    if (lane == 0) per_token[t] = fs / total;
  }
}

constexpr int kSumThreads = 256;

// loss = alpha/(batch·seq)·Σ_t per_token[t], one CTA, a fixed order.
__global__ void balance_sum_kernel(const double* per_token, int64_t n, double scale, double* loss) {
  __shared__ double part[kSumThreads];
  double v = 0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) v += per_token[i];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int s = kSumThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = part[0] * scale;
}

unsigned blocks_for(int64_t n, int64_t per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

}  // namespace

cudaError_t launch_router_forward(const RouterArgs& a, cudaStream_t stream) {
  if (a.n_experts > kMaxExperts || a.n_group > kMaxExperts || a.top_k > kMaxTopK || a.n_group < 1)
    return cudaErrorInvalidValue;
  if (a.counts != nullptr) {
    const cudaError_t err = cudaMemsetAsync(a.counts, 0, sizeof(int32_t) * a.n_experts, stream);
    if (err != cudaSuccess) return err;
  }
  if (a.tokens == 0) return cudaSuccess;
  const size_t smem = sizeof(float) * kRouterWarps * (2 * static_cast<size_t>(a.n_experts) + a.n_group);
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(router_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  router_forward_kernel<<<blocks_for(a.tokens, kRouterWarps), kRouterWarps * 32, smem, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_router_backward(const RouterBackwardArgs& a, cudaStream_t stream) {
  if (a.top_k > kMaxTopK) return cudaErrorInvalidValue;
  if (a.tokens == 0) return cudaSuccess;
  router_backward_kernel<<<blocks_for(a.tokens, kRouterWarps), kRouterWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

namespace {
cudaError_t balance_counts(const BalanceArgs& a, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(a.counts, 0, sizeof(int32_t) * a.batch * a.n_experts, stream);
  if (err != cudaSuccess) return err;
  const int64_t pairs = a.batch * a.seq * a.top_k;
  if (pairs == 0) return cudaSuccess;
  const unsigned blocks = blocks_for(pairs, 256);
  const unsigned grid = blocks < 8192 ? blocks : 8192;
  balance_counts_kernel<<<grid, 256, 0, stream>>>(a);
  return cudaGetLastError();
}
constexpr int kTokenWarps = 8;
}  // namespace

cudaError_t launch_balance_forward(const BalanceArgs& a, double alpha, double* per_token, double* loss,
                                   cudaStream_t stream) {
  cudaError_t err = balance_counts(a, stream);
  if (err != cudaSuccess) return err;
  const int64_t tokens = a.batch * a.seq;
  if (tokens > 0) {
    balance_token_kernel<false>
        <<<blocks_for(tokens, kTokenWarps), kTokenWarps * 32, 0, stream>>>(a, 0.0, per_token, nullptr);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const double scale = tokens > 0 ? alpha / static_cast<double>(tokens) : 0.0;
  balance_sum_kernel<<<1, kSumThreads, 0, stream>>>(per_token, tokens, scale, loss);
  return cudaGetLastError();
}

cudaError_t launch_balance_backward(const BalanceArgs& a, double c, float* dscores, cudaStream_t stream) {
  cudaError_t err = balance_counts(a, stream);
  if (err != cudaSuccess) return err;
  const int64_t tokens = a.batch * a.seq;
  if (tokens == 0) return cudaSuccess;
  balance_token_kernel<true><<<blocks_for(tokens, kTokenWarps), kTokenWarps * 32, 0, stream>>>(a, c, nullptr, dscores);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::moe
