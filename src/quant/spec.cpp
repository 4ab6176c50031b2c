// The scalar side of quantization (spec.h): format names and limits, code sizes, encode / decode of one code,
// granularity names, the block scale of an amax, and QuantSpec checks. Compiled with -ffp-contract=off (see
// quant.h) like the rest of the layer.
#include "quant/spec.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
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
}  // namespace

bool is_scaled(Format f) { return f != Format::BF16; }

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

}  // namespace

bool is_power_of_two(float s) {
  const uint32_t b = num::float_bits(s);
  const uint32_t e = (b >> 23) & 0xFFu;
  return (b & 0x807FFFFFu) == 0 && e != 0 && e != 0xFFu;
}

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
  // |x| as bits: for non-negative floats the integer order is the float order, and every NaN is above +Inf, so
  // one integer max (which vectorizes) finds the amax or tells that a NaN is present.
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    b &= 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  if (m <= 0x7F800000u) {
    float out;
    std::memcpy(&out, &m, 4);
    return out;
  }
  for (int64_t i = 0; i < n; ++i)  // the first NaN, as the scalar definition returns it
    if (std::isnan(x[i])) return std::fabs(x[i]);
  return std::numeric_limits<float>::quiet_NaN();
}

// ---- specs -------------------------------------------------------------------------------------------------
std::string describe(const QuantSpec& spec) {
  std::string s = fmt::format("{} {} {}", format_name(spec.format), spec.granularity.name(),
                              spec.scale_mode == ScaleMode::PowerOfTwo ? "pow2" : "amax");
  if (spec.rounding == Rounding::Stochastic) s += fmt::format(" stochastic(seed {})", spec.seed);
  return s;
}

void check_spec(const QuantSpec& spec, std::string_view what) {
  FP8T_CHECK(static_cast<uint8_t>(spec.format) <= static_cast<uint8_t>(Format::BF16), "{}: unknown format value {}",
             what, static_cast<int>(spec.format));
  FP8T_CHECK(spec.granularity.per_tensor || (spec.granularity.block_rows >= 1 && spec.granularity.block_cols >= 1),
             "{}: block granularity {}x{} needs both block dimensions >= 1", what, spec.granularity.block_rows,
             spec.granularity.block_cols);
  FP8T_CHECK(spec.scale_mode == ScaleMode::Amax || spec.scale_mode == ScaleMode::PowerOfTwo,
             "{}: unknown scale mode value {}", what, static_cast<int>(spec.scale_mode));
  FP8T_CHECK(spec.rounding == Rounding::Nearest || spec.format == Format::INT8,
             "{}: stochastic rounding is only defined for int8, not {}", what, format_name(spec.format));
}

}  // namespace fp8train::quant
