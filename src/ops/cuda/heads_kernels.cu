// CUDA per-head broadcast and reduction (heads_launch.h). Both kernels walk flat work items with the element
// group (a 16-byte vector, or one element when the rows, heads or pointers are not 16-byte aligned or dim is not
// a multiple of the vector) varying fastest, so a warp's accesses are consecutive within a row's dim.
//   repeat_heads: one item = (row, group of kHeadsPerItem heads, vector): the source vector is loaded once and
//     stored into each head of the group; bits are copied as raw words (F32 and BF16 alike, NaNs unchanged).
//   sum_heads: one item = (row, vector): every head is added in increasing h, from head 0's value, in FP32 in one
//     thread (the CPU's order, so the same bits), and the sum is rounded once on the store.
#include <algorithm>
#include <cstdint>

#include "ops/cuda/elementwise_device.cuh"
#include "ops/cuda/heads_launch.h"

namespace fp8train::ops::cuda::ew {
namespace {

constexpr int64_t kHeadsPerItem = 8;  // stores per loaded source vector in repeat_heads
constexpr int kSumThreads = 128;      // smaller CTAs: sum_heads has one item per 16 output bytes only
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// ---- repeat_heads: raw words W (uint4 = 16 bytes, or one element: uint32_t / uint16_t) --------------------------
template <class W>
__global__ void repeat_heads_kernel(HeadsArgs a, const W* __restrict__ src, W* __restrict__ dst, int64_t vecs,
                                    int64_t head_groups) {
  // strides in W units (the host checked that they divide)
  const int64_t total = a.rows * head_groups * vecs;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = i % vecs, rest = i / vecs;
    const int64_t g = rest % head_groups, t = rest / head_groups;
    const W x = src[t * a.ld_mat + v];
    const int64_t h_end = (g + 1) * kHeadsPerItem < a.heads ? (g + 1) * kHeadsPerItem : a.heads;
    W* out = dst + t * a.ld_heads + v;
    for (int64_t h = g * kHeadsPerItem; h < h_end; ++h) out[h * a.head_stride] = x;
  }
}

// Strides and dim of `a` in units of W (elements of `elem` bytes, W of sizeof(W) bytes).
template <class W>
HeadsArgs in_words(HeadsArgs a, size_t elem) {
  const int64_t k = static_cast<int64_t>(sizeof(W) / elem);
  a.dim /= k;
  a.ld_mat /= k;
  a.ld_heads /= k;
  a.head_stride /= k;
  return a;
}

template <class W>
cudaError_t launch_repeat(const HeadsArgs& words, const void* src, void* dst, cudaStream_t stream) {
  const int64_t groups = ceil_div(words.heads, kHeadsPerItem);
  const int64_t total = words.rows * groups * words.dim;
  const int64_t blocks = std::max<int64_t>(1, std::min(ceil_div(total, kThreads), kMaxBlocks));
  repeat_heads_kernel<W><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      words, static_cast<const W*>(src), static_cast<W*>(dst), words.dim, groups);
  return cudaGetLastError();
}

// ---- sum_heads: V elements per item (16 bytes, or 1) ----------------------------------------------------------
template <int V>
__device__ __forceinline__ void ldv(const float* p, float* v) {
  if constexpr (V == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    static_assert(V == 1);
    v[0] = ld1(p);
  }
}
template <int V>
__device__ __forceinline__ void ldv(const uint16_t* p, float* v) {
  if constexpr (V == 8) {
    ld8(p, v);
  } else {
    static_assert(V == 1);
    v[0] = ld1(p);
  }
}
template <int V>
__device__ __forceinline__ void stv(float* p, const float* v) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    static_assert(V == 1);
    st1(p, v[0]);
  }
}
template <int V>
__device__ __forceinline__ void stv(uint16_t* p, const float* v) {
  if constexpr (V == 8) {
    st8(p, v);
  } else {
    static_assert(V == 1);
    st1(p, v[0]);
  }
}

// Loads in flight per thread: the head loop is unrolled so that later heads' loads issue before earlier sums.
constexpr int kSumUnroll = 8;

template <class S, int V>
__global__ void sum_heads_kernel(HeadsArgs a, const S* __restrict__ src, S* __restrict__ dst) {
  const int64_t vecs = a.dim / V, total = a.rows * vecs;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i % vecs) * V, t = i / vecs;
    const S* p = src + t * a.ld_heads + c;
    float acc[V];
    ldv<V>(p, acc);  // head 0 as the start (not 0 + head 0: keeps −0 and the CPU's order)
    int64_t h = 1;
    for (; h + kSumUnroll <= a.heads; h += kSumUnroll) {
      float x[kSumUnroll][V];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) ldv<V>(p + (h + u) * a.head_stride, x[u]);
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = __fadd_rn(acc[k], x[u][k]);
    }
    for (; h < a.heads; ++h) {
      float x[V];
      ldv<V>(p + h * a.head_stride, x);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = __fadd_rn(acc[k], x[k]);
    }
    stv<V>(dst + t * a.ld_mat + c, acc);
  }
}

template <class S, int V>
cudaError_t launch_sum(const HeadsArgs& a, const void* src, void* dst, cudaStream_t stream) {
  const int64_t total = a.rows * (a.dim / V);
  const int64_t blocks = std::max<int64_t>(1, std::min(ceil_div(total, kSumThreads), kMaxBlocks));
  sum_heads_kernel<S, V>
      <<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(a, static_cast<const S*>(src), static_cast<S*>(dst));
  return cudaGetLastError();
}

// The 16-byte path: dim a whole number of vectors, both base pointers 16-byte aligned and every row / head
// start too (strides in bytes multiples of 16; a stride of a single row or head is never used).
bool vectorizable(const HeadsArgs& a, const void* mat, const void* per_head) {
  const int64_t es = static_cast<int64_t>(size_of(a.type));
  const auto ok = [&](int64_t stride, int64_t count) { return count <= 1 || (stride * es) % 16 == 0; };
  return (a.dim * es) % 16 == 0 && aligned16(mat) && aligned16(per_head) && ok(a.ld_mat, a.rows) &&
         ok(a.ld_heads, a.rows) && ok(a.head_stride, a.heads);
}

}  // namespace

cudaError_t repeat_heads(const HeadsArgs& a, const void* src, void* dst, cudaStream_t stream) {
  if (a.rows <= 0 || a.heads <= 0 || a.dim <= 0) return cudaSuccess;
  const size_t es = size_of(a.type);
  if (vectorizable(a, src, dst)) return launch_repeat<uint4>(in_words<uint4>(a, es), src, dst, stream);
  if (a.type == Ty::F32) return launch_repeat<uint32_t>(a, src, dst, stream);
  return launch_repeat<uint16_t>(a, src, dst, stream);
}

cudaError_t sum_heads(const HeadsArgs& a, const void* src, void* dst, cudaStream_t stream) {
  if (a.rows <= 0 || a.dim <= 0 || a.heads <= 0) return cudaSuccess;
  const bool vec = vectorizable(a, dst, src);
  if (a.type == Ty::F32)
    return vec ? launch_sum<float, 4>(a, src, dst, stream) : launch_sum<float, 1>(a, src, dst, stream);
  return vec ? launch_sum<uint16_t, 8>(a, src, dst, stream) : launch_sum<uint16_t, 1>(a, src, dst, stream);
}

}  // namespace fp8train::ops::cuda::ew
