// Quantization arithmetic on the CPU (quant.h): quantize / dequantize / retile / transpose into and out of
// QTensors, their raw-pointer forms, and the delayed-scaling amax history. The float32 arithmetic is the one
// pinned down in quant.h (compiled with -ffp-contract=off so no multiply-add is fused behind our back).
#include "quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "numerics/formats.h"

namespace fp8train::quant {

namespace {
// 2^e for e in the normal float32 range.
float pow2(int e) { return num::bits_float(static_cast<uint32_t>(e + 127) << 23); }

void check_shape(int64_t rows, int64_t cols, const void* x) {
  FP8T_CHECK(rows >= 0 && cols >= 0, "quantize: shape [{}, {}] has a negative dimension", rows, cols);
  FP8T_CHECK(rows * cols == 0 || x != nullptr, "quantize: null input for a [{}, {}] tensor", rows, cols);
}

// Encodes x[r][c0..c1) * inverse into the 16-bit code buffer (E5M6 staging) or straight into codes.
// The stochastic-rounding counter of element (r, c) is counter_base + r * cols + c.
void encode_row_span(const float* x, int64_t r, int64_t c0, int64_t c1, int64_t cols, float inverse,
                     Format format, Rounding rounding, uint64_t seed, uint64_t counter_base, uint8_t* codes,
                     uint16_t* staged) {
  const float* xr = x + r * cols;
  const int64_t base = r * cols;
  switch (format) {
    case Format::E4M3:
      for (int64_t c = c0; c < c1; ++c) codes[base + c] = num::e4m3_encode_fast(xr[c] * inverse);
      return;
    case Format::E5M2:
      for (int64_t c = c0; c < c1; ++c) codes[base + c] = num::e5m2_encode_fast(xr[c] * inverse);
      return;
    case Format::INT8:
      if (rounding == Rounding::Stochastic) {
        for (int64_t c = c0; c < c1; ++c)
          codes[base + c] = static_cast<uint8_t>(num::int8_encode_stochastic(
              xr[c] * inverse, num::counter_random_u32(seed, counter_base + static_cast<uint64_t>(base + c))));
      } else {
        for (int64_t c = c0; c < c1; ++c) codes[base + c] = static_cast<uint8_t>(num::int8_encode_rne(xr[c] * inverse));
      }
      return;
    case Format::BF16:
      for (int64_t c = c0; c < c1; ++c) {
        const uint16_t v = num::bf16_encode(xr[c]);
        codes[2 * (base + c)] = static_cast<uint8_t>(v & 0xFF);
        codes[2 * (base + c) + 1] = static_cast<uint8_t>(v >> 8);
      }
      return;
    case Format::E5M6:
      for (int64_t c = c0; c < c1; ++c) staged[base + c] = num::e5m6_encode(xr[c] * inverse);
      return;
  }
}

// Packs n staged 12-bit codes into out (zero-padded last group).
void pack_e5m6(const uint16_t* staged, int64_t n, uint8_t* out) {
  const int64_t groups = (n + 7) / 8;
#pragma omp parallel for schedule(static) if (groups > 4096)
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < 8 && 8 * g + i < n; ++i) c[i] = staged[8 * g + i];
    uint32_t words[3];
    num::e5m6_pack8(c, words);
    std::memcpy(out + 12 * g, words, 12);
  }
}

// A CPU tensor with a row-wise payload, RowMajor scales, every scale 1 (what an empty tensor keeps).
QTensor make_tensor(int64_t rows, int64_t cols, Format format, Granularity g) {
  QuantSpec spec;
  spec.format = format;
  spec.granularity = g;
  QTensor q = QTensor::empty(spec, rows, cols, 1, true, false, ScaleLayout::RowMajor, Device::cpu());
  float* s = q.scale_ptr();
  std::fill(s, s + q.rowwise.scales.numel(), 1.0f);
  return q;
}

