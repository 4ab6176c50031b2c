// SIMT FP32 attention kernels (the F32 path, and the BF16 fallback for head dims / strides the tensor-core kernels
// do not serve). Causal softmax attention per (sequence, head); q, k [rows, heads, qk_dim], v, o, dout
// [rows, heads, v_dim] with any row / head strides (unit last stride), lse and delta [batch, heads, seq] F32.
//   forward   a CTA of kRows warps owns kRows consecutive queries of one (b, h), one warp per query; key tiles of
//             32 rows are staged in shared memory (FP32), lane j scores key j, online softmax in FP32, each lane
//             accumulates the output dims lane, lane + 32, ...
//   backward  delta = rowsum(dO∘O) (one warp per row); dK, dV: a warp per key, looping over query tiles at or
//             after it; dQ: a warp per query, looping over key tiles up to it. Every output element is written by
//             one thread after a fixed-order loop: deterministic, no atomics.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "ops/cuda/attention_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kRows = 8;   // queries (forward, dQ) or keys (dK, dV) per CTA: one warp each
constexpr int kTile = 32;  // keys (forward, dQ) or queries (dK, dV) per shared-memory tile: one lane each
constexpr int kPerLane = kAttnMaxDim / 32;  // output dims per lane

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float x) { *p = x; }
__device__ __forceinline__ void st(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Element (row r = b·seq + t, head h) of a tensor laid out as l.
template <class S>
__device__ __forceinline__ const S* at(const void* base, AttnLayout l, int64_t r, int h) {
  return static_cast<const S*>(base) + r * l.row_stride + static_cast<int64_t>(h) * l.head_stride;
}
template <class S>
__device__ __forceinline__ S* at_mut(void* base, AttnLayout l, int64_t r, int h) {
  return static_cast<S*>(base) + r * l.row_stride + static_cast<int64_t>(h) * l.head_stride;
}

// Rows [r0, r0 + n) (n ≤ tile rows, the rest zero) of one head into shared FP32 [tile rows][ld].
template <class S>
__device__ void stage(float* dst, int ld_dst, int tile_rows, const void* base, AttnLayout l, int64_t r0, int n, int h,
                      int dim) {
  for (int i = threadIdx.x; i < tile_rows * dim; i += blockDim.x) {
    const int row = i / dim, c = i % dim;
    dst[row * ld_dst + c] = row < n ? ld(at<S>(base, l, r0 + row, h) + c) : 0.0f;
  }
}

// grid: one CTA per (b, h, block of kRows queries), heaviest (last) query blocks first.
template <class S>
__global__ void __launch_bounds__(kRows * 32) forward_simt(AttnArgs a) {
  extern __shared__ float smem[];
  const int qk = a.qk_dim, dv = a.v_dim, ldk = qk + 1;
  float* qs = smem;              // [kRows][qk]
  float* ks = qs + kRows * qk;   // [kTile][qk + 1]: lane j reads row j (odd stride: no bank conflicts)
  float* vs = ks + kTile * ldk;  // [kTile][dv]
  const int qblocks = (a.seq + kRows - 1) / kRows, bh_count = a.batch * a.heads;
  const int qb = qblocks - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int bh = static_cast<int>(blockIdx.x % bh_count), b = bh / a.heads, h = bh % a.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t0 = qb * kRows, nq = min(kRows, a.seq - t0), t = t0 + warp;
  const int64_t row0 = static_cast<int64_t>(b) * a.seq;
  stage<S>(qs, qk, kRows, a.q, a.lq, row0 + t0, nq, h, qk);
  float m = -INFINITY, l = 0.0f, acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  const int kend = t0 + nq;  // keys the block's last query sees
  for (int j0 = 0; j0 < kend; j0 += kTile) {
    const int nk = min(kTile, kend - j0);
    __syncthreads();  // the previous tile is consumed
    stage<S>(ks, ldk, kTile, a.k, a.lk, row0 + j0, nk, h, qk);
    stage<S>(vs, dv, kTile, a.v, a.lv, row0 + j0, nk, h, dv);
    __syncthreads();
    if (warp >= nq || j0 > t) continue;  // no visible key in this tile (warp-uniform)
    float s = 0.0f;
    const float* kr = ks + lane * ldk;
    const float* qr = qs + warp * qk;
    for (int c = 0; c < qk; ++c) s = fmaf(qr[c], kr[c], s);
    const bool visible = j0 + lane <= t;
    s = visible ? s * a.scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 ≤ t is visible
    const float p = visible ? expf(s - m_new) : 0.0f, corr = expf(m - m_new);
    l = l * corr + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
    const int jn = min(nk, t - j0 + 1);
    for (int j = 0; j < jn; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float* vr = vs + j * dv;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < dv) acc[i] = fmaf(pj, vr[c], acc[i]);
      }
    }
  }
  if (warp >= nq) return;
  const float inv = 1.0f / l;
  S* orow = at_mut<S>(a.o, a.lo, row0 + t, h);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < dv) st(orow + c, acc[i] * inv);
  }
  if (lane == 0) a.lse[static_cast<int64_t>(bh) * a.seq + t] = m + logf(l);
}

