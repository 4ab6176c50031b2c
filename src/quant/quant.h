// The exact CPU arithmetic of block-scaled quantization of 2-D float32 matrices: quantize / dequantize /
// re-tile / transpose into and out of QTensors (quant/qtensor.h) on the CPU, delayed scaling, and the
// raw-pointer forms the CPU kernels of ops/quantize.h run. This is the bit-exact reference every CUDA quantizer
// is tested against.
//
// Layouts (all row-major; the QTensors made here hold a row-wise payload with RowMajor scales, groups = 1):
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
#include <vector>

#include "quant/qtensor.h"
#include "quant/spec.h"

namespace fp8train::quant {

// Online quantization: x [rows, cols] row-major. rows, cols >= 0; throws fp8train::Error on a bad shape or
// granularity (block dims < 1), or stochastic rounding with a non-INT8 format. OpenMP over block rows.
QTensor quantize(const float* x, int64_t rows, int64_t cols, const QuantSpec& config);
QTensor quantize(const std::vector<float>& x, int64_t rows, int64_t cols, const QuantSpec& config);

// Per-tensor quantization with a given scale and inverse (delayed scaling; a test harness). The result has
// granularity tensor() and scales = {scale}.
QTensor quantize_with_scale(const float* x, int64_t rows, int64_t cols, Format format, BlockScale scale,
                                Rounding rounding = Rounding::Nearest, uint64_t seed = 0);

// out [rows, cols] row-major float32 = value_at(r, c). OpenMP.
void dequantize(const QTensor& q, float* out);
std::vector<float> dequantize(const QTensor& q);

// Re-quantization in another granularity (the Wgrad 1×128 → 128×1 path): quantize(dequantize(q), config).
// What is exact (tests/quant/retile_test.cpp): let q have power-of-two scales and config use the same
// format with ScaleMode::PowerOfTwo. Every dequantized value v = d * 2^k (d a code value, 2^k its old scale).
// The new block's amax is one of these values, so its new scale 2^k' satisfies |v| * 2^-k' <= fmax for all
// its elements (no overflow), and v * 2^-k' = d * 2^(k-k') is a power-of-two shift of a code value. Hence
// dequantize(retile(q)) == dequantize(q) bit for bit if and only if no shifted value d * 2^(k-k') loses
// bits below the format's smallest subnormal (E4M3 2^-9, E5M2 2^-16, E5M6 2^-20; INT8: d * 2^(k-k') is an
// integer) — always true when k' <= k, i.e. when each element's old scale is at least its new one.
// With ScaleMode::Amax scales the values are re-rounded and generally change (a counterexample is tested).
QTensor retile(const QTensor& q, const QuantSpec& config);

// The transposed tensor: [cols, rows] codes and scales, granularity.transposed(). Exact (no re-rounding).
QTensor transpose(const QTensor& q);

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
QTensor quantize_delayed(const float* x, int64_t rows, int64_t cols, const QuantSpec& config,
                         AmaxHistory& history);

// ---- raw-pointer forms: the CPU kernels of ops/quantize.h, and what the QTensor functions above run ----------
// Layouts as at the top of this file; x is contiguous [rows, cols]; scales are row-major [scale_rows, scale_cols].
// counter_base is added to the stochastic-rounding counter r * cols + c (a slice of a larger tensor passes its
// first element's flat index, so the slice's codes are the whole tensor's).

// Per-tensor amax (the NaN rule of step 1), in parallel chunks combined in a fixed order.
float tensor_amax(const float* x, int64_t n);
// quantize(): codes [code_bytes(format, rows * cols)] and scales; leaves both untouched when rows * cols == 0.
void quantize_into(const float* x, int64_t rows, int64_t cols, const QuantSpec& spec, uint8_t* codes, float* scales,
                   uint64_t counter_base = 0);
// quantize_with_scale(): one scale for the tensor (written to *scale_out).
void quantize_with_scale_into(const float* x, int64_t rows, int64_t cols, Format format, BlockScale scale,
                              Rounding rounding, uint64_t seed, uint8_t* codes, float* scale_out,
                              uint64_t counter_base = 0);
// dequantize(): out [rows, cols].
void dequantize_into(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Format format,
                     const Granularity& g, float* out);
// transpose(): codes_t [cols, rows] and scales_t [scale_cols, scale_rows] of granularity g.transposed().
void transpose_into(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, Format format,
                    const Granularity& g, uint8_t* codes_t, float* scales_t);
// The 16-bit codes of row r of a [rows, cols] code buffer (any format), into out[0..cols).
void unpack_row_codes(const uint8_t* codes, Format format, int64_t cols, int64_t r, uint16_t* out);
// n 16-bit codes in flat order into a code buffer of `format` (E5M6: packed, zero-padded last group).
void pack_codes(const uint16_t* values, int64_t n, Format format, uint8_t* out);

}  // namespace fp8train::quant