// Encodes the whole tensor with one inverse scale (per-tensor and delayed scaling).
void encode_tensor(const float* x, int64_t rows, int64_t cols, Format format, float inverse, Rounding rounding,
                   uint64_t seed, uint64_t counter_base, uint8_t* codes) {
  std::vector<uint16_t> staged(format == Format::E5M6 ? static_cast<size_t>(rows * cols) : 0);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r)
    encode_row_span(x, r, 0, cols, cols, inverse, format, rounding, seed, counter_base, codes, staged.data());
  if (format == Format::E5M6) pack_e5m6(staged.data(), rows * cols, codes);
}

// The host codes and row-major scales of a CPU tensor's row-wise payload, groups = 1 (what the reference
// functions below read).
void check_host_rowwise(const QTensor& q, const char* what) {
  FP8T_CHECK(q.rowwise.defined(), "{}: the tensor has no row-wise payload", what);
  FP8T_CHECK(q.device().is_cpu(), "{}: the tensor lives on {}; the reference arithmetic reads CPU tensors", what,
             q.device().str());
  FP8T_CHECK(static_cast<int64_t>(q.rowwise.codes.nbytes()) == static_cast<int64_t>(q.code_byte_count()) &&
                 q.rowwise.scales.numel() == q.rowwise_grid().numel(),
             "{}: a [{}, {}] {} tensor holds {} code bytes and {} scales, which do not match its shape", what, q.rows,
             q.cols, format_name(q.format()), q.rowwise.codes.nbytes(), q.rowwise.scales.numel());
}

}  // namespace

// ---- raw-pointer forms ------------------------------------------------------------------------------------
float tensor_amax(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> part(static_cast<size_t>(chunks), 0.0f);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t i = 0; i < chunks; ++i) part[static_cast<size_t>(i)] = amax_of(x + i * kChunk, std::min(kChunk, n - i * kChunk));
  return amax_of(part.data(), chunks);
}

void quantize_into(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec, uint8_t* codes, float* scales,
                   uint64_t counter_base) {
  const Granularity g = spec.granularity;
  if (rows * cols == 0) return;
  if (g.per_tensor) {
    const BlockScale s = block_scale(tensor_amax(x, rows * cols), spec.format, spec.scale_mode);
    scales[0] = s.scale;
    encode_tensor(x, rows, cols, spec.format, s.inverse, spec.rounding, spec.seed, counter_base, codes);
    return;
  }
  const int64_t srows = g.scale_rows(rows), scols = g.scale_cols(cols);
  std::vector<uint16_t> staged(spec.format == Format::E5M6 ? static_cast<size_t>(rows * cols) : 0);
  // One block row per iteration: blocks never share codes (E5M6 is staged and packed afterwards).
#pragma omp parallel for schedule(dynamic, 1) if (rows * cols > 65536)
  for (int64_t sr = 0; sr < srows; ++sr) {
    const int64_t r0 = sr * g.block_rows, r1 = std::min(rows, r0 + g.block_rows);
    for (int64_t sc = 0; sc < scols; ++sc) {
      const int64_t c0 = sc * g.block_cols, c1 = std::min(cols, c0 + g.block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        const float a = amax_of(x + r * cols + c0, c1 - c0);
        if (a > amax || a != a) amax = a;
        if (amax != amax) break;
      }
      const BlockScale s = block_scale(amax, spec.format, spec.scale_mode);
      scales[sr * scols + sc] = s.scale;
      for (int64_t r = r0; r < r1; ++r)
        encode_row_span(x, r, c0, c1, cols, s.inverse, spec.format, spec.rounding, spec.seed, counter_base, codes,
                        staged.data());
    }
  }
  if (spec.format == Format::E5M6) pack_e5m6(staged.data(), rows * cols, codes);
}

void quantize_with_scale_into(const float* x, int64_t rows, int64_t cols, Format format, BlockScale scale,
                              Rounding rounding, uint64_t seed, uint8_t* codes, float* scale_out,
                              uint64_t counter_base) {
  if (!is_scaled(format)) scale = {1.0f, 1.0f};
  *scale_out = scale.scale;
  encode_tensor(x, rows, cols, format, scale.inverse, rounding, seed, counter_base, codes);
}

