// CUDA quantization launchers (tier 2: raw device pointers and dims; the Tensor entry points build on these).
// Every kernel reproduces the CPU reference of src/quant/quant.h bit for bit (codes and scales), using the
// same float32 arithmetic: amax (NaN propagates), amax_eff = max(amax, kMinAmax), scale = amax_eff / fmax and
// inverse = fmax / amax_eff (or the UE8M0 power of two), code = encode(x * inverse).
//
// Layouts. x: [rows, cols] row-major, float32 or bf16 (uint16 codes). Codes: [rows, cols] row-major bytes;
// the transposed output qt: [cols, rows] row-major bytes (qt[c * rows + r] encodes x[r, c]). E5M6: 12 bytes per
// 8 values over the flat row-major index (num::e5m6_pack8), as QTensor stores them.
// Scales: one float per block; block (br, bc) is stored at scales[br * strides.row + bc * strides.col], so the
// same kernel writes QTensor's row-major layout ({scale_cols, 1}) or cuBLASLt's "MN-major" layout for
// 1x128 scales ({1, scale_rows}: consecutive rows contiguous) or a padded 128x128 layout ({ld, 1}).
//
// Fast paths (one CTA per 128x128 tile, 16-byte loads, one read of x):
//   quantize_1x128        1x128 tiles, optionally fused with the transposed 128x1 quantization (Wgrad) that
//                         writes qt = the codes of x's 128x1 tiles laid out as xᵀ with 1x128 tiles.
//                         Needs cols % 16 == 0, and rows % 16 == 0 when qt is written.
//   quantize_128x128      128x128 blocks; qt (optional) is the transpose, same codes, transposed scales.
// Any shape and any block shape (including per tensor): quantize_blocks (two passes: amax, then codes).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quant/spec.h"

