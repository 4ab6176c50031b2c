// CUDA kernels of the MoE plan, permute and unpermute (ops/moe_dispatch.h; the CPU kernels in
// ops/cpu/moe_dispatch.cpp are the reference).
//   plan       a stable counting sort of the N·K (token, choice) pairs by expert, all on the device (no host
//              synchronization): (1) each CTA counts its tile of pairs per expert, (2) one CTA turns the tile
//              counts into per-tile bases (a prefix over tiles per expert) and the aligned expert offsets (a
//              scan over experts), (3) each CTA places its tile again: within a warp the pairs of one expert
//              are ranked by lane (__match_any_sync), warps of a tile in order, tiles in order — so every pair
//              lands where the CPU's sequential cursor puts it, whatever the scheduling. slot_token starts as
//              all −1 (a memset), so padding rows and the rows past offsets[E] stay −1.
//   permute    a row gather by bytes (any element size: rows, FP8 codes, scales), 16-byte moves where the row
//              length, strides and pointers allow; padding rows get zero bytes.
//   permute backward / unpermute   32..256 threads per token row (no 64-bit index division), each a 16-byte chunk
//              at a time: Σ over the token's K rows in k order in FP32, rounded once (the CPU's sum, bit for bit).
//   unpermute backward   one warp per (token, choice): dyp row = g·dy (rounded once), dgates = <dy, yp row> by
//              a fixed shuffle tree (deterministic; another order than the CPU's serial dot product).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/moe_launch.h"

namespace fp8train::ops::cuda::moe {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---- plan -----------------------------------------------------------------------------------------------------
__device__ __forceinline__ int expert_of(const PlanArgs& a, int64_t i) {
  if (i >= a.pairs) return -1;
  const int e = a.selected[i];
  return e >= 0 && e < a.n_experts ? e : -1;  // the CPU throws on such an index; here it is left unplaced
}

// tile_base[tile, e] = pairs of expert e in the tile.
__global__ void plan_count_kernel(PlanArgs a) {
  extern __shared__ int32_t hist[];  // [E]
  for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kPlanTile;
  for (int64_t i = start + threadIdx.x; i < start + kPlanTile; i += blockDim.x) {
    const int e = expert_of(a, i);
    if (e >= 0) atomicAdd(hist + e, 1);  // integer counts: order-free
  }
  __syncthreads();
  for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x)
    a.tile_base[static_cast<int64_t>(blockIdx.x) * a.n_experts + e] = hist[e];
}

constexpr int kScanThreads = 1024;

// One CTA, thread e for expert e: tile counts -> exclusive per-tile bases; offsets = exclusive scan of the counts
// rounded up to align.
__global__ void plan_offsets_kernel(PlanArgs a, int64_t tiles) {
  __shared__ int32_t warp_tot[kScanThreads / 32];
  const int e = static_cast<int>(threadIdx.x), lane = e & 31, warp = e >> 5;
  int32_t padded = 0;
  if (e < a.n_experts) {
    int32_t run = 0;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      int32_t* p = a.tile_base + tile * a.n_experts + e;
      const int32_t c = *p;
      *p = run;
      run += c;
    }
    padded = (run + a.align - 1) / a.align * a.align;
  }
  int32_t incl = padded;  // inclusive scan: within the warp, then over the warps' totals
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t v = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = warp_tot[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t v = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += v;
    }
    warp_tot[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  incl += warp > 0 ? warp_tot[warp - 1] : 0;
  if (e < a.n_experts) a.offsets[e] = incl - padded;
  if (e == a.n_experts - 1) a.offsets[a.n_experts] = incl;
}

