// The Tensor-level hook of fp8train's own FP8 GEMMs (fp8_gemm.h: fp8_gemm_try_own), called by the tier-3
// entry point ops::cuda::scaled_gemm (tensor_ops.cpp) before it falls back to cuBLASLt: the block-scaled
// DeepSeek-V3 forms run on our kernels when the backend choice is Own (the default on sm_90). Kept apart from
// fp8_gemm_dispatch.cpp so the raw-pointer launchers build without the tensor layer.
#include <cstdint>

#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/tensor_ops.h"

namespace fp8train::ops::cuda {

bool fp8_gemm_try_own(const GpuQuantized& a, const GpuQuantized& b, void* out, bool out_is_f32, bool accumulate,
                      bool fast_accum, cudaStream_t stream) {
  if (fp8_gemm_backend() != Fp8GemmBackend::Own || fast_accum) return false;
  if (a.format != quant::Format::E4M3 || b.format != quant::Format::E4M3) return false;
  if (a.granularity != quant::Granularity::tile_1x128()) return false;
  const bool fprop = b.granularity == quant::Granularity::block_128x128() && !out_is_f32 && !accumulate;
  const bool wgrad = b.granularity == quant::Granularity::tile_1x128() && out_is_f32;
  if (!fprop && !wgrad) return false;
  const int64_t m = a.rows, n = b.rows, k = a.cols;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (m <= 0 || k % 128 != 0 || n % 16 != 0 || !aligned(a.codes.raw()) || !aligned(b.codes.raw()) || !aligned(out))
    return false;
  const ScaleView sa{a.scales.data<float>(), a.strides.row, a.strides.col, 0};
  const ScaleView sb{b.scales.data<float>(), b.strides.row, b.strides.col, 0};
  if (fprop) {
    Fp8GemmDenseProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = static_cast<const uint8_t*>(a.codes.raw());
    p.a_scales = sa;
    p.b = static_cast<const uint8_t*>(b.codes.raw());
    p.b_scales = sb;
    p.d = static_cast<uint16_t*>(out);
    fp8_gemm_dense(p, Fp8GemmConfig{}, stream);
  } else {
    Fp8GemmWgradProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = static_cast<const uint8_t*>(a.codes.raw());
    p.a_scales = sa;
    p.b = static_cast<const uint8_t*>(b.codes.raw());
    p.b_scales = sb;
    p.c = accumulate ? static_cast<const float*>(out) : nullptr;
    p.d = static_cast<float*>(out);
    fp8_gemm_wgrad(p, Fp8GemmConfig{}, stream);
  }
  return true;
}

}  // namespace fp8train::ops::cuda
