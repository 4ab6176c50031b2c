// CUDA AdamW (formulas in ops/adamw.h): param, grad F32 [n]; moments F32 or BF16 [n]; one independent FP32 update per
// element, written with round-to-nearest intrinsics so that no multiply-add is fused: the same roundings, in the same
// order, as the CPU kernel (cpu/adamw.cpp, built with -ffp-contract=off), hence the same bits. BF16 moments decode and
// encode through num::bf16_decode / bf16_encode, the CPU's own conversions.
// Four elements per thread and step (16-byte param/grad vectors, 16-byte F32 or 8-byte BF16 moment vectors) over a
// grid-stride loop; the n % 4 tail by the first CTA. Pointers not aligned for the vectors: a scalar grid-stride loop.
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/formats.h"
#include "ops/cuda/train_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;

//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  p ← p·decay − step_size·(m / (√v·inv_sqrt_bias2 + ε))
__device__ __forceinline__ void update(const AdamWArgs& k, float& p, float g, float& m, float& v) {
  m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(k.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(k.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), k.inv_sqrt_bias2), k.eps);
  p = __fsub_rn(__fmul_rn(p, k.decay_factor), __fmul_rn(k.step_size, __fdiv_rn(m, denom)));
}

template <bool kBf16>
__device__ __forceinline__ void update_at(const AdamWArgs& a, int64_t i) {
  float m, v;
  if constexpr (kBf16) {
    m = num::bf16_decode(static_cast<const uint16_t*>(a.exp_avg)[i]);
    v = num::bf16_decode(static_cast<const uint16_t*>(a.exp_avg_sq)[i]);
  } else {
    m = static_cast<const float*>(a.exp_avg)[i];
    v = static_cast<const float*>(a.exp_avg_sq)[i];
  }
  float p = a.param[i];
  update(a, p, a.grad[i], m, v);
  a.param[i] = p;
  if constexpr (kBf16) {
    static_cast<uint16_t*>(a.exp_avg)[i] = num::bf16_encode(m);
    static_cast<uint16_t*>(a.exp_avg_sq)[i] = num::bf16_encode(v);
  } else {
    static_cast<float*>(a.exp_avg)[i] = m;
    static_cast<float*>(a.exp_avg_sq)[i] = v;
  }
}

__device__ __forceinline__ void load4(const void* base, int64_t i, bool bf16, float (&f)[4]) {
  if (bf16) {
    const uint2 u = static_cast<const uint2*>(base)[i];
    f[0] = __uint_as_float(u.x << 16);
    f[1] = __uint_as_float(u.x & 0xFFFF0000u);
    f[2] = __uint_as_float(u.y << 16);
    f[3] = __uint_as_float(u.y & 0xFFFF0000u);
  } else {
    const float4 u = static_cast<const float4*>(base)[i];
    f[0] = u.x;
    f[1] = u.y;
    f[2] = u.z;
    f[3] = u.w;
  }
}

__device__ __forceinline__ void store4(void* base, int64_t i, bool bf16, const float (&f)[4]) {
  if (bf16) {
    const uint32_t lo =
        static_cast<uint32_t>(num::bf16_encode(f[0])) | (static_cast<uint32_t>(num::bf16_encode(f[1])) << 16);
    const uint32_t hi =
        static_cast<uint32_t>(num::bf16_encode(f[2])) | (static_cast<uint32_t>(num::bf16_encode(f[3])) << 16);
    static_cast<uint2*>(base)[i] = make_uint2(lo, hi);
  } else {
    static_cast<float4*>(base)[i] = make_float4(f[0], f[1], f[2], f[3]);
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads) adamw_vec_kernel(AdamWArgs a) {
  const int64_t n4 = a.n / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 pv = reinterpret_cast<const float4*>(a.param)[i];
    const float4 gv = reinterpret_cast<const float4*>(a.grad)[i];
    float m[4], v[4];
    load4(a.exp_avg, i, kBf16, m);
    load4(a.exp_avg_sq, i, kBf16, v);
    float p[4] = {pv.x, pv.y, pv.z, pv.w};
    const float g[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) update(a, p[j], g[j], m[j], v[j]);
    reinterpret_cast<float4*>(a.param)[i] = make_float4(p[0], p[1], p[2], p[3]);
    store4(a.exp_avg, i, kBf16, m);
    store4(a.exp_avg_sq, i, kBf16, v);
  }
  if (blockIdx.x == 0 && threadIdx.x < a.n - 4 * n4) update_at<kBf16>(a, 4 * n4 + threadIdx.x);
}

template <bool kBf16>
__global__ void __launch_bounds__(kThreads) adamw_scalar_kernel(AdamWArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride)
    update_at<kBf16>(a, i);
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// CTAs for `work` items of kThreads: enough to fill every SM several times over, no more (grid-stride beyond).
unsigned grid_for(int64_t work) {
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t want = (work + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sms) * 8;
  return static_cast<unsigned>(want < 1 ? 1 : want < cap ? want : cap);
}

}  // namespace

cudaError_t launch_adamw(const AdamWArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  const uintptr_t mbytes = a.bf16_moments ? 8 : 16;
  const bool vec =
      aligned(a.param, 16) && aligned(a.grad, 16) && aligned(a.exp_avg, mbytes) && aligned(a.exp_avg_sq, mbytes);
  if (vec) {
    const unsigned grid = grid_for(a.n / 4);
    if (a.bf16_moments)
      adamw_vec_kernel<true><<<grid, kThreads, 0, stream>>>(a);
    else
      adamw_vec_kernel<false><<<grid, kThreads, 0, stream>>>(a);
  } else {
    const unsigned grid = grid_for(a.n);
    if (a.bf16_moments)
      adamw_scalar_kernel<true><<<grid, kThreads, 0, stream>>>(a);
    else
      adamw_scalar_kernel<false><<<grid, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