// delta[b, h, t] = Σ_c dO·O: one warp per (row, head).
template <class S>
__global__ void delta_simt(AttnArgs a) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t total = static_cast<int64_t>(a.batch) * a.heads * a.seq;
  if (w >= total) return;
  const int t = static_cast<int>(w % a.seq);
  const int64_t bh = w / a.seq;
  const int b = static_cast<int>(bh / a.heads), h = static_cast<int>(bh % a.heads);
  const int64_t r = static_cast<int64_t>(b) * a.seq + t;
  const S* o = at<S>(a.o, a.lo, r, h);
  const S* d = at<S>(a.dout, a.ldout, r, h);
  float s = 0.0f;
  for (int c = lane; c < a.v_dim; c += 32) s = fmaf(ld(d + c), ld(o + c), s);
  s = warp_sum(s);
  if (lane == 0) a.delta[w] = s;
}

// dK, dV: one CTA per (b, h, block of kRows keys), a warp per key; query tiles from the key block's first key on.
template <class S>
__global__ void __launch_bounds__(kRows * 32) dkdv_simt(AttnArgs a) {
  extern __shared__ float smem[];
  const int qk = a.qk_dim, dv = a.v_dim, ldq = qk + 1, ldo = dv + 1;
  float* ks = smem;               // [kRows][qk]
  float* vs = ks + kRows * qk;    // [kRows][dv]
  float* qs = vs + kRows * dv;    // [kTile][qk + 1]
  float* dos = qs + kTile * ldq;  // [kTile][dv + 1]
  float* ls = dos + kTile * ldo;  // [kTile] lse
  float* ds = ls + kTile;         // [kTile] delta
  const int kblocks = (a.seq + kRows - 1) / kRows, bh_count = a.batch * a.heads;
  const int kb = static_cast<int>(blockIdx.x / bh_count);  // light (late) key blocks last
  const int bh = static_cast<int>(blockIdx.x % bh_count), b = bh / a.heads, h = bh % a.heads;
  (void)kblocks;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int s0 = kb * kRows, nk = min(kRows, a.seq - s0), s = s0 + warp;
  const int64_t row0 = static_cast<int64_t>(b) * a.seq;
  stage<S>(ks, qk, kRows, a.k, a.lk, row0 + s0, nk, h, qk);
  stage<S>(vs, dv, kRows, a.v, a.lv, row0 + s0, nk, h, dv);
  float dk[kPerLane], dvacc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dk[i] = dvacc[i] = 0.0f;
  const float* lse = a.lse + static_cast<int64_t>(bh) * a.seq;
  const float* delta = a.delta + static_cast<int64_t>(bh) * a.seq;
  for (int i0 = s0; i0 < a.seq; i0 += kTile) {
    const int nq = min(kTile, a.seq - i0);
    __syncthreads();
    stage<S>(qs, ldq, kTile, a.q, a.lq, row0 + i0, nq, h, qk);
    stage<S>(dos, ldo, kTile, a.dout, a.ldout, row0 + i0, nq, h, dv);
    if (threadIdx.x < kTile) {
      ls[threadIdx.x] = threadIdx.x < nq ? lse[i0 + threadIdx.x] : 0.0f;
      ds[threadIdx.x] = threadIdx.x < nq ? delta[i0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    if (warp >= nk) continue;
    const int t = i0 + lane;  // this lane's query
    const bool visible = lane < nq && t >= s;
    float sc = 0.0f, dp = 0.0f;
    const float* qr = qs + lane * ldq;
    const float* kr = ks + warp * qk;
    for (int c = 0; c < qk; ++c) sc = fmaf(qr[c], kr[c], sc);
    const float* dr = dos + lane * ldo;
    const float* vr = vs + warp * dv;
    for (int c = 0; c < dv; ++c) dp = fmaf(dr[c], vr[c], dp);
    const float p = visible ? expf(sc * a.scale - ls[lane]) : 0.0f;
    const float dsc = p * (dp - ds[lane]);
    for (int j = 0; j < nq; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j), dj = __shfl_sync(0xffffffffu, dsc, j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < dv) dvacc[i] = fmaf(pj, dos[j * ldo + c], dvacc[i]);
        if (c < qk) dk[i] = fmaf(dj, qs[j * ldq + c], dk[i]);
      }
    }
  }
  if (warp >= nk) return;
  S* dkr = at_mut<S>(a.dk, a.ldk, row0 + s, h);
  S* dvr = at_mut<S>(a.dv, a.ldv, row0 + s, h);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < qk) st(dkr + c, dk[i] * a.scale);
    if (c < dv) st(dvr + c, dvacc[i]);
  }
}

