// Quantizers that are not on the hot 128x128-tile path (quantize_cuda.h has the layouts and arithmetic):
//   quant_blocks_kernel      any block shape and any tensor shape: one CTA per block, amax reduction, then
//                            the block's codes (a second read of the block, mostly from L2);
//   amax_kernel              per-tensor NaN-propagating amax (16-byte loads, one atomicMax per CTA);
//   quant_with_scale_kernel  per-tensor codes with a device-resident {scale, inverse}, fused with the amax
//                            of the tensor it quantizes (delayed scaling);
//   scale_from_amax_kernel, delayed_compute_kernel, delayed_push_kernel: one-CTA bookkeeping kernels.
#include "ops/cuda/quant_device.cuh"
#include "ops/cuda/quant_launch.h"

namespace fp8train::ops::cuda::detail {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t block_reduce_max(uint32_t m, uint32_t* smem /* [kThreads / 32] */) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // smem may still be read from a previous reduction
  if (lane == 0) smem[warp] = m;
  __syncthreads();
  m = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) m = max(m, smem[w]);
  return m;
}

template <quant::Format F>
__device__ __forceinline__ uint8_t encode_one(float v, bool stochastic, uint64_t seed, uint64_t index, Encoder e) {
  if (F == quant::Format::INT8 && stochastic) return static_cast<uint8_t>(encode_int8_stochastic(v, seed, index));
  return static_cast<uint8_t>(e == Encoder::Hardware ? encode2<F, Encoder::Hardware>(v, 0.0f)
                                                     : encode2<F, Encoder::Software>(v, 0.0f));
}

template <InType IT, quant::Format F>
__global__ void __launch_bounds__(kThreads) quant_blocks_kernel(const QuantBlocksArgs a) {
  __shared__ uint32_t red[kThreads / 32];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * a.block_rows;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * a.block_cols;
  const int64_t nr = min(a.block_rows, a.rows - r0), nc = min(a.block_cols, a.cols - c0);
  const int64_t n = nr * nc;
  uint32_t m = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t r = r0 + i / nc, c = c0 + i % nc;
    m = max(m, abs_bits(load_one<IT>(a.x, r * a.cols + c)));
  }
  m = block_reduce_max(m, red);
  const ScaleInverse s = block_scale_dev(__uint_as_float(m), FormatTraits<F>::kMax, a.opt.pow2_scales);
  if (threadIdx.x == 0) a.scales[blockIdx.y * a.strides.row + blockIdx.x * a.strides.col] = s.scale;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t r = r0 + i / nc, c = c0 + i % nc;
    const int64_t idx = r * a.cols + c;
    a.q[idx] = encode_one<F>(load_one<IT>(a.x, idx) * s.inverse, a.opt.stochastic, a.opt.seed,
                             static_cast<uint64_t>(idx), a.opt.encoder);
  }
}

// Flat views: n elements; vector path when n % 8 == 0 and x is 16-byte aligned (checked by the launcher).
template <InType IT, bool kVec>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* x, int64_t n, uint32_t* amax_bits) {
  __shared__ uint32_t red[kThreads / 32];
  uint32_t m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  if constexpr (kVec) {
    for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < n / 8; g += stride) {
      Vec8<IT> v;
      v.load(x, 8 * g);
#pragma unroll
      for (int j = 0; j < 8; ++j) m = max(m, abs_bits(v.get(j)));
    }
  } else {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
      m = max(m, abs_bits(load_one<IT>(x, i)));
  }
  m = block_reduce_max(m, red);
  if (threadIdx.x == 0 && m != 0) atomicMax(amax_bits, m);
}

