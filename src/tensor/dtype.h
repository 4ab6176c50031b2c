// Element types a Tensor can hold, and the compile-time mapping from C++ types to them.
//   F32/F64: compute and master weights (F64 only for gradient checks); BF16: a storage type (`bf16`, the upper
//   16 bits of an FP32, rounded to nearest even) -- ops read it, compute in FP32 and round their outputs back;
//   U8: FP8/INT8 codes (the format lives in the QTensor beside them); U16: E5M6 codes;
//   I32/I64: token ids, expert indices, counts.
// Storage vs compute: ops take activations in a storage dtype (F32, BF16 or F64) and compute in its compute
// dtype (F32 for F32 and BF16, F64 for F64); everything an op keeps beside the activations (statistics,
// norm gains, router scores, losses) is in the compute dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "numerics/formats.h"

namespace fp8train {

// One BF16 value as stored: its 16-bit code. Conversions round to nearest even (num::bf16_encode) and keep
// NaN a NaN; bf16 -> float is exact.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  FP8T_HD explicit bf16(float x) : bits(num::bf16_encode(x)) {}
  FP8T_HD static bf16 from_bits(uint16_t b) {
    bf16 v;
    v.bits = b;
    return v;
  }
  FP8T_HD explicit operator float() const { return num::bf16_decode(bits); }
};
static_assert(sizeof(bf16) == 2);

enum class DType : uint8_t { F32, F64, BF16, U8, U16, I32, I64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    case DType::U16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::U8: return "u8";
    case DType::U16: return "u16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::F32 || t == DType::F64; }
// A floating storage dtype: F32, F64 or BF16.
constexpr bool is_float_storage(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }
// The dtype arithmetic on a storage dtype runs in (and what an op keeps beside BF16 activations): F64 for F64,
// F32 otherwise.
constexpr DType compute_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// dtype_of<T>(): the DType that stores a C++ element type T (bf16 -> BF16; uint16_t -> U16, the E5M6 codes).
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }

}  // namespace fp8train
