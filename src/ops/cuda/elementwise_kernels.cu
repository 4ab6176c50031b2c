// CUDA kernels of axpby (and so copy / cast / add / axpy / scale), fill, and the embedding lookup and its backward
// (elementwise_launch.h). Matrices are rows × cols with row strides; a fully contiguous problem runs as one long
// row. The vector path moves 8 elements per thread per step (16-byte accesses) when every pointer is 16-byte
// aligned and every row stride keeps rows 16-byte aligned; the last cols % 8 elements of a row (and every other
// layout) take the scalar path. CTAs of 256 threads shaped to the row (shape_2d): x over a row's 8-element
// groups, y over rows, grid-stride on both.
#include <algorithm>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/elementwise_device.cuh"
#include "ops/cuda/elementwise_launch.h"

namespace fp8train::ops::cuda::ew {
namespace {



template <class A, class B, class O, bool kHasB, bool kVec>
__global__ void __launch_bounds__(kThreads) axpby_kernel(AxpbyArgs p, const A* a, const B* b, O* out) {
  // alpha == 1 without b is a copy or a cast: no multiply (the CPU's branch; keeps NaN payloads too).
  const bool mul_a = kHasB || p.alpha != 1.0f;
  const int64_t nvec = kVec ? p.cols / 8 : 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  const float nan = __uint_as_float(0x7FC00000u);
  for (int64_t r = r0; r < p.rows; r += rstep) {
    int64_t ra = r;
    bool bad = false;
    if (p.a_rows != nullptr) {
      ra = p.a_rows[r];
      bad = ra < 0 || ra >= p.a_row_limit;
    }
    const A* ar = a + (bad ? 0 : ra) * p.ld_a;
    const B* br = kHasB ? b + r * p.ld_b : nullptr;
    O* orow = out + r * p.ld_out;
    for (int64_t i = t0; i < nvec; i += step) {
      float v[8];
      if (bad) {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = nan;
      } else {
        ld8(ar + 8 * i, v);
        if (mul_a) {
#pragma unroll
          for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(p.alpha, v[k]);
        }
        if constexpr (kHasB) {
          float w[8];
          ld8(br + 8 * i, w);
#pragma unroll
          for (int k = 0; k < 8; ++k) v[k] = __fadd_rn(v[k], __fmul_rn(p.beta, w[k]));
        }
      }
      st8(orow + 8 * i, v);
    }
    for (int64_t c = 8 * nvec + t0; c < p.cols; c += step) {
      float v = nan;
      if (!bad) {
        v = ld1(ar + c);
        if (mul_a) v = __fmul_rn(p.alpha, v);
        if constexpr (kHasB) v = __fadd_rn(v, __fmul_rn(p.beta, ld1(br + c)));
      }
      st1(orow + c, v);
    }
  }
}

template <class A, class B, class O>
cudaError_t launch_axpby(AxpbyArgs p, const void* a, const void* b, void* out, cudaStream_t stream) {
  // A contiguous problem (every ld == cols) is one long row.
  const bool contiguous = p.a_rows == nullptr && p.ld_a == p.cols && p.ld_out == p.cols && (!b || p.ld_b == p.cols);
  if (contiguous && p.rows > 1) {
    p.cols *= p.rows;
    p.rows = 1;
    p.ld_a = p.ld_b = p.ld_out = p.cols;
  }
  const bool vec = rows_aligned16(a, p.ld_a, p.a, p.a_rows ? 2 : p.rows) &&
                   (!b || rows_aligned16(b, p.ld_b, p.b, p.rows)) && rows_aligned16(out, p.ld_out, p.out, p.rows);
  const int64_t items = vec ? std::max<int64_t>(p.cols / 8, p.cols % 8) : p.cols;
  const Shape2d sh = shape_2d(p.rows, items);
  const auto* pa = static_cast<const A*>(a);
  const auto* pb = static_cast<const B*>(b);
  auto* po = static_cast<O*>(out);
  if (b != nullptr) {
    if (vec)
      axpby_kernel<A, B, O, true, true><<<sh.grid, sh.block, 0, stream>>>(p, pa, pb, po);
    else
      axpby_kernel<A, B, O, true, false><<<sh.grid, sh.block, 0, stream>>>(p, pa, pb, po);
  } else {
    if (vec)
      axpby_kernel<A, B, O, false, true><<<sh.grid, sh.block, 0, stream>>>(p, pa, pb, po);
    else
      axpby_kernel<A, B, O, false, false><<<sh.grid, sh.block, 0, stream>>>(p, pa, pb, po);
  }
  return cudaGetLastError();
}

template <class A, class B>
cudaError_t axpby_out(const AxpbyArgs& p, const void* a, const void* b, void* out, cudaStream_t stream) {
  if (p.out == Ty::BF16) return launch_axpby<A, B, uint16_t>(p, a, b, out, stream);
  return launch_axpby<A, B, float>(p, a, b, out, stream);
}
template <class A>
cudaError_t axpby_b(const AxpbyArgs& p, const void* a, const void* b, void* out, cudaStream_t stream) {
  // Without b, B is a placeholder: instantiate the b-less kernels once per (A, O).
  if (b == nullptr || p.b == Ty::F32) return axpby_out<A, float>(p, a, b, out, stream);
  return axpby_out<A, uint16_t>(p, a, b, out, stream);
}

template <class S, bool kVec>
__global__ void __launch_bounds__(kThreads) fill_kernel(int64_t rows, int64_t cols, int64_t ld, S value, S* out) {
  const int64_t nvec = kVec ? cols / 8 : 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t rstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  uint4 pattern;
  if constexpr (sizeof(S) == 4) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(&value);
    pattern = make_uint4(w, w, w, w);
  } else {
    const uint32_t w = static_cast<uint32_t>(value) | (static_cast<uint32_t>(value) << 16);
    pattern = make_uint4(w, w, w, w);
  }
  for (int64_t r = r0; r < rows; r += rstep) {
    S* orow = out + r * ld;
    for (int64_t i = t0; i < nvec; i += step) {
      uint4* q = reinterpret_cast<uint4*>(orow + 8 * i);
      q[0] = pattern;
      if constexpr (sizeof(S) == 4) q[1] = pattern;
    }
    for (int64_t c = 8 * nvec + t0; c < cols; c += step) orow[c] = value;
  }
}

template <class S>
cudaError_t launch_fill(Ty type, int64_t rows, int64_t cols, int64_t ld, S value, void* out, cudaStream_t stream) {
  if (ld == cols && rows > 1) {
    cols *= rows;
    ld = cols;
    rows = 1;
  }
  const bool vec = rows_aligned16(out, ld, type, rows);
  const Shape2d sh = shape_2d(rows, vec ? std::max<int64_t>(cols / 8, cols % 8) : cols);
  if (vec)
    fill_kernel<S, true><<<sh.grid, sh.block, 0, stream>>>(rows, cols, ld, value, static_cast<S*>(out));
  else
    fill_kernel<S, false><<<sh.grid, sh.block, 0, stream>>>(rows, cols, ld, value, static_cast<S*>(out));
  return cudaGetLastError();
}

// ---- embedding backward ----------------------------------------------------------------------------------------
__global__ void iota_kernel(int32_t n, int32_t* out) {
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}

// One CTA per (sorted position, chunk of kEmbedCols x kThreads columns); the CTAs at the first position of a run of
// equal ids add that run's dout rows to the id's table row in token order (sequential per column: the CPU's order
// and rounding). A byte-level corpus makes one run long (the space: about one token in six), and a run's CTA is then
// the whole kernel's tail: so the columns are split over CTAs, the run's end is found by the whole CTA a window at a
// time, and each thread loads eight rows of its columns ahead of its in-order adds. Four columns per thread keep
// the grid small for the many short runs of a large vocabulary.
constexpr int kEmbedCols = 4;
template <class S>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_kernel(int32_t tokens, int64_t vocab, int64_t dim, int64_t ld, const int32_t* sorted_ids,
                              const int32_t* sorted_tokens, const S* dout, float* dtable) {
  const int32_t i = blockIdx.x;
  const int32_t id = sorted_ids[i];
  if (i > 0 && sorted_ids[i - 1] == id) return;
  if (id < 0 || id >= vocab) return;
  __shared__ int32_t run_end;
  if (threadIdx.x == 0) run_end = tokens;
  __syncthreads();
  for (int32_t base = i + 1; base < tokens; base += static_cast<int32_t>(blockDim.x)) {
    const int32_t j = base + static_cast<int32_t>(threadIdx.x);
    if (j < tokens && sorted_ids[j] != id) atomicMin(&run_end, j);
    __syncthreads();
    const bool found = run_end < tokens;
    __syncthreads();
    if (found) break;
  }
  const int32_t end = run_end;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kEmbedCols * blockDim.x + threadIdx.x;
  if (c0 >= dim) return;
  float* row = dtable + static_cast<int64_t>(id) * dim;
  float acc[kEmbedCols];
  bool in[kEmbedCols];
#pragma unroll
  for (int q = 0; q < kEmbedCols; ++q) {
    in[q] = c0 + q * blockDim.x < dim;
    acc[q] = in[q] ? row[c0 + q * blockDim.x] : 0.0f;
  }
  int32_t j = i;
  constexpr int kAhead = 8;
  for (; j + kAhead <= end; j += kAhead) {
    float v[kAhead][kEmbedCols];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const S* src = dout + static_cast<int64_t>(sorted_tokens[j + k]) * ld + c0;
#pragma unroll
      for (int q = 0; q < kEmbedCols; ++q) v[k][q] = in[q] ? ld1(src + q * blockDim.x) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kAhead; ++k)
#pragma unroll
      for (int q = 0; q < kEmbedCols; ++q) acc[q] = __fadd_rn(acc[q], v[k][q]);
  }
  for (; j < end; ++j) {
    const S* src = dout + static_cast<int64_t>(sorted_tokens[j]) * ld + c0;
#pragma unroll
    for (int q = 0; q < kEmbedCols; ++q)
      if (in[q]) acc[q] = __fadd_rn(acc[q], ld1(src + q * blockDim.x));
  }
#pragma unroll
  for (int q = 0; q < kEmbedCols; ++q)
    if (in[q]) row[c0 + q * blockDim.x] = acc[q];
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t tokens) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<int>(tokens));
  return bytes;
}

}  // namespace