void unpack_row_codes(const uint8_t* codes, Format format, int64_t cols, int64_t r, uint16_t* out) {
  const int64_t base = r * cols;
  switch (format) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8:
      for (int64_t c = 0; c < cols; ++c) out[c] = codes[base + c];
      return;
    case Format::BF16:
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = 2 * (base + c);
        out[c] = static_cast<uint16_t>(codes[i] | (codes[i + 1] << 8));
      }
      return;
    case Format::E5M6: {
      int64_t c = 0;
      while (c < cols) {
        const int64_t flat = base + c;
        uint32_t words[3];
        std::memcpy(words, codes + 12 * (flat / 8), 12);
        uint16_t g[8];
        num::e5m6_unpack8(words, g);
        for (int64_t i = flat % 8; i < 8 && c < cols; ++i, ++c) out[c] = g[i];
      }
      return;
    }
  }
}

void pack_codes(const uint16_t* values, int64_t n, Format format, uint8_t* out) {
  switch (format) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(values[i]);
      return;
    case Format::BF16:
      for (int64_t i = 0; i < n; ++i) {
        out[2 * i] = static_cast<uint8_t>(values[i] & 0xFF);
        out[2 * i + 1] = static_cast<uint8_t>(values[i] >> 8);
      }
      return;
    case Format::E5M6: pack_e5m6(values, n, out); return;
  }
}

void dequantize_into(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Format format,
                     const Granularity& g, float* out) {
  const int64_t scols = g.scale_cols(cols);
#pragma omp parallel if (rows * cols > 65536)
  {
    std::vector<uint16_t> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      unpack_row_codes(codes, format, cols, r, row.data());
      float* o = out + r * cols;
      if (g.per_tensor) {
        const float s = scales[0];
        for (int64_t c = 0; c < cols; ++c) o[c] = decode(format, row[c]) * s;
      } else {
        const float* srow = scales + (r / g.block_rows) * scols;
        for (int64_t c = 0; c < cols; ++c) o[c] = decode(format, row[c]) * srow[c / g.block_cols];
      }
    }
  }
}

void transpose_into(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Format format,
                    const Granularity& g, uint8_t* codes_t, float* scales_t) {
  std::vector<uint16_t> all(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) unpack_row_codes(codes, format, cols, r, all.data() + r * cols);
  std::vector<uint16_t> tr(all.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) tr[static_cast<size_t>(c * rows + r)] = all[static_cast<size_t>(r * cols + c)];
  pack_codes(tr.data(), rows * cols, format, codes_t);
  const int64_t srows = g.scale_rows(rows), scols = g.scale_cols(cols);
  for (int64_t r = 0; r < srows; ++r)
    for (int64_t c = 0; c < scols; ++c) scales_t[c * srows + r] = scales[r * scols + c];
}

// ---- QTensor functions ----------------------------------------------------------------------------------------
QTensor quantize(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec) {
  check_shape(rows, cols, x);
  check_spec(spec, "quantize");
  QTensor q = make_tensor(rows, cols, spec.format, spec.granularity);
  q.spec = spec;
  q.pow2_scales = spec.scale_mode == ScaleMode::PowerOfTwo || !is_scaled(spec.format);
  quantize_into(x, rows, cols, spec, q.code_ptr(), q.scale_ptr());
  return q;
}

QTensor quantize(const std::vector<float>& x, int64_t rows, int64_t cols, const QuantSpec& spec) {
  FP8T_CHECK(rows >= 0 && cols >= 0 && static_cast<int64_t>(x.size()) == rows * cols,
             "quantize: {} values do not fill a [{}, {}] tensor", x.size(), rows, cols);
  return quantize(x.data(), rows, cols, spec);
}

QTensor quantize_with_scale(const float* x, int64_t rows, int64_t cols, Format format, BlockScale scale,
                            Rounding rounding, uint64_t seed) {
  check_shape(rows, cols, x);
  QuantSpec spec;
  spec.format = format;
  spec.granularity = Granularity::tensor();
  spec.rounding = rounding;
  spec.seed = seed;
  check_spec(spec, "quantize");
  QTensor q = make_tensor(rows, cols, format, Granularity::tensor());
  q.spec = spec;
  if (!is_scaled(format)) scale = {1.0f, 1.0f};
  q.pow2_scales = is_power_of_two(scale.scale);
  quantize_with_scale_into(x, rows, cols, format, scale, rounding, seed, q.code_ptr(), q.scale_ptr());
  return q;
}