// Places the tile's pairs: base[w][e] = the next row of expert e for warp w.
__global__ void plan_place_kernel(PlanArgs a) {
  extern __shared__ int32_t base[];  // [kPlanWarps][E]
  const int E = a.n_experts;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  for (int i = threadIdx.x; i < kPlanWarps * E; i += blockDim.x) base[i] = 0;
  __syncthreads();
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kPlanTile + static_cast<int64_t>(warp) * kPlanPairsPerWarp;
  int32_t* mine = base + warp * E;
  const unsigned lower = (1u << lane) - 1u;
  for (int c = 0; c < kPlanPairsPerWarp; c += 32) {  // this warp's counts per expert
    const int e = expert_of(a, start + c + lane);
    const unsigned peers = __match_any_sync(kFull, e);
    if (e >= 0 && (peers & lower) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {  // warps' bases: expert offset + tile base + earlier warps
    int32_t run = a.offsets[e] + a.tile_base[static_cast<int64_t>(blockIdx.x) * E + e];
    for (int w = 0; w < kPlanWarps; ++w) {
      const int32_t n = base[w * E + e];
      base[w * E + e] = run;
      run += n;
    }
  }
  __syncthreads();
  for (int c = 0; c < kPlanPairsPerWarp; c += 32) {
    const int64_t i = start + c + lane;
    const int e = expert_of(a, i);
    const unsigned peers = __match_any_sync(kFull, e);
    if (e >= 0) {
      const int32_t j = mine[e] + __popc(peers & lower);  // lanes of one expert in pair order
      a.slot_token[j] = static_cast<int32_t>(i / a.top_k);
      a.choice_slot[i] = j;
    } else if (i < a.pairs) {
      a.choice_slot[i] = -1;
    }
    __syncwarp();  // every lane has read mine[e] before the leader moves it on
    if (e >= 0 && (peers & lower) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
}

// ---- permute --------------------------------------------------------------------------------------------------
constexpr int kRowThreads = 256;

// Threads per row: a power of two from 32 to 256 near the row's vector count; several short rows per CTA.
template <class V>
__global__ void permute_kernel(const char* x, const int32_t* slot_token, char* xp, int64_t rows, int64_t nvec,
                               int64_t ld_x, int64_t ld_xp, int tpr) {  // ld in bytes
  const int rpb = kRowThreads / tpr;
  const int sub = static_cast<int>(threadIdx.x) / tpr, col = static_cast<int>(threadIdx.x) % tpr;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * rpb + sub; j < rows; j += static_cast<int64_t>(gridDim.x) * rpb) {
    const int32_t t = slot_token[j];
    V* dst = reinterpret_cast<V*>(xp + j * ld_xp);
    if (t >= 0) {
      const V* src = reinterpret_cast<const V*>(x + t * ld_x);
      for (int64_t c = col; c < nvec; c += tpr) dst[c] = src[c];
    } else {
      for (int64_t c = col; c < nvec; c += tpr) dst[c] = V{};
    }
  }
}

template <class V>
cudaError_t permute_as(const void* x, const int32_t* slot_token, void* xp, int64_t rows, int64_t row_bytes,
                       int64_t ld_x, int64_t ld_xp, cudaStream_t stream) {
  const int64_t nvec = row_bytes / static_cast<int64_t>(sizeof(V));
  int tpr = 32;
  while (tpr < kRowThreads && tpr < nvec) tpr *= 2;
  const int64_t rpb = kRowThreads / tpr, blocks = (rows + rpb - 1) / rpb;
  permute_kernel<V><<<static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20)), kRowThreads, 0, stream>>>(
      static_cast<const char*>(x), slot_token, static_cast<char*>(xp), rows, nvec, ld_x, ld_xp, tpr);
  return cudaGetLastError();
}

// ---- token-ordered sums and the combine ---------------------------------------------------------------------
template <class S, int V>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class S>
__device__ __forceinline__ S narrow(float v);
template <>
__device__ __forceinline__ float narrow<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// y[t] (+)= Σ_k (g[t,k]·) src[choice_slot[t,k]]: kGated false is permute's backward.
template <class S, int V, bool kGated>
__global__ void gather_sum_kernel(RowsArgs a, const S* src, const int32_t* choice_slot, const float* gates, S* y,
                                  int tpt) {  // tpt threads per token row, kRowThreads / tpt rows per CTA
  const int64_t chunks = a.dim / V;
  const int tpb = kRowThreads / tpt, sub = static_cast<int>(threadIdx.x) / tpt;
  const int64_t first = static_cast<int64_t>(threadIdx.x % tpt) * V;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * tpb + sub; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * tpb)
    for (int64_t c = first; c < chunks * V; c += static_cast<int64_t>(tpt) * V) {
      Pack<S, V>* out = reinterpret_cast<Pack<S, V>*>(y + t * a.ld_x + c);
      float acc[V];
      if (a.accumulate) {
        const Pack<S, V> old = *out;
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = widen(old.v[v]);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = 0.0f;
      }
      for (int64_t k = 0; k < a.top_k; ++k) {
        const int32_t j = choice_slot[t * a.top_k + k];
        if (j < 0) continue;
        const Pack<S, V> in = *reinterpret_cast<const Pack<S, V>*>(src + j * a.ld_xp + c);
        if constexpr (kGated) {
          const float g = gates[t * a.top_k + k];
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] = __fadd_rn(acc[v], __fmul_rn(g, widen(in.v[v])));
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] = __fadd_rn(acc[v], widen(in.v[v]));
        }
      }
      Pack<S, V> r;
