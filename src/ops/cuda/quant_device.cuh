// Device helpers shared by the quantization kernels: loading float32/bf16 vectors, NaN-propagating amax on
// float bits, the block scale of quant.h (steps 2-3 of its exact arithmetic) and the code encoders.
// Included by .cu files of src/ops/cuda only.
#pragma once
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/formats.h"
#include "ops/cuda/quantize_cuda.h"

namespace fp8train::ops::cuda::detail {

// quant::kMinAmax (2^-100), repeated here because quant.h's constant is not a device symbol.
constexpr float kMinAmaxDev = 7.888609052210118e-31f;
constexpr uint32_t kAbsMask = 0x7FFFFFFFu;

// max over |x| as unsigned float bits: for non-negative floats the bit order is the value order and every
// NaN is above +Inf, so the max of the bits is the float max with NaN propagating (quant::amax_of's rule).
__device__ __forceinline__ uint32_t abs_bits(float x) { return __float_as_uint(x) & kAbsMask; }

struct ScaleInverse {
  float scale;
  float inverse;
};

// quant.h steps 2-3. __fdiv_rn is the IEEE round-to-nearest float32 division the CPU performs.
__device__ __forceinline__ ScaleInverse block_scale_dev(float amax, float fmax, bool pow2) {
  const float amax_eff = amax < kMinAmaxDev ? kMinAmaxDev : amax;  // NaN compares false and stays NaN
  if (!pow2) return {__fdiv_rn(amax_eff, fmax), __fdiv_rn(fmax, amax_eff)};
  const uint8_t u = num::ue8m0_ceil(__fdiv_rn(amax_eff, fmax));
  if (u == num::kUE8M0NaN) return {__uint_as_float(0x7FC00000u), __uint_as_float(0x7FC00000u)};
  // 2^(u-127) and 2^(127-u), both from exponent bits (ue8m0_decode(0) is the subnormal 2^-127).
  return {num::ue8m0_decode(u), num::ue8m0_decode(static_cast<uint8_t>(254 - u))};
}

template <quant::Format F>
struct FormatTraits;
template <>
struct FormatTraits<quant::Format::E4M3> {
  static constexpr float kMax = 448.0f;
};
template <>
struct FormatTraits<quant::Format::E5M2> {
  static constexpr float kMax = 57344.0f;
};
template <>
struct FormatTraits<quant::Format::INT8> {
  static constexpr float kMax = 127.0f;
};

// Encodes two already-scaled values; returns code(lo) in bits 0-7 and code(hi) in bits 8-15.
// INT8 ignores Encoder (int8_encode_rne's arithmetic on float bits, checked on all 2^32 inputs by the GPU tests).
template <quant::Format F, Encoder E>
__device__ __forceinline__ uint32_t encode2(float lo, float hi) {
  if constexpr (F == quant::Format::INT8) {
    // num::int8_encode_rne's arithmetic: NaN -> 0, clamp to [-127, 127], then adding 1.5 * 2^23 rounds to an
    // integer with ties to even; that integer is the low byte of the sum's bits (two's complement).
    const float a = fminf(fmaxf(lo == lo ? lo : 0.0f, -127.0f), 127.0f);
    const float b = fminf(fmaxf(hi == hi ? hi : 0.0f, -127.0f), 127.0f);
    const uint32_t ra = __float_as_uint(__fadd_rn(a, 12582912.0f));
    const uint32_t rb = __float_as_uint(__fadd_rn(b, 12582912.0f));
    return __byte_perm(ra, rb, 0x7740) & 0xFFFFu;
  } else if constexpr (E == Encoder::Hardware) {
    const __nv_fp8x2_storage_t s = __nv_cvt_float2_to_fp8x2(
        make_float2(lo, hi), __NV_SATFINITE, F == quant::Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
    return static_cast<uint32_t>(s);
  } else if constexpr (F == quant::Format::E4M3) {
    return static_cast<uint32_t>(num::e4m3_encode(lo)) | (static_cast<uint32_t>(num::e4m3_encode(hi)) << 8);
  } else {
    return static_cast<uint32_t>(num::e5m2_encode(lo)) | (static_cast<uint32_t>(num::e5m2_encode(hi)) << 8);
  }
}

// INT8 stochastic rounding of one scaled value at flat index `index` of x (quant.h step 4).
__device__ __forceinline__ uint32_t encode_int8_stochastic(float v, uint64_t seed, uint64_t index) {
  return static_cast<uint32_t>(static_cast<uint8_t>(num::int8_encode_stochastic(v, num::counter_random_u32(seed, index))));
}

// Eight consecutive input elements as float32.
template <InType T>
struct Vec8;
template <>
struct Vec8<InType::BF16> {
  uint4 raw;  // 8 bf16 codes
  __device__ __forceinline__ void load(const void* base, int64_t elem) {
    raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + elem));
  }
  __device__ __forceinline__ void zero() { raw = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ float get(int i) const {
    const uint32_t w = i < 2 ? raw.x : i < 4 ? raw.y : i < 6 ? raw.z : raw.w;
    return (i & 1) ? __uint_as_float(w & 0xFFFF0000u) : __uint_as_float(w << 16);
  }
};
template <>
struct Vec8<InType::F32> {
  float4 a, b;
  __device__ __forceinline__ void load(const void* base, int64_t elem) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + elem);
    a = __ldg(p);
    b = __ldg(p + 1);
  }
  __device__ __forceinline__ void zero() { a = b = make_float4(0.f, 0.f, 0.f, 0.f); }
  __device__ __forceinline__ float get(int i) const {
    switch (i) {
      case 0: return a.x;
      case 1: return a.y;
      case 2: return a.z;
      case 3: return a.w;
      case 4: return b.x;
      case 5: return b.y;
      case 6: return b.z;
      default: return b.w;
    }
  }
};

// Loads one input element (any alignment) as float32.
template <InType T>
__device__ __forceinline__ float load_one(const void* base, int64_t elem) {
  if constexpr (T == InType::BF16) {
    return __uint_as_float(static_cast<uint32_t>(__ldg(static_cast<const unsigned short*>(base) + elem)) << 16);
  } else {
    return __ldg(static_cast<const float*>(base) + elem);
  }
}

}  // namespace fp8train::ops::cuda::detail
