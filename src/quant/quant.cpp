// Quantization: formats, granularities, block scales, quantize / dequantize / retile / transpose and the
// delayed-scaling amax history. The float32 arithmetic is the one pinned down in quant.h (compiled with
// -ffp-contract=off so no multiply-add is fused behind our back).
#include "quant/quant.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "numerics/formats.h"

namespace fp8train::quant {

// ---- formats ------------------------------------------------------------------------------------------
std::string_view format_name(Format f) {
  switch (f) {
    case Format::E4M3: return "e4m3";
    case Format::E5M2: return "e5m2";
    case Format::E5M6: return "e5m6";
    case Format::INT8: return "int8";
    case Format::BF16: return "bf16";
  }
  return "unknown";
}

namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}
bool is_scaled(Format f) { return f != Format::BF16; }
}  // namespace

Format parse_format(std::string_view name) {
  const std::string n = lower(name);
  for (Format f : {Format::E4M3, Format::E5M2, Format::E5M6, Format::INT8, Format::BF16})
    if (n == format_name(f)) return f;
  FP8T_FAIL("unknown element format '{}' (expected e4m3, e5m2, e5m6, int8 or bf16)", name);
}

float format_max(Format f) {
  switch (f) {
    case Format::E4M3: return num::kE4M3Max;
    case Format::E5M2: return num::kE5M2Max;
    case Format::E5M6: return num::kE5M6Max;
    case Format::INT8: return num::kInt8Max;
    case Format::BF16: return 3.3895313892515355e38f;
  }
  FP8T_FAIL("format_max: invalid format value {}", static_cast<int>(f));
}

size_t code_bytes(Format f, int64_t n) {
  FP8T_CHECK(n >= 0, "code_bytes: negative element count {}", n);
  const auto un = static_cast<size_t>(n);
  switch (f) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8: return un;
    case Format::BF16: return 2 * un;
    case Format::E5M6: return 12 * ((un + 7) / 8);
  }
  FP8T_FAIL("code_bytes: invalid format value {}", static_cast<int>(f));
}

float decode(Format format, uint32_t code) {
  switch (format) {
    case Format::E4M3: return num::e4m3_decode(static_cast<uint8_t>(code));
    case Format::E5M2: return num::e5m2_decode(static_cast<uint8_t>(code));
    case Format::E5M6: return num::e5m6_decode(static_cast<uint16_t>(code));
    case Format::INT8: return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(code)));
    case Format::BF16: return num::bf16_decode(static_cast<uint16_t>(code));
  }
  FP8T_FAIL("decode: invalid format value {}", static_cast<int>(format));
}

uint32_t encode(Format format, float x, Rounding rounding, uint32_t random_bits) {
  switch (format) {
    case Format::E4M3: return num::e4m3_encode(x);
    case Format::E5M2: return num::e5m2_encode(x);
    case Format::E5M6: return num::e5m6_encode(x);
    case Format::INT8: {
      const int8_t v = rounding == Rounding::Stochastic ? num::int8_encode_stochastic(x, random_bits)
                                                        : num::int8_encode_rne(x);
      return static_cast<uint8_t>(v);
    }
    case Format::BF16: return num::bf16_encode(x);
  }
  FP8T_FAIL("encode: invalid format value {}", static_cast<int>(format));
}

// ---- granularity ----------------------------------------------------------------------------------------
std::string Granularity::name() const {
  if (per_tensor) return "tensor";
  return fmt::format("{}x{}", block_rows, block_cols);
}

Granularity parse_granularity(std::string_view text) {
  const std::string t = lower(text);
  if (t == "tensor" || t == "per-tensor") return Granularity::tensor();
  const auto x = t.find('x');
  FP8T_CHECK(x != std::string::npos, "granularity '{}' is neither 'tensor' nor 'RxC' (e.g. 1x128)", text);
  int64_t r = 0, c = 0;
  const char* b = t.data();
  const auto rr = std::from_chars(b, b + x, r);
  const auto rc = std::from_chars(b + x + 1, b + t.size(), c);
  FP8T_CHECK(rr.ec == std::errc() && rr.ptr == b + x && rc.ec == std::errc() && rc.ptr == b + t.size() && r > 0 &&
                 c > 0,
             "granularity '{}' must be 'tensor' or 'RxC' with positive integers R and C", text);
  return Granularity::block(r, c);
}

// ---- scales ----------------------------------------------------------------------------------------------
namespace {
// 2^e for e in the normal float32 range.
float pow2(int e) { return num::bits_float(static_cast<uint32_t>(e + 127) << 23); }

bool is_power_of_two(float s) {
  const uint32_t b = num::float_bits(s);
  const uint32_t e = (b >> 23) & 0xFFu;
  return (b & 0x807FFFFFu) == 0 && e != 0 && e != 0xFFu;
}
}  // namespace