cudaError_t axpby(const AxpbyArgs& p, const void* a, const void* b, void* out, cudaStream_t stream) {
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  if (p.a == Ty::BF16) return axpby_b<uint16_t>(p, a, b, out, stream);
  return axpby_b<float>(p, a, b, out, stream);
}

cudaError_t fill(Ty type, int64_t rows, int64_t cols, int64_t ld, uint32_t bits, void* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (type == Ty::BF16) return launch_fill<uint16_t>(type, rows, cols, ld, static_cast<uint16_t>(bits), out, stream);
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return launch_fill<float>(type, rows, cols, ld, value, out, stream);
}

size_t embedding_backward_workspace(int64_t tokens) {
  return 3 * align256(static_cast<size_t>(tokens) * sizeof(int32_t)) + align256(sort_temp_bytes(tokens));
}

cudaError_t embedding_backward(Ty dout_type, int64_t tokens, int64_t vocab, int64_t dim, int64_t ld_dout,
                               const int32_t* ids, const void* dout, float* dtable, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  if (tokens <= 0 || dim <= 0) return cudaSuccess;
  const size_t part = align256(static_cast<size_t>(tokens) * sizeof(int32_t));
  auto* base = static_cast<uint8_t*>(workspace);
  auto* token_index = reinterpret_cast<int32_t*>(base);
  auto* sorted_ids = reinterpret_cast<int32_t*>(base + part);
  auto* sorted_tokens = reinterpret_cast<int32_t*>(base + 2 * part);
  void* temp = base + 3 * part;
  size_t temp_bytes = workspace_bytes - 3 * part;
  const int n = static_cast<int>(tokens);
  iota_kernel<<<static_cast<unsigned>(std::min<int64_t>(ceil_div(tokens, kThreads), 1024)), kThreads, 0, stream>>>(
      n, token_index);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  // All 32 key bits: out-of-range ids then never interleave with a valid id's run.
  err =
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, token_index, sorted_tokens, n, 0, 32, stream);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(ceil_div(dim, kEmbedCols * kThreads)));
  if (dout_type == Ty::BF16)
    embedding_backward_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(
        n, vocab, dim, ld_dout, sorted_ids, sorted_tokens, static_cast<const uint16_t*>(dout), dtable);
  else
    embedding_backward_kernel<float><<<grid, kThreads, 0, stream>>>(n, vocab, dim, ld_dout, sorted_ids, sorted_tokens,
                                                                    static_cast<const float*>(dout), dtable);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::ew