template <InType IT, quant::Format F, Encoder E, bool kVec>
__global__ void __launch_bounds__(kThreads) quant_with_scale_kernel(const QuantWithScaleArgs a) {
  __shared__ uint32_t red[kThreads / 32];
  const float scale = a.scale_inverse[0], inv = a.scale_inverse[1];
  const int64_t n = a.rows * a.cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  uint32_t m = 0;
  if constexpr (kVec) {
    for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < n / 8; g += stride) {
      Vec8<IT> v;
      v.load(a.x, 8 * g);
      uint32_t w[2] = {0, 0};
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        const float lo = v.get(j), hi = v.get(j + 1);
        m = max(m, max(abs_bits(lo), abs_bits(hi)));
        uint32_t pair;
        if (F == quant::Format::INT8 && a.opt.stochastic) {
          pair = encode_int8_stochastic(lo * inv, a.opt.seed, 8 * g + j) |
                 (encode_int8_stochastic(hi * inv, a.opt.seed, 8 * g + j + 1) << 8);
        } else {
          pair = encode2<F, E>(lo * inv, hi * inv);
        }
        w[j >> 2] |= pair << (8 * (j & 3));
      }
      *reinterpret_cast<uint2*>(a.q + 8 * g) = make_uint2(w[0], w[1]);
    }
  } else {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
      const float v = load_one<IT>(a.x, i);
      m = max(m, abs_bits(v));
      a.q[i] = encode_one<F>(v * inv, a.opt.stochastic, a.opt.seed, static_cast<uint64_t>(i), E);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.scale_out = scale;
  if (a.amax_bits != nullptr) {
    m = block_reduce_max(m, red);
    if (threadIdx.x == 0 && m != 0) atomicMax(a.amax_bits, m);
  }
}

__global__ void scale_from_amax_kernel(const uint32_t* amax_bits, float fmax, bool pow2, float* scale_inverse) {
  const ScaleInverse s = block_scale_dev(__uint_as_float(*amax_bits), fmax, pow2);
  scale_inverse[0] = s.scale;
  scale_inverse[1] = s.inverse;
}

// quant::AmaxHistory::scale on the device (quant.h): reference amax of the window, margin, then step 3.
__global__ void __launch_bounds__(kThreads) delayed_compute_kernel(const DeviceAmaxHistoryView h, float fmax,
                                                                   bool pow2, float* scale_inverse) {
  __shared__ uint32_t red[kThreads / 32];
  const int size = h.state[0], next = h.state[1];
  uint32_t m = 0;
  if (h.most_recent) {
    if (size > 0 && threadIdx.x == 0) m = __float_as_uint(h.entries[(next - 1 + h.length) % h.length]);
  } else {
    for (int i = threadIdx.x; i < size; i += kThreads) m = max(m, __float_as_uint(h.entries[i]));  // entries >= 0
  }
  m = block_reduce_max(m, red);
  if (threadIdx.x != 0) return;
  const float reference = __uint_as_float(m);
  if (reference == 0.0f) {
    scale_inverse[0] = 1.0f;
    scale_inverse[1] = 1.0f;
    return;
  }
  float amax = __fmul_rn(reference, ldexpf(1.0f, h.margin));  // exact power-of-two multiply, one rounding
  if (amax < kMinAmaxDev) amax = kMinAmaxDev;
  const ScaleInverse s = block_scale_dev(amax, fmax, pow2);
  scale_inverse[0] = s.scale;
  scale_inverse[1] = s.inverse;
}

__global__ void delayed_push_kernel(const DeviceAmaxHistoryView h, const uint32_t* amax_bits) {
  const float a = __uint_as_float(*amax_bits);
  if (!(a >= 0.0f && a <= 3.402823466e38f)) {  // negative, Inf or NaN: refuse, like AmaxHistory::push
    h.state[2] = 1;
    return;
  }
  const int next = h.state[1];
  h.entries[next] = a;
  h.state[1] = (next + 1) % h.length;
  h.state[0] = min(h.state[0] + 1, h.length);
}

int grid_for(int64_t work_items) {
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 132 * 16 ? 132 * 16 : blocks));
}