BlockScale block_scale(float amax, Format format, ScaleMode mode) {
  if (!is_scaled(format)) return {1.0f, 1.0f};
  const float fmax = format_max(format);
  const float amax_eff = amax < kMinAmax ? kMinAmax : amax;  // NaN compares false and stays NaN
  if (mode == ScaleMode::Amax) return {amax_eff / fmax, fmax / amax_eff};
  const uint8_t u = num::ue8m0_ceil(amax_eff / fmax);
  if (u == num::kUE8M0NaN) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    return {nan, nan};
  }
  // amax_eff >= 2^-100 and fmax <= 65024 keep u in [11, 254]; the inverse 2^(127-u) stays normal for
  // every finite amax (u <= 247 since fmax >= 127).
  return {pow2(static_cast<int>(u) - 127), pow2(127 - static_cast<int>(u))};
}

float amax_of(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > m || a != a) m = a;
    if (m != m) break;  // NaN is sticky
  }
  return m;
}

// ---- QuantTensor element access --------------------------------------------------------------------------
namespace {
uint16_t e5m6_code(const std::vector<uint8_t>& codes, int64_t flat) {
  uint32_t words[3];
  std::memcpy(words, codes.data() + 12 * (flat / 8), 12);
  uint16_t c[8];
  num::e5m6_unpack8(words, c);
  return c[flat % 8];
}

uint32_t raw_code(const QuantTensor& q, int64_t flat) {
  switch (q.format) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8: return q.codes[static_cast<size_t>(flat)];
    case Format::BF16:
      return static_cast<uint32_t>(q.codes[2 * static_cast<size_t>(flat)]) |
             (static_cast<uint32_t>(q.codes[2 * static_cast<size_t>(flat) + 1]) << 8);
    case Format::E5M6: return e5m6_code(q.codes, flat);
  }
  FP8T_FAIL("invalid format value {}", static_cast<int>(q.format));
}

// Unpacks the codes of row r into out[0..cols) (any format, 16-bit codes).
void row_codes(const QuantTensor& q, int64_t r, uint16_t* out) {
  const int64_t base = r * q.cols;
  switch (q.format) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8:
      for (int64_t c = 0; c < q.cols; ++c) out[c] = q.codes[static_cast<size_t>(base + c)];
      return;
    case Format::BF16:
      for (int64_t c = 0; c < q.cols; ++c) {
        const size_t i = 2 * static_cast<size_t>(base + c);
        out[c] = static_cast<uint16_t>(q.codes[i] | (q.codes[i + 1] << 8));
      }
      return;
    case Format::E5M6: {
      int64_t c = 0;
      while (c < q.cols) {
        const int64_t flat = base + c;
        uint32_t words[3];
        std::memcpy(words, q.codes.data() + 12 * (flat / 8), 12);
        uint16_t g[8];
        num::e5m6_unpack8(words, g);
        for (int64_t i = flat % 8; i < 8 && c < q.cols; ++i, ++c) out[c] = g[i];
      }
      return;
    }
  }
}

void check_index(const QuantTensor& q, int64_t r, int64_t c) {
  FP8T_CHECK(r >= 0 && r < q.rows && c >= 0 && c < q.cols, "element ({}, {}) is outside the [{}, {}] tensor", r, c,
             q.rows, q.cols);
}
}  // namespace

float QuantTensor::scale_of(int64_t r, int64_t c) const {
  check_index(*this, r, c);
  if (granularity.per_tensor) return scales[0];
  return scales[static_cast<size_t>((r / granularity.block_rows) * scale_cols() + c / granularity.block_cols)];
}
uint32_t QuantTensor::code_at(int64_t r, int64_t c) const {
  check_index(*this, r, c);
  return raw_code(*this, r * cols + c);
}
float QuantTensor::decoded_at(int64_t r, int64_t c) const { return decode(format, code_at(r, c)); }
float QuantTensor::value_at(int64_t r, int64_t c) const { return decoded_at(r, c) * scale_of(r, c); }