// dQ: one CTA per (b, h, block of kRows queries), a warp per query; key tiles up to the block's last query.
template <class S>
__global__ void __launch_bounds__(kRows * 32) dq_simt(AttnArgs a) {
  extern __shared__ float smem[];
  const int qk = a.qk_dim, dv = a.v_dim, ldk = qk + 1, ldv = dv + 1;
  float* qs = smem;              // [kRows][qk]
  float* dos = qs + kRows * qk;  // [kRows][dv]
  float* ks = dos + kRows * dv;  // [kTile][qk + 1]
  float* vs = ks + kTile * ldk;  // [kTile][dv + 1]
  const int qblocks = (a.seq + kRows - 1) / kRows, bh_count = a.batch * a.heads;
  const int qb = qblocks - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int bh = static_cast<int>(blockIdx.x % bh_count), b = bh / a.heads, h = bh % a.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t0 = qb * kRows, nq = min(kRows, a.seq - t0), t = t0 + warp;
  const int64_t row0 = static_cast<int64_t>(b) * a.seq;
  stage<S>(qs, qk, kRows, a.q, a.lq, row0 + t0, nq, h, qk);
  stage<S>(dos, dv, kRows, a.dout, a.ldout, row0 + t0, nq, h, dv);
  const float lse = warp < nq ? a.lse[static_cast<int64_t>(bh) * a.seq + t] : 0.0f;
  const float delta = warp < nq ? a.delta[static_cast<int64_t>(bh) * a.seq + t] : 0.0f;
  float dq[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dq[i] = 0.0f;
  const int kend = t0 + nq;
  for (int j0 = 0; j0 < kend; j0 += kTile) {
    const int nk = min(kTile, kend - j0);
    __syncthreads();
    stage<S>(ks, ldk, kTile, a.k, a.lk, row0 + j0, nk, h, qk);
    stage<S>(vs, ldv, kTile, a.v, a.lv, row0 + j0, nk, h, dv);
    __syncthreads();
    if (warp >= nq || j0 > t) continue;
    const bool visible = j0 + lane <= t;
    float sc = 0.0f, dp = 0.0f;
    const float* kr = ks + lane * ldk;
    const float* qr = qs + warp * qk;
    for (int c = 0; c < qk; ++c) sc = fmaf(qr[c], kr[c], sc);
    const float* vr = vs + lane * ldv;
    const float* dr = dos + warp * dv;
    for (int c = 0; c < dv; ++c) dp = fmaf(dr[c], vr[c], dp);
    const float p = visible ? expf(sc * a.scale - lse) : 0.0f;
    const float dsc = p * (dp - delta);
    const int jn = min(nk, t - j0 + 1);
    for (int j = 0; j < jn; ++j) {
      const float dj = __shfl_sync(0xffffffffu, dsc, j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < qk) dq[i] = fmaf(dj, ks[j * ldk + c], dq[i]);
      }
    }
  }
  if (warp >= nq) return;
  S* dqr = at_mut<S>(a.dq, a.ldq, row0 + t, h);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < qk) st(dqr + c, dq[i] * a.scale);
  }
}

template <class K>
cudaError_t launch(K kernel, int64_t blocks, size_t smem, cudaStream_t stream, const AttnArgs& a) {
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  kernel<<<static_cast<unsigned>(blocks), kRows * 32, smem, stream>>>(a);
  return cudaGetLastError();
}

template <class S>
cudaError_t forward_impl(const AttnArgs& a, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>((a.seq + kRows - 1) / kRows) * a.batch * a.heads;
  const size_t smem = sizeof(float) * (kRows * a.qk_dim + kTile * (a.qk_dim + 1) + kTile * a.v_dim);
  return launch(forward_simt<S>, blocks, smem, stream, a);
}

template <class S>
cudaError_t delta_impl(const AttnArgs& a, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.batch) * a.heads * a.seq;
  if (rows == 0) return cudaSuccess;
  delta_simt<S><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

template <class S>
cudaError_t backward_impl(const AttnArgs& a, cudaStream_t stream) {
  cudaError_t e = delta_impl<S>(a, stream);
  if (e != cudaSuccess) return e;
  const int64_t blocks = static_cast<int64_t>((a.seq + kRows - 1) / kRows) * a.batch * a.heads;
  const size_t smem_kv =
      sizeof(float) * (kRows * (a.qk_dim + a.v_dim) + kTile * (a.qk_dim + 1) + kTile * (a.v_dim + 1) + 2 * kTile);
  e = launch(dkdv_simt<S>, blocks, smem_kv, stream, a);
  if (e != cudaSuccess) return e;
  const size_t smem_q = sizeof(float) * (kRows * (a.qk_dim + a.v_dim) + kTile * (a.qk_dim + 1) + kTile * (a.v_dim + 1));
  return launch(dq_simt<S>, blocks, smem_q, stream, a);
}

}  // namespace

cudaError_t launch_attention_forward_simt(const AttnArgs& a, cudaStream_t stream) {
  return a.bf16 ? forward_impl<__nv_bfloat16>(a, stream) : forward_impl<float>(a, stream);
}

cudaError_t launch_attention_delta(const AttnArgs& a, cudaStream_t stream) {
  return a.bf16 ? delta_impl<__nv_bfloat16>(a, stream) : delta_impl<float>(a, stream);
}

cudaError_t launch_attention_backward_simt(const AttnArgs& a, cudaStream_t stream) {
  return a.bf16 ? backward_impl<__nv_bfloat16>(a, stream) : backward_impl<float>(a, stream);
}

}  // namespace fp8train::ops::cuda::detail
