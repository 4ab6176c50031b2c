// Device side of encoder_exhaustive_test.cpp: walks all 2^32 float32 bit patterns and compares the
// hardware FP8 conversion (cvt.rn.satfinite.{e4m3,e5m2}x2.f32) and the INT8 float->int path used by the
// kernels with the software encoders of numerics/formats.h that the CPU reference uses.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/e5m6_fast.h"
#include "ops/cuda/quant_device.cuh"

namespace fp8train::gputest {
namespace {
using ops::cuda::Encoder;
using ops::cuda::detail::encode2;

// checks: 0 e4m3 (low byte), 1 e4m3 (high byte), 2 e5m2 low, 3 e5m2 high, 4 int8 low, 5 int8 high,
// 6 e5m6 fast encoder, 7 e5m6 fast decoder (the 4096 codes), 8 control: e4m3 vs e5m2 bytes (must differ often,
// proving the loop ran).
__device__ __forceinline__ void report(unsigned long long* counts, uint32_t* first, int check, uint32_t u) {
  atomicAdd(counts + check, 1ull);
  atomicMin(first + check, u);
}

__global__ void exhaustive_kernel(unsigned long long* counts, uint32_t* first) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float lo = __uint_as_float(u);
    const float hi = __uint_as_float(u ^ 0x80000000u);  // the same magnitude with the other sign in the high slot
    const uint32_t e4_hw = encode2<quant::Format::E4M3, Encoder::Hardware>(lo, hi);
    const uint32_t e4_sw = encode2<quant::Format::E4M3, Encoder::Software>(lo, hi);
    if ((e4_hw & 0xFF) != (e4_sw & 0xFF)) report(counts, first, 0, u);
    if ((e4_hw >> 8) != (e4_sw >> 8)) report(counts, first, 1, u);
    const uint32_t e5_hw = encode2<quant::Format::E5M2, Encoder::Hardware>(lo, hi);
    const uint32_t e5_sw = encode2<quant::Format::E5M2, Encoder::Software>(lo, hi);
    if ((e5_hw & 0xFF) != (e5_sw & 0xFF)) report(counts, first, 2, u);
    if ((e5_hw >> 8) != (e5_sw >> 8)) report(counts, first, 3, u);
    const uint32_t i8 = encode2<quant::Format::INT8, Encoder::Hardware>(lo, hi);
    if ((i8 & 0xFF) != static_cast<uint8_t>(num::int8_encode_rne(lo))) report(counts, first, 4, u);
    if ((i8 >> 8) != static_cast<uint8_t>(num::int8_encode_rne(hi))) report(counts, first, 5, u);
    // The E5M6 kernel's encoder: in its range it must be the reference.
    if (ops::cuda::detail::e5m6_unsaturated_range(lo) &&
        ops::cuda::detail::e5m6_encode_unsaturated(lo) != num::e5m6_encode(lo))
      report(counts, first, 6, u);
    if (u < 4096) {
      const uint16_t code = static_cast<uint16_t>(u);
      const uint32_t want = __float_as_uint(num::e5m6_decode(code));
      if (__float_as_uint(ops::cuda::detail::e5m6_decode_fast(code)) != want) report(counts, first, 7, u);
      // The unpack kernel's hardware path (fp16 widening of code << 4) for codes that are not Inf/NaN.
      if ((code & 0x7C0u) != 0x7C0u &&
          __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(code << 4)))) != want)
        report(counts, first, 7, u);
    }
    if ((e4_hw & 0xFF) != (e5_sw & 0xFF)) atomicAdd(counts + 8, 1ull);
  }
}
}  // namespace

cudaError_t run_encoder_exhaustive(unsigned long long* counts, uint32_t* first) {
  exhaustive_kernel<<<132 * 8, 256>>>(counts, first);
  return cudaGetLastError();
}

}  // namespace fp8train::gputest