// ---- quantize ---------------------------------------------------------------------------------------------
namespace {

void check_shape(int64_t rows, int64_t cols, const void* x) {
  FP8T_CHECK(rows >= 0 && cols >= 0, "quantize: shape [{}, {}] has a negative dimension", rows, cols);
  FP8T_CHECK(rows * cols == 0 || x != nullptr, "quantize: null input for a [{}, {}] tensor", rows, cols);
}

void check_config(const QuantConfig& config) {
  FP8T_CHECK(static_cast<uint8_t>(config.format) <= static_cast<uint8_t>(Format::BF16),
             "quantize: unknown format value {}", static_cast<int>(config.format));
  FP8T_CHECK(config.granularity.per_tensor || (config.granularity.block_rows >= 1 && config.granularity.block_cols >= 1),
             "quantize: block granularity {}x{} needs both block dimensions >= 1", config.granularity.block_rows,
             config.granularity.block_cols);
  FP8T_CHECK(config.rounding == Rounding::Nearest || config.format == Format::INT8,
             "quantize: stochastic rounding is only defined for int8, not {}", format_name(config.format));
}

// Encodes x[r][c0..c1) * inverse into the 16-bit code buffer (E5M6 staging) or straight into q.codes.
void encode_row_span(const float* x, int64_t r, int64_t c0, int64_t c1, int64_t cols, float inverse,
                     Format format, Rounding rounding, uint64_t seed, uint8_t* codes, uint16_t* staged) {
  const float* xr = x + r * cols;
  const int64_t base = r * cols;
  switch (format) {
    case Format::E4M3:
      for (int64_t c = c0; c < c1; ++c) codes[base + c] = num::e4m3_encode(xr[c] * inverse);
      return;
    case Format::E5M2:
      for (int64_t c = c0; c < c1; ++c) codes[base + c] = num::e5m2_encode(xr[c] * inverse);
      return;
    case Format::INT8:
      if (rounding == Rounding::Stochastic) {
        for (int64_t c = c0; c < c1; ++c)
          codes[base + c] = static_cast<uint8_t>(num::int8_encode_stochastic(
              xr[c] * inverse, num::counter_random_u32(seed, static_cast<uint64_t>(base + c))));
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

// Packs n staged 12-bit codes into q.codes (zero-padded last group).
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

QuantTensor make_tensor(int64_t rows, int64_t cols, Format format, Granularity g) {
  QuantTensor q;
  q.rows = rows;
  q.cols = cols;
  q.format = format;
  q.granularity = g;
  q.codes.assign(code_bytes(format, rows * cols), 0);
  q.scales.assign(static_cast<size_t>(g.scale_rows(rows) * g.scale_cols(cols)), 1.0f);
  return q;
}

// Per-tensor amax in parallel with the sticky-NaN rule (combined in a fixed order).
float tensor_amax(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> part(static_cast<size_t>(chunks), 0.0f);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t i = 0; i < chunks; ++i) part[static_cast<size_t>(i)] = amax_of(x + i * kChunk, std::min(kChunk, n - i * kChunk));
  return amax_of(part.data(), chunks);
}

// Encodes the whole tensor with one inverse scale (per-tensor and delayed scaling).
void encode_tensor(const float* x, QuantTensor& q, float inverse, Rounding rounding, uint64_t seed) {
  const int64_t rows = q.rows, cols = q.cols;
  std::vector<uint16_t> staged(q.format == Format::E5M6 ? static_cast<size_t>(rows * cols) : 0);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r)
    encode_row_span(x, r, 0, cols, cols, inverse, q.format, rounding, seed, q.codes.data(), staged.data());
  if (q.format == Format::E5M6) pack_e5m6(staged.data(), rows * cols, q.codes.data());
}

}  // namespace

QuantTensor quantize(const float* x, int64_t rows, int64_t cols, const QuantConfig& config) {
  check_shape(rows, cols, x);
  check_config(config);
  const Granularity g = config.granularity;
  QuantTensor q = make_tensor(rows, cols, config.format, g);
  q.pow2_scales = config.scale_mode == ScaleMode::PowerOfTwo || !is_scaled(config.format);
  if (rows * cols == 0) return q;
  if (g.per_tensor) {
    const BlockScale s = block_scale(tensor_amax(x, rows * cols), config.format, config.scale_mode);
    q.scales[0] = s.scale;
    encode_tensor(x, q, s.inverse, config.rounding, config.seed);
    return q;
  }
  const int64_t srows = q.scale_rows(), scols = q.scale_cols();
  std::vector<uint16_t> staged(config.format == Format::E5M6 ? static_cast<size_t>(rows * cols) : 0);
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
      const BlockScale s = block_scale(amax, config.format, config.scale_mode);
      q.scales[static_cast<size_t>(sr * scols + sc)] = s.scale;
      for (int64_t r = r0; r < r1; ++r)
        encode_row_span(x, r, c0, c1, cols, s.inverse, config.format, config.rounding, config.seed, q.codes.data(),
                        staged.data());
    }
  }
  if (config.format == Format::E5M6) pack_e5m6(staged.data(), rows * cols, q.codes.data());
  return q;
}

