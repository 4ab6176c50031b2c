// CUDA cross-entropy fused with the head's softmax (ops/cross_entropy.h), logits F32 or BF16 [rows, vocab] with row
// stride ld. One CTA per row, two passes over the row:
//   pass 1  the running (max, Σ exp(z − max)) pair of each thread (online softmax: the sum is rescaled when the max
//           grows), merged across the CTA by warp shuffles; lse = max + log(sum), row_loss = lse − z[target] in FP64
//   pass 2  (compute_grad) z ← grad_scale·exp(z − lse), minus grad_scale at the target, written in place
// The CPU sums exp(z − max) sequentially after finding the max; the sum here is the same quantity in another order,
// so F32 results differ by a few ulp (bounded comparison). The gradient's roundings mirror the CPU's: F32 rounds
// grad_scale·exp(...) and then the subtraction at the target (no FMA); BF16 rounds once, to nearest even.
// 16-byte vectors when the row starts and the row stride allow them, scalar otherwise; the tail past the last whole
// vector is scalar.
//
// Two kernels, the same arithmetic in the same order (thread t owns vectors t, t + blockDim.x, ...):
//   resident  (the gradient, 16-byte vectors, the row fits on the chip) reads the row once: each thread keeps its
//             first kResidentRegs vectors in registers and cp.async-stages the rest in dynamic shared memory, and
//             pass 2 writes the gradient from there — one read and one write of each element, the minimum. At the
//             benchmark's F32 [*, 32768] a CTA is 512 threads x 16 vectors: 32 KiB in registers (55 registers a
//             thread) and 96 KiB staged, so two rows share an SM (the register file's limit at 512 threads) and
//             one row's reduction and stores overlap the other's 128 KiB of loads, all issued up front. BF16 rows of
//             32768 stage 32 KiB. Rows up to the device's opt-in shared memory plus the registers' part
//             (Hopper's 227 KiB: 65536 F32, 131072 BF16 elements) run here, with one CTA an SM past ~112 KiB.
//   general   (everything else: loss only, unaligned rows or strides, longer rows) streams the row twice from
//             global memory, kUnroll vectors in flight per thread and pass.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "numerics/formats.h"
#include "ops/cuda/train_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kUnroll = 4;        // 16-byte vectors in flight per thread and pass (general kernel)
constexpr int kResidentRegs = 4;  // 16-byte vectors a thread keeps in registers (one-read kernel)

template <class T>
constexpr int kPerVec = 16 / static_cast<int>(sizeof(T));  // float: 4, bf16 (uint16_t codes): 8

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(uint16_t x) { return num::bf16_decode(x); }
__device__ __forceinline__ void store_float(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_float(uint16_t* p, float x) { *p = num::bf16_encode(x); }

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const auto smem = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(src) : "memory");
}
// This thread's copies complete and visible to it (the "memory" clobber keeps the shared reads after it).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

template <class T>
__device__ __forceinline__ void unpack(const uint4& u, float (&f)[kPerVec<T>]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // element 2i is the low half of word i
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
}

