// CachedActivation (cached_activation.h): store / adopt / read back a cached activation in the recipe's
// format, with the storage booked under the allocator's ActivationCache category. CPU tensors only for now
// (a CUDA port keeps the same layouts).
#include "recipe/cached_activation.h"

#include <cstring>

#include "common/error.h"
#include "numerics/formats.h"

namespace fp8train::recipe {

quant::QuantSpec cache_quant_config(CacheFormat format) {
  using quant::Format;
  using quant::Granularity;
  using quant::ScaleMode;
  switch (format) {
    case CacheFormat::Fp8: return {Format::E4M3, Granularity::tile_1x128(), ScaleMode::Amax, quant::Rounding::Nearest, 0};
    case CacheFormat::Fp8Pow2:
      return {Format::E4M3, Granularity::tile_1x128(), ScaleMode::PowerOfTwo, quant::Rounding::Nearest, 0};
    case CacheFormat::E5M6Pow2:
      return {Format::E5M6, Granularity::tile_1x128(), ScaleMode::PowerOfTwo, quant::Rounding::Nearest, 0};
    case CacheFormat::Int8: return {Format::INT8, Granularity::tile_1x128(), ScaleMode::Amax, quant::Rounding::Nearest, 0};
    case CacheFormat::Fp8Tensor:
      return {Format::E4M3, Granularity::tensor(), ScaleMode::Amax, quant::Rounding::Nearest, 0};
    case CacheFormat::Fp32:
    case CacheFormat::Bf16: break;
  }
  FP8T_FAIL("cache format {} is not block-scaled", cache_format_name(format));
}

namespace {
// The quant format a CachedActivation of `format` must hold (for adopt()).
bool matches(const quant::QTensor& q, CacheFormat format) {
  const quant::QuantSpec c = cache_quant_config(format);
  return q.format() == c.format && q.granularity() == c.granularity;
}
}  // namespace

CachedActivation CachedActivation::store(const float* x, int64_t rows, int64_t cols, CacheFormat format,
                                         MemCategory category) {
  FP8T_CHECK(rows >= 0 && cols >= 0, "cached activation: bad shape [{}, {}]", rows, cols);
  CachedActivation c;
  c.rows_ = rows;
  c.cols_ = cols;
  c.format_ = format;
  const int64_t n = rows * cols;
  if (format == CacheFormat::Fp32) {
    c.plain_ = Tensor::empty({rows, cols}, DType::F32, category, Device::cpu());
    if (n > 0) std::memcpy(c.plain_.raw(), x, static_cast<size_t>(n) * sizeof(float));
  } else if (format == CacheFormat::Bf16) {
    c.plain_ = Tensor::empty({rows, cols}, DType::BF16, category, Device::cpu());
    auto* out = static_cast<uint16_t*>(c.plain_.raw());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = num::bf16_encode(x[i]);
  } else {
    return adopt(quant::quantize(x, rows, cols, cache_quant_config(format)), format, category);
  }
  return c;
}

CachedActivation CachedActivation::store(const Tensor& x, CacheFormat format, MemCategory category) {
  FP8T_CHECK(x.defined() && x.is_matrix() && x.dtype() == DType::F32 && x.device().is_cpu(),
             "cached activation: expected a 2-D f32 matrix view on the cpu, got {}", x.defined() ? x.str() : "undefined");
  const int64_t rows = x.size(0), cols = x.size(1);
  if (x.is_contiguous()) return store(x.data<float>(), rows, cols, format, category);
  std::vector<float> packed(static_cast<size_t>(rows * cols));
  const float* base = x.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(packed.data() + r * cols, base + r * x.ld(), static_cast<size_t>(cols) * sizeof(float));
  return store(packed.data(), rows, cols, format, category);
}

CachedActivation CachedActivation::adopt(const quant::QTensor& q, CacheFormat format, MemCategory category) {
  FP8T_CHECK(format != CacheFormat::Fp32 && format != CacheFormat::Bf16 && matches(q, format),
             "cached activation: a {} {} tensor cannot be kept as {}", quant::format_name(q.format()),
             q.granularity().name(), cache_format_name(format));
  FP8T_CHECK(q.rowwise.defined() && q.device().is_cpu() && q.groups == 1,
             "cached activation: adopt keeps a single-group CPU tensor with a row-wise payload");
  CachedActivation c;
  c.rows_ = q.rows;
  c.cols_ = q.cols;
  c.format_ = format;
  c.q_ = q.rowwise_only();
  c.q_.set_category(category);
  return c;
}

size_t CachedActivation::bytes() const {
  if (plain_.defined()) return plain_.nbytes();
  return q_.defined() ? q_.bytes() : 0;
}

const quant::QTensor& CachedActivation::quant() const {
  FP8T_CHECK(quantized(), "cached activation in {} has no quantized form", cache_format_name(format_));
  return q_;
}

void CachedActivation::values(float* out) const {
  const int64_t n = rows_ * cols_;
  if (format_ == CacheFormat::Fp32) {
    if (n > 0) std::memcpy(out, plain_.raw(), static_cast<size_t>(n) * sizeof(float));
  } else if (format_ == CacheFormat::Bf16) {
    const auto* in = static_cast<const uint16_t*>(plain_.raw());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = num::bf16_decode(in[i]);
  } else {
    quant::dequantize(q_, out);
  }
}

std::vector<float> CachedActivation::values() const {
  std::vector<float> out(static_cast<size_t>(rows_ * cols_));
  values(out.data());
  return out;
}

Tensor CachedActivation::to_tensor(MemCategory category) const {
  Tensor t = Tensor::empty({rows_, cols_}, DType::F32, category, Device::cpu());
  values(t.data<float>());
  return t;
}

}  // namespace fp8train::recipe
