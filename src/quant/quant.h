// Block-scaled quantization of 2-D float32 matrices: granularities, element formats, scale policies,
// QuantTensor (codes + FP32 scales), quantize / dequantize / re-tile / transpose.
//
// Layouts (all row-major):
//   input x:  [rows, cols] float32, contiguous (element (r, c) at x[r * cols + c]).
//   codes:    the elements of x in row-major order, encoded in `format` (see Format for bytes per element).
//             Only the rows*cols valid elements are stored; ragged edge blocks are NOT padded. E5M6 codes
//             are packed 8 per 12 bytes over the flat row-major index (the last group of 8 is padded with
//             zero codes).
//   scales:   [scale_rows, scale_cols] float32, one per block, scale_rows = ceil(rows / block_rows),
//             scale_cols = ceil(cols / block_cols); a per-tensor granularity has one scale ([1, 1]).
//   value(r, c) = decode(code(r, c)) * scales[(r / block_rows) * scale_cols + c / block_cols]
//
// THE EXACT FLOAT32 ARITHMETIC (a CUDA kernel reproduces it bit for bit; only float32 operations, each
// rounded to nearest even, no FMA contraction, no double):
//   1. amax of a block = max |x| over the block's valid elements (exact). NaN propagates: a block holding a
//      NaN has amax = NaN; a block holding ±Inf has amax = +Inf.
//   2. amax_eff = amax < kMinAmax ? kMinAmax : amax        (so an all-zero block gets a finite, positive
//      scale; NaN compares false and stays NaN; kMinAmax = 2^-100)
//   3. ScaleMode::Amax (online, DeepGEMM-style):
//        scale    = amax_eff / fmax                        (one float32 division)
//        inverse  = fmax / amax_eff                        (one float32 division; NOT 1/scale)
//        code     = encode(x * inverse)                    (one float32 multiply, then the format encoder)
//      ScaleMode::PowerOfTwo (UE8M0):
//        u        = num::ue8m0_ceil(amax_eff / fmax)       (smallest power of two >= the float32 quotient)
//        scale    = 2^(u - 127)                            (built from exponent bits, exact)
//        inverse  = 2^(127 - u)                            (exact; x * inverse is exact unless it underflows)
//        code     = encode(x * inverse)
//      A NaN amax gives u = 0xFF: scale = inverse = NaN and every code in the block is the format's NaN
//      code. An Inf amax gives scale = Inf, inverse = 0 in Amax mode (codes 0, or NaN for the Inf element
//      itself since Inf * 0 = NaN) and scale = inverse = NaN in PowerOfTwo mode (u = 0xFF): either way the
//      block dequantizes to NaN everywhere. NaN/Inf is never silently turned into a finite value.
//   4. fmax and encoders: E4M3 448 (num::e4m3_encode, satfinite, NVIDIA NaN 0x7F); E5M2 57344
//      (num::e5m2_encode, satfinite); E5M6 65024 (num::e5m6_encode, satfinite, NaN 0x7E0); INT8 127
//      (num::int8_encode_rne, or num::int8_encode_stochastic with random bits
//      num::counter_random_u32(seed, r * cols + c) — r, c the element's position in x; a NaN becomes 0, but
//      the block's scale is NaN so it dequantizes to NaN); BF16: no scaling at all, code = num::bf16_encode(x),
//      every scale is 1.0f.
//   5. dequantize: value = decode(code) * scale (one float32 multiply).
//   Delayed scaling replaces step 1's amax with the reference amax of an AmaxHistory (see below), per tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace fp8train::quant {

// ---- element formats ------------------------------------------------------------------------------
enum class Format : uint8_t {
  E4M3,  // 1 byte per element, fmax 448
  E5M2,  // 1 byte per element, fmax 57344
  E5M6,  // 12 bits per element: 12 bytes per 8 values (num::e5m6_pack8), fmax 65024
  INT8,  // 1 byte per element (two's complement int8 in [-127, 127]), fmax 127
  BF16,  // 2 bytes per element (little-endian uint16), unscaled (scales are 1)
};

std::string_view format_name(Format f);  // "e4m3", "e5m2", "e5m6", "int8", "bf16"
Format parse_format(std::string_view name);  // case-insensitive; throws fp8train::Error on an unknown name
float format_max(Format f);                  // largest finite magnitude (BF16: 3.3895314e38)
// Bytes the codes of n elements occupy (E5M6: 12 * ceil(n / 8)).
size_t code_bytes(Format f, int64_t n);

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

struct QuantConfig {
  Format format = Format::E4M3;
  Granularity granularity = Granularity::tile_1x128();
  ScaleMode scale_mode = ScaleMode::Amax;
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;  // stochastic rounding only
};

// ---- the quantized tensor ---------------------------------------------------------------------------------
struct QuantTensor {
  int64_t rows = 0, cols = 0;
  Format format = Format::E4M3;
  Granularity granularity;
  bool pow2_scales = false;     // every scale is an exact power of two (PowerOfTwo mode, or BF16)
  std::vector<uint8_t> codes;   // code_bytes(format, rows * cols) bytes, layout above
  std::vector<float> scales;    // [scale_rows(), scale_cols()]