QuantTensor quantize(const std::vector<float>& x, int64_t rows, int64_t cols, const QuantConfig& config) {
  FP8T_CHECK(rows >= 0 && cols >= 0 && static_cast<int64_t>(x.size()) == rows * cols,
             "quantize: {} values do not fill a [{}, {}] tensor", x.size(), rows, cols);
  return quantize(x.data(), rows, cols, config);
}

QuantTensor quantize_with_scale(const float* x, int64_t rows, int64_t cols, Format format, BlockScale scale,
                                Rounding rounding, uint64_t seed) {
  check_shape(rows, cols, x);
  QuantConfig config;
  config.format = format;
  config.granularity = Granularity::tensor();
  config.rounding = rounding;
  config.seed = seed;
  check_config(config);
  QuantTensor q = make_tensor(rows, cols, format, Granularity::tensor());
  if (!is_scaled(format)) scale = {1.0f, 1.0f};
  q.scales[0] = scale.scale;
  q.pow2_scales = is_power_of_two(scale.scale);
  encode_tensor(x, q, scale.inverse, rounding, seed);
  return q;
}

// ---- dequantize / retile / transpose --------------------------------------------------------------------
void dequantize(const QuantTensor& q, float* out) {
  FP8T_CHECK(q.codes.size() == code_bytes(q.format, q.rows * q.cols) &&
                 q.scales.size() == static_cast<size_t>(q.scale_rows() * q.scale_cols()),
             "dequantize: a [{}, {}] {} tensor holds {} code bytes and {} scales, which do not match its shape",
             q.rows, q.cols, format_name(q.format), q.codes.size(), q.scales.size());
  const int64_t rows = q.rows, cols = q.cols, scols = q.scale_cols();
  const Granularity g = q.granularity;
#pragma omp parallel if (rows * cols > 65536)
  {
    std::vector<uint16_t> codes(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      row_codes(q, r, codes.data());
      float* o = out + r * cols;
      if (g.per_tensor) {
        const float s = q.scales[0];
        for (int64_t c = 0; c < cols; ++c) o[c] = decode(q.format, codes[c]) * s;
      } else {
        const float* srow = q.scales.data() + (r / g.block_rows) * scols;
        for (int64_t c = 0; c < cols; ++c) o[c] = decode(q.format, codes[c]) * srow[c / g.block_cols];
      }
    }
  }
}

std::vector<float> dequantize(const QuantTensor& q) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize(q, out.data());
  return out;
}

QuantTensor retile(const QuantTensor& q, const QuantConfig& config) {
  const std::vector<float> values = dequantize(q);
  return quantize(values.data(), q.rows, q.cols, config);
}

QuantTensor transpose(const QuantTensor& q) {
  QuantTensor t = make_tensor(q.cols, q.rows, q.format, q.granularity.transposed());
  t.pow2_scales = q.pow2_scales;
  const int64_t rows = q.rows, cols = q.cols;
  std::vector<uint16_t> all(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) row_codes(q, r, all.data() + r * cols);
  std::vector<uint16_t> tr(all.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) tr[static_cast<size_t>(c * rows + r)] = all[static_cast<size_t>(r * cols + c)];
  const size_t n = tr.size();
  switch (q.format) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8:
      for (size_t i = 0; i < n; ++i) t.codes[i] = static_cast<uint8_t>(tr[i]);
      break;
    case Format::BF16:
      for (size_t i = 0; i < n; ++i) {
        t.codes[2 * i] = static_cast<uint8_t>(tr[i] & 0xFF);
        t.codes[2 * i + 1] = static_cast<uint8_t>(tr[i] >> 8);
      }
      break;
    case Format::E5M6: pack_e5m6(tr.data(), static_cast<int64_t>(n), t.codes.data()); break;
  }
  const int64_t srows = q.scale_rows(), scols = q.scale_cols();
  for (int64_t r = 0; r < srows; ++r)
    for (int64_t c = 0; c < scols; ++c)
      t.scales[static_cast<size_t>(c * srows + r)] = q.scales[static_cast<size_t>(r * scols + c)];
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

QuantTensor quantize_delayed(const float* x, int64_t rows, int64_t cols, const QuantConfig& config,
                             AmaxHistory& history) {
  check_shape(rows, cols, x);
  const float amax = rows * cols == 0 ? 0.0f : tensor_amax(x, rows * cols);
  FP8T_CHECK(std::isfinite(amax), "delayed scaling: the [{}, {}] tensor holds Inf or NaN (amax {})", rows, cols,
             amax);
  QuantTensor q = quantize_with_scale(x, rows, cols, config.format, history.scale(config.format, config.scale_mode),
                                      config.rounding, config.seed);
  history.push(amax);
  return q;
}

}  // namespace fp8train::quant
