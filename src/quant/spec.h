// What a quantization is, independent of where the data lives: element formats, scale granularities, scale
// rules and rounding (QuantSpec), and the scalar arithmetic every quantizer shares — encode / decode one code,
// the block scale of an amax. quant/quant.h pins down the float32 arithmetic that uses these; quant/qtensor.h
// holds the quantized tensor itself.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8train::quant {

// ---- element formats ------------------------------------------------------------------------------
enum class Format : uint8_t {
  E4M3,  // 1 byte per element, fmax 448
  E5M2,  // 1 byte per element, fmax 57344
  E5M6,  // 12 bits per element: 12 bytes per 8 values (num::e5m6_pack8), fmax 65024
  INT8,  // 1 byte per element (two's complement int8 in [-127, 127]), fmax 127
  BF16,  // 2 bytes per element (little-endian uint16), unscaled (scales are 1): the SNR lab's BF16 baseline
};

std::string_view format_name(Format f);  // "e4m3", "e5m2", "e5m6", "int8", "bf16"
Format parse_format(std::string_view name);  // case-insensitive; throws fp8train::Error on an unknown name
float format_max(Format f);                  // largest finite magnitude (BF16: 3.3895314e38)
// Bytes the codes of n elements occupy (E5M6: 12 * ceil(n / 8)).
size_t code_bytes(Format f, int64_t n);
// Whether the format carries block scales (every format but BF16).
bool is_scaled(Format f);

inline constexpr float kMinAmax = 7.888609052210118e-31f;  // 2^-100

// ---- granularity ------------------------------------------------------------------------------------
// Either one scale for the whole tensor, or a grid of (block_rows × block_cols) blocks. For a per-tensor
// granularity block_rows / block_cols are 0 and scale_rows() = scale_cols() = 1.
struct Granularity {
  bool per_tensor = true;
  int64_t block_rows = 0;
  int64_t block_cols = 0;

  static Granularity tensor() { return {true, 0, 0}; }
  static Granularity tile_1x128() { return {false, 1, 128}; }   // activations: one scale per row per 128 cols
  static Granularity tile_128x1() { return {false, 128, 1}; }   // the same, transposed (Wgrad)
  static Granularity block_128x128() { return {false, 128, 128}; }  // weights
  static Granularity row_tile(int64_t g) { return {false, 1, g}; }  // 1×G
  static Granularity col_tile(int64_t g) { return {false, g, 1}; }  // G×1
  static Granularity block(int64_t g) { return {false, g, g}; }     // G×G
  static Granularity block(int64_t rows, int64_t cols) { return {false, rows, cols}; }

  int64_t scale_rows(int64_t rows) const { return per_tensor ? 1 : (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols(int64_t cols) const { return per_tensor ? 1 : (cols + block_cols - 1) / block_cols; }
  // The same blocks seen on the transposed matrix.
  Granularity transposed() const { return {per_tensor, block_cols, block_rows}; }
  // Square blocks (or one scale per tensor): transposing the codes and the scale grid re-expresses the
  // tensor exactly in the same granularity.
  bool square() const { return per_tensor || block_rows == block_cols; }
  std::string name() const;  // "tensor", "1x128", "128x128", ...
  bool operator==(const Granularity&) const = default;
};
// Parses "tensor" or "RxC" (e.g. "1x128", "128x1", "128x128"); throws on anything else.
Granularity parse_granularity(std::string_view text);

// ---- scale policies -------------------------------------------------------------------------------------
enum class ScaleMode : uint8_t {
  Amax,        // scale = amax_eff / fmax
  PowerOfTwo,  // scale = UE8M0 ceil of amax_eff / fmax
};
enum class Rounding : uint8_t {
  Nearest,     // round to nearest even (all formats)
  Stochastic,  // INT8 only: num::int8_encode_stochastic with num::counter_random_u32(seed, r * cols + c)
};

// Everything that decides the codes and scales of a quantization (quant.h gives the arithmetic).
struct QuantSpec {
  Format format = Format::E4M3;
  Granularity granularity = Granularity::tile_1x128();
  ScaleMode scale_mode = ScaleMode::Amax;
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;  // stochastic rounding only
  bool operator==(const QuantSpec&) const = default;
};
// "e4m3 1x128 amax", "int8 1x128 amax stochastic(seed 7)".
std::string describe(const QuantSpec& spec);
// Throws fp8train::Error naming the problem: an unknown format, block dims < 1, stochastic rounding of a
// format other than INT8. `what` prefixes the message.
void check_spec(const QuantSpec& spec, std::string_view what);

// How a QTensor's scale grid is laid out in memory (quant/qtensor.h): the CPU reference's row-major grid, or the
// layout the GPU GEMMs read fastest.
enum class ScaleLayout : uint8_t { RowMajor, GemmNative };
std::string_view scale_layout_name(ScaleLayout layout);  // "row-major", "gemm-native"

// Decodes one code of `format` to float32 (no scale).
float decode(Format format, uint32_t code);
// Encodes one (already scaled) float32 value; random_bits is used by INT8 stochastic rounding only.
uint32_t encode(Format format, float x, Rounding rounding = Rounding::Nearest, uint32_t random_bits = 0);

// The scale and its inverse for a block of amax `amax` (steps 2–3 of quant.h).
struct BlockScale {
  float scale;
  float inverse;
};
BlockScale block_scale(float amax, Format format, ScaleMode mode);

// Whether s is a finite, normal, exact power of two (what pow2_scales promises for every scale).
bool is_power_of_two(float s);

// max |x| over n values with the NaN rule of quant.h's step 1.
float amax_of(const float* x, int64_t n);

}  // namespace fp8train::quant
