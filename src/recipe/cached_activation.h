// CachedActivation: a [rows, cols] float32 matrix kept from forward for backward, stored the way the recipe
// says (recipe.h CacheFormat), in Tensors booked with the allocator under MemCategory::ActivationCache — so
// the bytes the run reports as "cached activations" are the bytes actually allocated for them.
//   Fp32:      values  f32 [rows, cols]
//   Bf16:      codes   bf16 [rows, cols]
//   Fp8*/Int8/E5M6Pow2: a quant::QTensor (row-wise payload, row-major scales; quant/qtensor.h gives the code
//              layouts: u8 [rows, cols] E4M3 / INT8 codes, or E5M6 packed 8 per 12 bytes, + f32 scales)
// A quantized cache can also adopt a QTensor the GEMM already made (the Fprop input, reused by Wgrad),
// so nothing is quantized twice.
#pragma once
#include <cstdint>
#include <vector>

#include "quant/quant.h"
#include "recipe/recipe.h"
#include "tensor/tensor.h"

namespace fp8train::recipe {

// The quantization a cache format uses (meaningless for Fp32 / Bf16, which are not block-scaled).
quant::QuantSpec cache_quant_config(CacheFormat format);

class CachedActivation {
 public:
  CachedActivation() = default;

  // Stores x [rows, cols] (row-major, contiguous) in `format`.
  static CachedActivation store(const float* x, int64_t rows, int64_t cols, CacheFormat format,
                                MemCategory category = MemCategory::ActivationCache);
  // Stores a matrix view (any row stride) — copies rows when not contiguous.
  static CachedActivation store(const Tensor& x, CacheFormat format,
                                MemCategory category = MemCategory::ActivationCache);
  // Keeps an already quantized CPU tensor (its row-wise payload, re-booked under `category`; no copy).
  static CachedActivation adopt(const quant::QTensor& q, CacheFormat format,
                                MemCategory category = MemCategory::ActivationCache);

  bool defined() const { return plain_.defined() || q_.defined(); }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  CacheFormat format() const { return format_; }
  bool quantized() const { return format_ != CacheFormat::Fp32 && format_ != CacheFormat::Bf16; }
  // Bytes held by the cache's tensors (values, or codes + scales).
  size_t bytes() const;

  // The float32 values backward sees (dequantized / widened).
  std::vector<float> values() const;
  void values(float* out) const;  // out [rows, cols]
  Tensor to_tensor(MemCategory category = MemCategory::Workspace) const;
  // The quantized form (quantized formats only; throws otherwise).
  const quant::QTensor& quant() const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  CacheFormat format_ = CacheFormat::Fp32;
  Tensor plain_;      // Fp32 / Bf16
  quant::QTensor q_;  // the quantized formats
};

}  // namespace fp8train::recipe