namespace fp8train::ops::cuda {

enum class InType : uint8_t { F32, BF16 };
size_t in_type_size(InType t);

// The block quantizers write one-byte formats (quant::Format E4M3, E5M2, INT8) and reject the others before
// any launch; E5M6 has its own quantizer below.

// How E4M3/E5M2 codes are produced. Software: num::e4m3_encode / e5m2_encode from numerics/formats.h.
// Hardware: the sm_89+ cvt.rn.satfinite.{e4m3,e5m2}x2.f32 instruction (two values per instruction).
// tests/cuda/encoder_exhaustive_test.cu checks that both give the same byte for all 2^32 float32 inputs.
enum class Encoder : uint8_t { Software, Hardware };

struct ScaleStrides {
  int64_t row = 0;  // distance between consecutive block rows
  int64_t col = 0;  // distance between consecutive block columns
};
inline ScaleStrides row_major_scales(int64_t scale_cols) { return {scale_cols, 1}; }
inline ScaleStrides mn_major_scales(int64_t scale_rows) { return {1, scale_rows}; }

struct QuantOptions {
  quant::Format format = quant::Format::E4M3;
  bool pow2_scales = false;  // UE8M0 scales (ScaleMode::PowerOfTwo)
  bool stochastic = false;   // INT8 only: num::int8_encode_stochastic with counter_random_u32(seed, r*cols+c)
  uint64_t seed = 0;
  Encoder encoder = Encoder::Hardware;
};

// 1x128 tiles of x, optionally fused with the 128x1 tiles written transposed. Either output may be null
// (not both). q_scales: [rows, ceil(cols/128)] blocks; qt_scales: [cols, ceil(rows/128)] blocks.
struct Quant1x128Args {
  const void* x = nullptr;
  InType x_type = InType::BF16;
  int64_t rows = 0, cols = 0;
  QuantOptions opt;
  uint8_t* q = nullptr;
  float* q_scales = nullptr;
  ScaleStrides q_strides;
  uint8_t* qt = nullptr;
  float* qt_scales = nullptr;
  ScaleStrides qt_strides;
  // Row groups in one launch (MoE experts): `groups` equal groups of rows / groups rows each, a multiple of 128 when
  // groups > 1 (no tile straddles a group). Group g's rows, codes and transposed codes are its own [rg, cols] /
  // [cols, rg] matrices (consecutive, as QTensor stores them); its scale grids start g * *_scales_group floats in.
  int64_t groups = 1;
  int64_t q_scales_group = 0, qt_scales_group = 0;
  // Re-tiling (ops::with_colwise): x holds one-byte codes of opt.format (E4M3 or E5M2) with 1x128 row scales
  // x_scales (block (r, b) at r * x_strides.row + b * x_strides.col, group g's grid x_scales_group floats on);
  // the values quantized are code * scale in FP32, what dequantize writes. x_type is ignored.
  const float* x_scales = nullptr;
  ScaleStrides x_strides;
  int64_t x_scales_group = 0;
  // SwiGLU fused into the load (ops/quantize.h; groups == 1): x holds the E4M3 codes of gate|up
  // [rows, x_cols = 2F] with 1x128 scales x_scales; swiglu = 1 quantizes swiglu_forward's output (cols = F),
  // swiglu = 2 swiglu_backward's d(gate|up) (cols = 2F) from dout (BF16 [rows, F], row stride ld_dout), each value
  // rounded to BF16 first as the unfused ops round it. F % 128 == 0.
  int swiglu = 0;
  int64_t x_cols = 0;
  const void* dout = nullptr;
  int64_t ld_dout = 0;
};
void quantize_1x128(const Quant1x128Args& a, cudaStream_t stream);

// SwiGLU's forward fused with its row-wise 1x128 quantizations (ops::quantize_swiglu_gate_up): from gate|up x (BF16
// [rows, 2F], row stride ld_x, F % 128 == 0), the E4M3 codes of x itself (the FP8 SwiGLU-input cache; skipped when
// cache is null) and act = silu(gate)·up rounded to BF16, quantized in act_format; each the bits the 1x128 quantizer
// and the SwiGLU kernel give separately. Scales at r * strides.row + block * strides.col; nearest rounding.
struct QuantSwigluGateUpArgs {
  const void* x = nullptr;
  int64_t rows = 0, ffn = 0, ld_x = 0;
  uint8_t* cache = nullptr;
  float* cache_scales = nullptr;
  ScaleStrides cache_strides;
  bool cache_pow2 = false;
  uint8_t* act = nullptr;
  float* act_scales = nullptr;
  ScaleStrides act_strides;
  bool act_pow2 = false;
  quant::Format act_format = quant::Format::E4M3;
  Encoder encoder = Encoder::Hardware;
};
void quantize_swiglu_gate_up(const QuantSwigluGateUpArgs& a, cudaStream_t stream);

// 128x128 blocks; q_scales: [ceil(rows/128), ceil(cols/128)] blocks; qt_scales: the transposed grid.
struct Quant128x128Args {
  const void* x = nullptr;
  InType x_type = InType::BF16;
  int64_t rows = 0, cols = 0;
  QuantOptions opt;
  uint8_t* q = nullptr;
  float* q_scales = nullptr;
  ScaleStrides q_strides;
  uint8_t* qt = nullptr;
  float* qt_scales = nullptr;
  ScaleStrides qt_strides;
  // Row groups in one launch (MoE experts): `groups` equal groups of rows / groups rows each, a multiple of 128 when
  // groups > 1 (no tile straddles a group). Group g's rows, codes and transposed codes are its own [rg, cols] /
  // [cols, rg] matrices (consecutive, as QTensor stores them); its scale grids start g * *_scales_group floats in.
  int64_t groups = 1;
  int64_t q_scales_group = 0, qt_scales_group = 0;
};
void quantize_128x128(const Quant128x128Args& a, cudaStream_t stream);

// Any block shape (block_rows x block_cols; both 0 = one scale for the whole tensor), any rows/cols.
// amax_scratch: per tensor only (block 0x0): 16 bytes of device memory for the amax and the scale pair.
struct QuantBlocksArgs {
  const void* x = nullptr;
  InType x_type = InType::BF16;
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 0, block_cols = 0;
  QuantOptions opt;
  uint8_t* q = nullptr;
  float* scales = nullptr;
  ScaleStrides strides;
  uint32_t* amax_scratch = nullptr;
};
void quantize_blocks(const QuantBlocksArgs& a, cudaStream_t stream);

// E5M6 (12-bit codes, packed 8 per 12 bytes) with 1x128 tiles; cols % 8 == 0. packed: 12 * rows*cols/8 bytes.
struct QuantE5M6Args {
  const void* x = nullptr;
  InType x_type = InType::BF16;
  int64_t rows = 0, cols = 0;
  bool pow2_scales = true;
  uint8_t* packed = nullptr;
  float* scales = nullptr;
  ScaleStrides strides;
};
void quantize_e5m6_1x128(const QuantE5M6Args& a, cudaStream_t stream);
// out [rows, cols] (F32 or BF16, the latter rounded to nearest even) = e5m6_decode(code) * scale.
void dequantize_e5m6_1x128(const uint8_t* packed, const float* scales, ScaleStrides strides, int64_t rows,
                           int64_t cols, void* out, InType out_type, cudaStream_t stream);

// out [rows, cols] = decode(code) * scale of the (block_rows x block_cols) block (0,0: per tensor).
struct DequantArgs {
  const uint8_t* q = nullptr;
  quant::Format format = quant::Format::E4M3;
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 0, block_cols = 0;
  const float* scales = nullptr;
  ScaleStrides strides;
  void* out = nullptr;
  InType out_type = InType::F32;
};
void dequantize(const DequantArgs& a, cudaStream_t stream);

// ---- transposes: the column-wise payload of square blocks, and of any blocks quantized on x -----------------------
// One-byte codes, `batches` matrices: dst[z·dst_batch + c·rows + r] = src[z·src_batch + r·cols + c].
void transpose_codes(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols, int64_t batches, int64_t src_batch,
                     int64_t dst_batch, cudaStream_t stream);
// Where block (g, r, c) of a scale grid lives: scales[g·group + r·row + c·col].
struct GridStrides {
  int64_t row = 0, col = 0, group = 0;
};
// dst block (g, c, r) = src block (g, r, c) for r < rows, c < cols, g < groups (a scale grid transposed).
void transpose_scales(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides, int64_t rows,
                      int64_t cols, int64_t groups, cudaStream_t stream);
// dst block (g, r, c) = src block (g, r / block_rows, c) for r < rows, c < cols, g < groups (block scales repeated
// on every row of their blocks).
void expand_scale_rows(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides, int64_t rows,
                       int64_t cols, int64_t groups, int64_t block_rows, cudaStream_t stream);

// ---- per-tensor amax and delayed scaling (TE-style `fp8-tensorwise`) ----------------------------------------
// amax_bits (device, one uint32) = max(amax_bits, bits of max |x|) — NaN-propagating, like quant::amax_of.
// Set *amax_bits = 0 first (cudaMemsetAsync) to start a new reduction.
void amax_accumulate(const void* x, InType x_type, int64_t n, uint32_t* amax_bits, cudaStream_t stream);

// Per-tensor quantization with the device-resident {scale, inverse} pair `scale_inverse` (2 floats): codes =
// encode(x * inverse), *scale_out = scale. If amax_bits is given, the amax of x is accumulated into it in the
// same pass (delayed scaling measures the tensor it quantizes).
struct QuantWithScaleArgs {
  const void* x = nullptr;
  InType x_type = InType::BF16;
  int64_t rows = 0, cols = 0;
  QuantOptions opt;  // pow2_scales is ignored: the scale is given
  const float* scale_inverse = nullptr;
  uint8_t* q = nullptr;
  float* scale_out = nullptr;
  uint32_t* amax_bits = nullptr;
};
void quantize_with_scale(const QuantWithScaleArgs& a, cudaStream_t stream);

// Amax history on the device, with quant::AmaxHistory's rules (quant.h): a ring of `length` floats plus
// {size, next} and an error word. compute writes {scale, inverse} from the history before the tensor;
// push appends the tensor's amax, or, if it is negative or not finite, leaves the history unchanged and
// sets the error word to 1 (the host reads it and throws at its next check).
struct DeviceAmaxHistoryView {
  float* entries = nullptr;   // [length]
  int32_t* state = nullptr;   // [3]: size, next write position, error flag
  int length = 1;
  bool most_recent = false;   // AmaxAlgorithm::MostRecent (else Max)
  int margin = 0;
};
void delayed_compute_scale(const DeviceAmaxHistoryView& h, quant::Format format, bool pow2_scales,
                           float* scale_inverse, cudaStream_t stream);
void delayed_push_amax(const DeviceAmaxHistoryView& h, const uint32_t* amax_bits, cudaStream_t stream);

}  // namespace fp8train::ops::cuda