template <quant::Format F>
cudaError_t blocks_by_type(const QuantBlocksArgs& a, dim3 grid, cudaStream_t s) {
  if (a.x_type == InType::BF16) quant_blocks_kernel<InType::BF16, F><<<grid, kThreads, 0, s>>>(a);
  else quant_blocks_kernel<InType::F32, F><<<grid, kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

template <InType IT, quant::Format F, Encoder E>
cudaError_t with_scale_vec(const QuantWithScaleArgs& a, bool vec, cudaStream_t s) {
  const int64_t n = a.rows * a.cols;
  if (vec) quant_with_scale_kernel<IT, F, E, true><<<grid_for(n / 8), kThreads, 0, s>>>(a);
  else quant_with_scale_kernel<IT, F, E, false><<<grid_for(n), kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

template <InType IT>
cudaError_t with_scale_fmt(const QuantWithScaleArgs& a, bool vec, cudaStream_t s) {
  const bool hw = a.opt.encoder == Encoder::Hardware;
  switch (a.opt.format) {
    case quant::Format::E4M3:
      return hw ? with_scale_vec<IT, quant::Format::E4M3, Encoder::Hardware>(a, vec, s)
                : with_scale_vec<IT, quant::Format::E4M3, Encoder::Software>(a, vec, s);
    case quant::Format::E5M2:
      return hw ? with_scale_vec<IT, quant::Format::E5M2, Encoder::Hardware>(a, vec, s)
                : with_scale_vec<IT, quant::Format::E5M2, Encoder::Software>(a, vec, s);
    case quant::Format::INT8: return with_scale_vec<IT, quant::Format::INT8, Encoder::Software>(a, vec, s);
    default: break;  // E5M6 / BF16: no one-byte kernel
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_quant_blocks(const QuantBlocksArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.cols + a.block_cols - 1) / a.block_cols),
                  static_cast<unsigned>((a.rows + a.block_rows - 1) / a.block_rows));
  switch (a.opt.format) {
    case quant::Format::E4M3: return blocks_by_type<quant::Format::E4M3>(a, grid, stream);
    case quant::Format::E5M2: return blocks_by_type<quant::Format::E5M2>(a, grid, stream);
    case quant::Format::INT8: return blocks_by_type<quant::Format::INT8>(a, grid, stream);
    default: break;  // E5M6 / BF16: no one-byte kernel
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_scale_from_amax(const uint32_t* amax_bits, float fmax, bool pow2, float* scale_inverse,
                                   cudaStream_t stream) {
  scale_from_amax_kernel<<<1, 1, 0, stream>>>(amax_bits, fmax, pow2, scale_inverse);
  return cudaGetLastError();
}

cudaError_t launch_amax(const void* x, InType x_type, int64_t n, uint32_t* amax_bits, cudaStream_t stream) {
  const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int grid = grid_for(vec ? n / 8 : n);
  if (x_type == InType::BF16) {
    if (vec) amax_kernel<InType::BF16, true><<<grid, kThreads, 0, stream>>>(x, n, amax_bits);
    else amax_kernel<InType::BF16, false><<<grid, kThreads, 0, stream>>>(x, n, amax_bits);
  } else {
    if (vec) amax_kernel<InType::F32, true><<<grid, kThreads, 0, stream>>>(x, n, amax_bits);
    else amax_kernel<InType::F32, false><<<grid, kThreads, 0, stream>>>(x, n, amax_bits);
  }
  return cudaGetLastError();
}

cudaError_t launch_quant_with_scale(const QuantWithScaleArgs& a, cudaStream_t stream) {
  const bool vec = (a.rows * a.cols) % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.q) % 8 == 0;
  return a.x_type == InType::BF16 ? with_scale_fmt<InType::BF16>(a, vec, stream)
                                  : with_scale_fmt<InType::F32>(a, vec, stream);
}

cudaError_t launch_delayed_compute(const DeviceAmaxHistoryView& h, float fmax, bool pow2, float* scale_inverse,
                                   cudaStream_t stream) {
  delayed_compute_kernel<<<1, kThreads, 0, stream>>>(h, fmax, pow2, scale_inverse);
  return cudaGetLastError();
}

cudaError_t launch_delayed_push(const DeviceAmaxHistoryView& h, const uint32_t* amax_bits, cudaStream_t stream) {
  delayed_push_kernel<<<1, 1, 0, stream>>>(h, amax_bits);
  return cudaGetLastError();
}

}  // namespace fp8train::ops::cuda::detail
