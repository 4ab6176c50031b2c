// CachedActivation: a [rows, cols] float32 matrix kept from forward for backward, stored the way the recipe
// says (recipe.h CacheFormat), in Tensors booked with the allocator under MemCategory::ActivationCache — so
// the bytes the run reports as "cached activations" are the bytes actually allocated for them.
//   Fp32:      values  f32 [rows, cols]
//   Bf16:      codes   bf16 [rows, cols] (uint16 codes)
//   Fp8*/Int8: codes   u8 [rows, cols] (E4M3 / INT8 codes) + scales f32 [scale_rows, scale_cols]
//   E5M6Pow2:  codes   u8 [12 * ceil(rows·cols / 8)] (8 codes per 12 bytes, quant.h) + scales f32
// A quantized cache can also adopt a QuantTensor the GEMM already made (the Fprop input, reused by Wgrad),
// so nothing is quantized twice.
#pragma once
#include <cstdint>
#include <vector>

#include "quant/quant.h"
#include "recipe/recipe.h"
#include "tensor/tensor.h"

namespace fp8train::recipe {

// The quantization a cache format uses (meaningless for Fp32 / Bf16, which are not block-scaled).
quant::QuantConfig cache_quant_config(CacheFormat format);

class CachedActivation {
 public:
  CachedActivation() = default;

  // Stores x [rows, cols] (row-major, contiguous) in `format`.
  static CachedActivation store(const float* x, int64_t rows, int64_t cols, CacheFormat format,
                                MemCategory category = MemCategory::ActivationCache);
  // Stores a matrix view (any row stride) — copies rows when not contiguous.
  static CachedActivation store(const Tensor& x, CacheFormat format,
                                MemCategory category = MemCategory::ActivationCache);
  // Keeps an already quantized tensor (its codes and scales are copied into booked Tensors).
  static CachedActivation adopt(const quant::QuantTensor& q, CacheFormat format,
                                MemCategory category = MemCategory::ActivationCache);

  bool defined() const { return codes_.defined(); }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  CacheFormat format() const { return format_; }
  bool quantized() const { return format_ != CacheFormat::Fp32 && format_ != CacheFormat::Bf16; }
  // Bytes held by the cache's tensors (codes + scales).
  size_t bytes() const;
  const Tensor& codes() const { return codes_; }
  const Tensor& scales() const { return scales_; }

  // The float32 values backward sees (dequantized / widened).
  std::vector<float> values() const;
  void values(float* out) const;  // out [rows, cols]
  Tensor to_tensor(MemCategory category = MemCategory::Workspace) const;
  // The quantized form (quantized formats only; throws otherwise).
  quant::QuantTensor quant() const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  CacheFormat format_ = CacheFormat::Fp32;
  Tensor codes_;   // see the layouts above
  Tensor scales_;  // quantized formats only
};

}  // namespace fp8train::recipe