  int64_t scale_rows() const { return granularity.scale_rows(rows); }
  int64_t scale_cols() const { return granularity.scale_cols(cols); }
  // Storage actually held: code bytes + 4 bytes per scale.
  size_t bytes() const { return codes.size() + scales.size() * sizeof(float); }
  // Scale of element (r, c).
  float scale_of(int64_t r, int64_t c) const;
  // The element's code (E4M3/E5M2/INT8: the byte; BF16/E5M6: the 16-bit code) and decoded, unscaled value.
  uint32_t code_at(int64_t r, int64_t c) const;
  float decoded_at(int64_t r, int64_t c) const;
  // decoded_at * scale_of: one element of dequantize().
  float value_at(int64_t r, int64_t c) const;
};

// Decodes one code of `format` to float32 (no scale).
float decode(Format format, uint32_t code);
// Encodes one (already scaled) float32 value; random_bits is used by INT8 stochastic rounding only.
uint32_t encode(Format format, float x, Rounding rounding = Rounding::Nearest, uint32_t random_bits = 0);

// The scale and its inverse for a block of amax `amax` (steps 2–3 above).
struct BlockScale {
  float scale;
  float inverse;
};
BlockScale block_scale(float amax, Format format, ScaleMode mode);

// max |x| over n values with the NaN rule of step 1.
float amax_of(const float* x, int64_t n);

// Online quantization: x [rows, cols] row-major. rows, cols >= 0; throws fp8train::Error on a bad shape or
// granularity (block dims < 1), or stochastic rounding with a non-INT8 format. OpenMP over block rows.
QuantTensor quantize(const float* x, int64_t rows, int64_t cols, const QuantConfig& config);
QuantTensor quantize(const std::vector<float>& x, int64_t rows, int64_t cols, const QuantConfig& config);

// Per-tensor quantization with a given scale and inverse (delayed scaling; a test harness). The result has
// granularity tensor() and scales = {scale}.
QuantTensor quantize_with_scale(const float* x, int64_t rows, int64_t cols, Format format, BlockScale scale,
                                Rounding rounding = Rounding::Nearest, uint64_t seed = 0);

// out [rows, cols] row-major float32 = value_at(r, c). OpenMP.
void dequantize(const QuantTensor& q, float* out);
std::vector<float> dequantize(const QuantTensor& q);

// Re-quantization in another granularity (the Wgrad 1×128 → 128×1 path): quantize(dequantize(q), config).
// What is exact (tests/quant/retile_test.cpp): let q have power-of-two scales and config use the same
// format with ScaleMode::PowerOfTwo. Every dequantized value v = d * 2^k (d a code value, 2^k its old scale).
// The new block's amax is one of these values, so its new scale 2^k' satisfies |v| * 2^-k' <= fmax for all
// its elements (no overflow), and v * 2^-k' = d * 2^(k-k') is a power-of-two shift of a code value. Hence
// dequantize(retile(q)) == dequantize(q) bit for bit if and only if no shifted value d * 2^(k-k') loses
// bits below the format's smallest subnormal (E4M3 2^-9, E5M2 2^-16, E5M6 2^-20; INT8: d * 2^(k-k') is an
// integer) — always true when k' <= k, i.e. when each element's old scale is at least its new one.
// With ScaleMode::Amax scales the values are re-rounded and generally change (a counterexample is tested).
QuantTensor retile(const QuantTensor& q, const QuantConfig& config);

// The transposed tensor: [cols, rows] codes and scales, granularity.transposed(). Exact (no re-rounding).
QuantTensor transpose(const QuantTensor& q);

// ---- delayed scaling (Transformer-Engine style, per tensor) -----------------------------------------------
enum class AmaxAlgorithm : uint8_t {
  Max,         // reference amax = max over the history window
  MostRecent,  // reference amax = the last amax pushed
};

// The amaxes of the last `length` tensors. The scale used for a tensor is computed from the history BEFORE
// that tensor (scale()); the tensor's own amax is pushed afterwards (push()).
//   reference = Max: max of the window; MostRecent: last entry; empty history: 0.
//   reference == 0 (empty, or only zero tensors seen) -> scale 1, inverse 1 (TE's initial scale).
//   otherwise amax_eff = max(reference * 2^margin, kMinAmax) (exact power-of-two multiply in float32, margin
//   an integer in [-64, 64]) and scale / inverse follow step 3 of the arithmetic above with the mode given.
class AmaxHistory {
 public:
  // length >= 1 (throws otherwise).
  explicit AmaxHistory(int length = 1024, AmaxAlgorithm algorithm = AmaxAlgorithm::Max, int margin = 0);

  float reference_amax() const;
  BlockScale scale(Format format, ScaleMode mode = ScaleMode::Amax) const;
  // Appends an amax, dropping the oldest beyond `length`. Throws on a negative or non-finite amax
  // (a tensor holding Inf/NaN is reported, never folded into the history).
  void push(float amax);

  int length() const { return length_; }
  AmaxAlgorithm algorithm() const { return algorithm_; }
  int margin() const { return margin_; }
  size_t size() const { return history_.size(); }
  const std::deque<float>& entries() const { return history_; }

 private:
  int length_;
  AmaxAlgorithm algorithm_;
  int margin_;
  std::deque<float> history_;
};

// Quantizes x per tensor with history.scale(config.format, config.scale_mode), then pushes amax(x).
// config.granularity is ignored (delayed scaling is per tensor). Throws, leaving the history unchanged, when
// x holds Inf or NaN.
QuantTensor quantize_delayed(const float* x, int64_t rows, int64_t cols, const QuantConfig& config,
                             AmaxHistory& history);

}  // namespace fp8train::quant