template <class T>
__device__ __forceinline__ uint4 pack(const float (&f)[kPerVec<T>]) {
  uint32_t w[4];
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __float_as_uint(f[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = static_cast<uint32_t>(num::bf16_encode(f[2 * i])) |
             (static_cast<uint32_t>(num::bf16_encode(f[2 * i + 1])) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// s, a sum of exp(z − m), re-expressed against the larger max `to` (m == to: unchanged, so an all −inf or NaN
// partial keeps its value; m = −inf below a finite `to`: 0).
__device__ __forceinline__ float rescale(float s, float m, float to) { return m == to ? s : s * expf(m - to); }

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float to = fmaxf(m, m2);
  s = rescale(s, m, to) + rescale(s2, m2, to);
  m = to;
}

// Adds N values to the running pair; −inf values add nothing (as exp(−inf − max) = 0 on the CPU), NaN propagates.
template <int N>
__device__ __forceinline__ void add_values(float& m, float& s, const float (&f)[N]) {
  float vm = f[0];
#pragma unroll
  for (int i = 1; i < N; ++i) vm = fmaxf(vm, f[i]);
  if (vm > m) {
    s = rescale(s, m, vm);
    m = vm;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    // exp, then a select (no branch around each exp): at f = −inf the exp is 0, or NaN when m = −inf; 0 is added.
    const float e = expf(f[i] - m);
    s += f[i] == -CUDART_INF_F ? 0.0f : e;
  }
}

// The CTA's (max, sum) in every thread; a fixed tree, so the bits do not vary run to run.
__device__ __forceinline__ void block_merge(float& m, float& s) {
  __shared__ float wm[32], ws[32], final_m, final_s;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xFFFFFFFFu, m, o), __shfl_xor_sync(0xFFFFFFFFu, s, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) {
    wm[warp] = m;
    ws[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < warps ? wm[lane] : -CUDART_INF_F;
    s = lane < warps ? ws[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      merge(m, s, __shfl_xor_sync(0xFFFFFFFFu, m, o), __shfl_xor_sync(0xFFFFFFFFu, s, o));
    if (lane == 0) {
      final_m = m;
      final_s = s;
    }
  }
  __syncthreads();
  m = final_m;
  s = final_s;
}

// grad_scale·exp(x − lse), minus grad_scale at the target: the CPU's two FP32 roundings, never fused.
__device__ __forceinline__ float grad_of(float x, float lse, float gs, bool is_target) {
  const float g = __fmul_rn(gs, expf(x - lse));
  return is_target ? __fsub_rn(g, gs) : g;
}

// grad_of over the N values from column c0: the products for all, the subtraction only where the target is (one
// compare per vector instead of one compare and select per value; the same two roundings).
template <int N>
__device__ __forceinline__ void grads_of(float (&f)[N], float lse, float gs, int c0, int target) {
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = __fmul_rn(gs, expf(f[i] - lse));
  if (static_cast<unsigned>(target - c0) < static_cast<unsigned>(N)) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (c0 + i == target) f[i] = __fsub_rn(f[i], gs);
  }
}

template <class T, bool kVec>
__global__ void __launch_bounds__(512) cross_entropy_kernel(CrossEntropyArgs a) {
  constexpr int N = kPerVec<T>;
  const int64_t r = blockIdx.x;
  T* z = static_cast<T*>(a.logits) + r * a.ld;
  const int32_t target = a.targets[r];
  const int64_t nt = blockDim.x;
  const int64_t nvec = kVec ? a.vocab / N : 0;  // whole 16-byte vectors; elements from nvec·N on are scalar
  if (target < 0 || target >= a.vocab) {        // uniform across the CTA
    if (threadIdx.x == 0) a.row_loss[r] = target == -1 ? 0.0 : CUDART_NAN;  // the entry point rejects the latter
    if (target == -1 && a.compute_grad) {
      for (int64_t v = threadIdx.x; v < nvec; v += nt) reinterpret_cast<uint4*>(z)[v] = make_uint4(0, 0, 0, 0);
      for (int64_t c = nvec * N + threadIdx.x; c < a.vocab; c += nt) store_float(z + c, 0.0f);
    }
    return;
  }
  // z[target] is read before the barriers in block_merge, so before any thread overwrites it in pass 2.
  const float zt = threadIdx.x == 0 ? to_float(z[target]) : 0.0f;

  float m = -CUDART_INF_F, s = 0.0f;
  int64_t v = threadIdx.x;
  for (; v + (kUnroll - 1) * nt < nvec; v += kUnroll * nt) {
    uint4 u[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) u[k] = reinterpret_cast<const uint4*>(z)[v + k * nt];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      float f[N];
      unpack<T>(u[k], f);
      add_values(m, s, f);
    }
  }
  for (; v < nvec; v += nt) {
    float f[N];
    unpack<T>(reinterpret_cast<const uint4*>(z)[v], f);
    add_values(m, s, f);
  }
  for (int64_t c = nvec * N + threadIdx.x; c < a.vocab; c += nt) {
    const float f[1] = {to_float(z[c])};
    add_values(m, s, f);
  }
  block_merge(m, s);
  const float lse = m + logf(s);
  if (threadIdx.x == 0) a.row_loss[r] = static_cast<double>(lse) - static_cast<double>(zt);
  if (!a.compute_grad) return;

  const float gs = a.grad_scale;
  v = threadIdx.x;
  for (; v + (kUnroll - 1) * nt < nvec; v += kUnroll * nt) {
    uint4 u[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) u[k] = reinterpret_cast<const uint4*>(z)[v + k * nt];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      float f[N];
      unpack<T>(u[k], f);
      const int64_t c0 = (v + k * nt) * N;
#pragma unroll
      for (int i = 0; i < N; ++i) f[i] = grad_of(f[i], lse, gs, c0 + i == target);
      reinterpret_cast<uint4*>(z)[v + k * nt] = pack<T>(f);
    }
  }
  for (; v < nvec; v += nt) {
    float f[N];
    unpack<T>(reinterpret_cast<const uint4*>(z)[v], f);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = grad_of(f[i], lse, gs, v * N + i == target);
    reinterpret_cast<uint4*>(z)[v] = pack<T>(f);
  }
  for (int64_t c = nvec * N + threadIdx.x; c < a.vocab; c += nt)
    store_float(z + c, grad_of(to_float(z[c]), lse, gs, c == target));
}

// The one-read kernel: every thread keeps the 16-byte vectors it owns (v = threadIdx.x + k·blockDim.x, the general
// kernel's assignment) on the chip from pass 1 to pass 2 — the first kResidentRegs in registers, the rest staged in
// dynamic shared memory by cp.async (vectors kResidentRegs·blockDim.x onwards, in row order, so a warp's accesses are
// contiguous) — and writes the gradient from there. Each thread reads back only what it staged itself, so
// cp.async.wait_all orders its own copies; block_merge's barriers order every read of the row before any write.
// The values meet add_values in the general kernel's order (the same per-thread sums and merge tree at the same
// thread count), and grads_of rounds each gradient as grad_of does. Rows with an invalid or ignored target and the
// scalar tail behave exactly as in the general kernel.
template <class T>
__global__ void __launch_bounds__(512, 2) cross_entropy_resident_kernel(CrossEntropyArgs a) {
  constexpr int N = kPerVec<T>;
  extern __shared__ uint4 staged[];
  const int64_t r = blockIdx.x;
  T* z = static_cast<T*>(a.logits) + r * a.ld;
  uint4* zv = reinterpret_cast<uint4*>(z);
  const int32_t target = a.targets[r];
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  // The launcher bounds the row to what fits on the chip (at most ~2^17 elements), so int indices suffice.
  const int vocab = static_cast<int>(a.vocab), nvec = vocab / N, first_staged = kResidentRegs * nt;
  if (target < 0 || target >= vocab) {                              // uniform across the CTA
    if (tid == 0) a.row_loss[r] = target == -1 ? 0.0 : CUDART_NAN;  // the entry point rejects the latter
    if (target == -1 && a.compute_grad) {
      for (int v = tid; v < nvec; v += nt) zv[v] = make_uint4(0, 0, 0, 0);
      for (int c = nvec * N + tid; c < vocab; c += nt) store_float(z + c, 0.0f);
    }
    return;
  }
  // Every load is issued before the first value is used: the registers' vectors, then the staged ones.
  uint4 u[kResidentRegs];
#pragma unroll
  for (int k = 0; k < kResidentRegs; ++k) u[k] = tid + k * nt < nvec ? zv[tid + k * nt] : make_uint4(0, 0, 0, 0);
  for (int v = first_staged + tid; v < nvec; v += nt) cp_async16(&staged[v - first_staged], zv + v);
  const int tail = nvec * N + tid;  // one scalar element past the last whole vector (fewer than N of them)
  const float tail_value = tail < vocab ? to_float(z[tail]) : 0.0f;
  // z[target] is read before the barriers in block_merge, so before any thread overwrites it in pass 2.
  const float zt = tid == 0 ? to_float(z[target]) : 0.0f;

  float m = -CUDART_INF_F, s = 0.0f;
#pragma unroll
  for (int k = 0; k < kResidentRegs; ++k) {
    if (tid + k * nt < nvec) {
      float f[N];
      unpack<T>(u[k], f);
      add_values(m, s, f);
    }
  }
  cp_async_wait_all();
#pragma unroll 4
  for (int v = first_staged + tid; v < nvec; v += nt) {
    float f[N];
    unpack<T>(staged[v - first_staged], f);
    add_values(m, s, f);
  }
  if (tail < vocab) {
    const float f[1] = {tail_value};
    add_values(m, s, f);
  }
  block_merge(m, s);
  const float lse = m + logf(s);
  if (tid == 0) a.row_loss[r] = static_cast<double>(lse) - static_cast<double>(zt);
  if (!a.compute_grad) return;

  const float gs = a.grad_scale;
#pragma unroll
  for (int k = 0; k < kResidentRegs; ++k) {
    const int v = tid + k * nt;
    if (v < nvec) {
      float f[N];
      unpack<T>(u[k], f);
      grads_of(f, lse, gs, v * N, target);
      zv[v] = pack<T>(f);
    }
  }
#pragma unroll 4
  for (int v = first_staged + tid; v < nvec; v += nt) {
    float f[N];
    unpack<T>(staged[v - first_staged], f);
    grads_of(f, lse, gs, v * N, target);
    zv[v] = pack<T>(f);
  }
  if (tail < vocab) store_float(z + tail, grad_of(tail_value, lse, gs, tail == target));
}

// Dynamic shared memory the resident kernel may take on the current device, its attribute raised to that (and the
// carveout to the most shared memory) once per device.
template <class T>
cudaError_t resident_smem_limit(int64_t& limit) {
  constexpr int kDevices = 64;
  static std::atomic<int64_t> known[kDevices] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < kDevices && (limit = known[device].load(std::memory_order_relaxed)) > 0) return cudaSuccess;
  int optin = 0;
  if ((err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess)
    return err;
  cudaFuncAttributes fa{};
  if ((err = cudaFuncGetAttributes(&fa, cross_entropy_resident_kernel<T>)) != cudaSuccess) return err;
  const int dynamic = optin - static_cast<int>(fa.sharedSizeBytes);
  if ((err = cudaFuncSetAttribute(cross_entropy_resident_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  dynamic)) != cudaSuccess)
    return err;
  if ((err = cudaFuncSetAttribute(cross_entropy_resident_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared)) != cudaSuccess)
    return err;
  limit = dynamic;
  if (device < kDevices) known[device].store(limit, std::memory_order_relaxed);
  return cudaSuccess;
}

template <class T>
cudaError_t launch_typed(const CrossEntropyArgs& a, cudaStream_t stream) {
  // Threads per row: enough 16-byte vectors per thread to keep loads in flight; at most 512, so that two rows share
  // an SM and one row's reduction between the passes overlaps the other's loads.
  const int threads = a.vocab >= 16384 ? 512 : a.vocab >= 4096 ? 256 : 128;
  const bool vec =
      reinterpret_cast<uintptr_t>(a.logits) % 16 == 0 && (a.ld * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(a.rows));
  if (vec && a.compute_grad) {
    // One read when the row fits on the chip: kResidentRegs vectors a thread in registers, the rest staged.
    const int64_t per_thread = (a.vocab / kPerVec<T> + threads - 1) / threads;
    const int64_t bytes = std::max<int64_t>(per_thread - kResidentRegs, 0) * threads * 16;
    int64_t limit = 0;
    if (cudaError_t err = resident_smem_limit<T>(limit); err != cudaSuccess) return err;
    if (bytes <= limit) {
      cross_entropy_resident_kernel<T><<<grid, threads, static_cast<size_t>(bytes), stream>>>(a);
      return cudaGetLastError();
    }
  }
  if (vec)
    cross_entropy_kernel<T, true><<<grid, threads, 0, stream>>>(a);
  else
    cross_entropy_kernel<T, false><<<grid, threads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cross_entropy(const CrossEntropyArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (a.rows > 0x7FFFFFFF || a.vocab < 0 || a.vocab > 0x7FFFFFFF) return cudaErrorInvalidValue;
  return a.bf16 ? launch_typed<uint16_t>(a, stream) : launch_typed<float>(a, stream);
}

}  // namespace fp8train::ops::cuda::detail