#pragma unroll
      for (int v = 0; v < V; ++v) r.v[v] = narrow<S>(acc[v]);
      *out = r;
    }
}

constexpr int kWarpsPerBlock = 8;

// One warp per (token, choice): dyp[j] = g·dy[t]; dgates = <dy[t], yp[j]>.
template <class S, int V>
__global__ void unpermute_backward_kernel(RowsArgs a, const S* dy, const S* yp, const int32_t* choice_slot,
                                          const float* gates, S* dyp, float* dgates) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t pairs = a.tokens * a.top_k, chunks = a.dim / V;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); p < pairs;
       p += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t t = p / a.top_k;
    const int32_t j = choice_slot[p];
    if (j < 0) continue;  // warp-uniform
    const float g = gates[p];
    const S* d = dy + t * a.ld_x;
    const S* yr = yp + j * a.ld_xp;
    S* out = dyp + j * a.ld_xp;
    float dot = 0.0f;
    for (int64_t c = lane; c < chunks; c += 32) {
      const Pack<S, V> dv = *reinterpret_cast<const Pack<S, V>*>(d + c * V);
      const Pack<S, V> yv = *reinterpret_cast<const Pack<S, V>*>(yr + c * V);
      Pack<S, V> r;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float dc = widen(dv.v[v]);
        dot = fmaf(dc, widen(yv.v[v]), dot);
        r.v[v] = narrow<S>(__fmul_rn(g, dc));
      }
      *reinterpret_cast<Pack<S, V>*>(out + c * V) = r;
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(kFull, dot, o);
    if (lane == 0) dgates[p] = dot;
  }
}

bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

unsigned capped_blocks(int64_t n, int64_t per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < (1 << 20) ? (b > 0 ? b : 1) : (1 << 20));
}

template <class S, class Fn>
cudaError_t with_width(const RowsArgs& a, std::initializer_list<const void*> ptrs, Fn&& fn) {
  constexpr int kVec = 16 / sizeof(S);
  bool vec = a.dim % kVec == 0 && a.ld_x % kVec == 0 && a.ld_xp % kVec == 0;
  for (const void* p : ptrs) vec = vec && (p == nullptr || aligned(p, 16));
  return vec ? fn(std::integral_constant<int, kVec>{}) : fn(std::integral_constant<int, 1>{});
}

template <class S, bool kGated>
cudaError_t gather_sum(const RowsArgs& a, const void* src, const int32_t* choice_slot, const float* gates, void* y,
                       cudaStream_t stream) {
  if (a.tokens == 0 || a.dim == 0) return cudaSuccess;
  return with_width<S>(a, {src, y}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    int tpt = 32;  // threads per token row: one 16-byte chunk each where the row has that many
    while (tpt < kRowThreads && tpt < a.dim / V) tpt *= 2;
    gather_sum_kernel<S, V, kGated><<<capped_blocks(a.tokens, kRowThreads / tpt), kRowThreads, 0, stream>>>(
        a, static_cast<const S*>(src), choice_slot, gates, static_cast<S*>(y), tpt);
    return cudaGetLastError();
  });
}