void dequantize(const QTensor& q, float* out) {
  check_host_rowwise(q, "dequantize");
  if (q.groups == 1 && q.rowwise.layout == ScaleLayout::RowMajor) {
    dequantize_into(q.code_ptr(), q.scale_ptr(), q.rows, q.cols, q.format(), q.granularity(), out);
    return;
  }
  const int64_t per = q.group_rows() * q.cols;
  for (int64_t g = 0; g < q.groups; ++g) {
    const QTensor part = q.group(g);
    dequantize_into(part.code_ptr(), part.scale_ptr(), part.rows, part.cols, q.format(), q.granularity(),
                    out + g * per);
  }
}

std::vector<float> dequantize(const QTensor& q) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize(q, out.data());
  return out;
}

QTensor retile(const QTensor& q, const QuantSpec& spec) {
  const std::vector<float> values = dequantize(q);
  return quantize(values.data(), q.rows, q.cols, spec);
}

QTensor transpose(const QTensor& q) {
  check_host_rowwise(q, "transpose");
  FP8T_CHECK(q.groups == 1, "transpose: a tensor of {} row groups has no single transpose (see QTensor::colwise)",
             q.groups);
  const QTensor src = q.rowwise.layout == ScaleLayout::RowMajor ? q : q.group(0);
  QTensor t = make_tensor(q.cols, q.rows, q.format(), q.granularity().transposed());
  t.spec = q.spec;
  t.spec.granularity = q.granularity().transposed();
  t.pow2_scales = q.pow2_scales;
  transpose_into(src.code_ptr(), src.scale_ptr(), q.rows, q.cols, q.format(), q.granularity(), t.code_ptr(),
                 t.scale_ptr());
  return t;
}

// ---- delayed scaling ---------------------------------------------------------------------------------------
AmaxHistory::AmaxHistory(int length, AmaxAlgorithm algorithm, int margin)
    : length_(length), algorithm_(algorithm), margin_(margin) {
  FP8T_CHECK(length >= 1, "amax history length must be at least 1, got {}", length);
  FP8T_CHECK(margin >= -64 && margin <= 64, "amax history margin must lie in [-64, 64], got {}", margin);
  FP8T_CHECK(algorithm == AmaxAlgorithm::Max || algorithm == AmaxAlgorithm::MostRecent,
             "unknown amax history algorithm value {}", static_cast<int>(algorithm));
}

float AmaxHistory::reference_amax() const {
  if (history_.empty()) return 0.0f;
  if (algorithm_ == AmaxAlgorithm::MostRecent) return history_.back();
  return *std::max_element(history_.begin(), history_.end());
}

BlockScale AmaxHistory::scale(Format format, ScaleMode mode) const {
  const float ref = reference_amax();
  if (ref == 0.0f || !is_scaled(format)) return {1.0f, 1.0f};
  return block_scale(ref * pow2(margin_), format, mode);
}

void AmaxHistory::push(float amax) {
  FP8T_CHECK(std::isfinite(amax) && amax >= 0.0f,
             "amax history: cannot record amax {} (a tensor holding Inf or NaN, or a negative amax)", amax);
  history_.push_back(amax);
  while (history_.size() > static_cast<size_t>(length_)) history_.pop_front();
}

QTensor quantize_delayed(const float* x, int64_t rows, int64_t cols, const QuantSpec& config,
                             AmaxHistory& history) {
  check_shape(rows, cols, x);
  const float amax = rows * cols == 0 ? 0.0f : tensor_amax(x, rows * cols);
  FP8T_CHECK(std::isfinite(amax), "delayed scaling: the [{}, {}] tensor holds Inf or NaN (amax {})", rows, cols,
             amax);
  QTensor q = quantize_with_scale(x, rows, cols, config.format, history.scale(config.format, config.scale_mode),
                                  config.rounding, config.seed);
  history.push(amax);
  return q;
}

}  // namespace fp8train::quant
