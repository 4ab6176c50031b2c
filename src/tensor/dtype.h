// Element types a Tensor can hold, and the compile-time mapping from C++ types to them.
//   F32/F64: compute and master weights (F64 only for gradient checks); BF16: uint16 codes (numerics/formats.h);
//   U8: FP8 codes (E4M3/E5M2, the format lives in a QuantTensor beside them); U16: E5M6 codes;
//   I32/I64: token ids, expert indices, counts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fp8train {

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

// dtype_of<T>(): the DType that stores a C++ element type T (BF16 is stored as uint16_t codes and has no
// distinct C++ type here, so uint16_t maps to U16; BF16 tensors are reached through raw codes).
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }

}  // namespace fp8train