template <class S>
cudaError_t unpermute_backward(const RowsArgs& a, const void* dy, const void* yp, const int32_t* choice_slot,
                               const float* gates, void* dyp, float* dgates, cudaStream_t stream) {
  if (a.tokens == 0 || a.top_k == 0) return cudaSuccess;
  if (a.dim == 0) return cudaMemsetAsync(dgates, 0, sizeof(float) * a.tokens * a.top_k, stream);
  return with_width<S>(a, {dy, yp, dyp}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    unpermute_backward_kernel<S, V>
        <<<capped_blocks(a.tokens * a.top_k, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
            a, static_cast<const S*>(dy), static_cast<const S*>(yp), choice_slot, gates, static_cast<S*>(dyp), dgates);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t launch_moe_plan(const PlanArgs& a, cudaStream_t stream) {
  if (a.n_experts < 1 || a.n_experts > kPlanMaxExperts || a.align < 1) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(a.slot_token, 0xff, sizeof(int32_t) * a.rows, stream);  // −1 everywhere
  if (err != cudaSuccess) return err;
  const int64_t tiles = plan_tiles(a.pairs);
  const size_t hist_bytes = sizeof(int32_t) * a.n_experts;
  plan_count_kernel<<<static_cast<unsigned>(tiles), kPlanWarps * 32, hist_bytes, stream>>>(a);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  plan_offsets_kernel<<<1, kScanThreads, 0, stream>>>(a, tiles);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  plan_place_kernel<<<static_cast<unsigned>(tiles), kPlanWarps * 32, hist_bytes * kPlanWarps, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_moe_permute(const void* x, const int32_t* slot_token, void* xp, int64_t rows, int64_t dim,
                               int64_t ld_x, int64_t ld_xp, int elem_size, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  const int64_t row_bytes = dim * elem_size, lx = ld_x * elem_size, lxp = ld_xp * elem_size;
  for (int64_t w : {16, 8, 4, 2}) {
    if (row_bytes % w == 0 && lx % w == 0 && lxp % w == 0 && aligned(x, w) && aligned(xp, w)) {
      switch (w) {
        case 16:
          return permute_as<uint4>(x, slot_token, xp, rows, row_bytes, lx, lxp, stream);
        case 8:
          return permute_as<uint2>(x, slot_token, xp, rows, row_bytes, lx, lxp, stream);
        case 4:
          return permute_as<uint32_t>(x, slot_token, xp, rows, row_bytes, lx, lxp, stream);
        default:
          return permute_as<uint16_t>(x, slot_token, xp, rows, row_bytes, lx, lxp, stream);
      }
    }
  }
  return permute_as<uint8_t>(x, slot_token, xp, rows, row_bytes, lx, lxp, stream);
}

cudaError_t launch_moe_permute_backward(const RowsArgs& a, const void* dxp, const int32_t* choice_slot, void* dx,
                                        cudaStream_t stream) {
  return a.type == RowType::F32 ? gather_sum<float, false>(a, dxp, choice_slot, nullptr, dx, stream)
                                : gather_sum<__nv_bfloat16, false>(a, dxp, choice_slot, nullptr, dx, stream);
}

cudaError_t launch_moe_unpermute(const RowsArgs& a, const void* yp, const int32_t* choice_slot, const float* gates,
                                 void* y, cudaStream_t stream) {
  return a.type == RowType::F32 ? gather_sum<float, true>(a, yp, choice_slot, gates, y, stream)
                                : gather_sum<__nv_bfloat16, true>(a, yp, choice_slot, gates, y, stream);
}

cudaError_t launch_moe_unpermute_backward(const RowsArgs& a, const void* dy, const void* yp, const int32_t* choice_slot,
                                          const float* gates, void* dyp, float* dgates, cudaStream_t stream) {
  return a.type == RowType::F32 ? unpermute_backward<float>(a, dy, yp, choice_slot, gates, dyp, dgates, stream)
                                : unpermute_backward<__nv_bfloat16>(a, dy, yp, choice_slot, gates, dyp, dgates, stream);
}

}  // namespace fp8train::ops::cuda::moe
