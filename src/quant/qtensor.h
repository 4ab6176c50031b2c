// QTensor: one quantized matrix on any device — its QuantSpec, the row-wise codes + FP32 scales of x, and
// optionally a column-wise copy (the codes + scales of xᵀ), each in a scale layout a GEMM reads.
//
// x is [rows, cols]; its rows are `groups` equal ranges of rows / groups rows each (MoE expert weights
// [E·N, K] have groups = E), quantized independently: blocks never straddle two groups (a group whose row count
// is not a multiple of block_rows ends in a short block) and a per-tensor granularity gives one scale per
// group. groups = 1 is an ordinary matrix.
//
// Payloads (QPayload: codes + scales + layout):
//   rowwise   x [rows, cols] under spec.granularity.
//   colwise   xᵀ, group by group: group g's block is x_gᵀ [cols, rows / groups], the groups stacked along
//             rows ([groups·cols, rows / groups]), quantized under the SAME granularity applied to xᵀ. So an
//             activation's 1×128 spec gives the 1×128 tiles of xᵀ (= the 128×1 tiles of x, what Wgrad reads);
//             a weight's 128×128 spec gives Wᵀ's blocks (Dgrad).
// Codes (a Tensor on the tensor's device):
//   E4M3 / E5M2 / INT8   U8   [payload rows, payload cols], one byte per element, row-major
//   BF16                 BF16 [payload rows, payload cols]
//   E5M6                 U8   [12 · ceil(rows · cols / 8)]: 8 codes per 12 bytes over the flat row-major index
//                        (num::e5m6_pack8), the last group padded with zero codes
// Scales (F32, one per block), for a payload of R rows (all groups), C columns, Rg = R / groups rows per group,
// sr = granularity.scale_rows(Rg) block rows per group, sc = granularity.scale_cols(C):
//   per tensor           [groups, 1] (either layout)
//   RowMajor             [groups · sr, sc] row-major: block (g, br, bc) at (g·sr + br)·sc + bc  — the CPU
//                        reference layout (quant.h)
//   GemmNative, 1×G      [sc, R] "MN-major": block of row r, column block bc at bc·R + r (what cuBLASLt's
//                        VEC128 scales and fp8train's own kernels read with the fewest transactions)
//   GemmNative, blocks   [groups · sr, round_up(sc, 4)]: rows padded to a multiple of 4 block columns with
//                        zeros (cuBLASLt's 128×128 layout; 16-byte scale rows)
// pow2_scales: every scale of the tensor is an exact power of two (ScaleMode::PowerOfTwo, or BF16).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "quant/spec.h"
#include "tensor/tensor.h"

namespace fp8train::quant {

// Where block (g, br, bc) of a payload's scale grid lives: scales[g·group + br·row + bc·col].
struct ScaleStrides {
  int64_t row = 0;
  int64_t col = 0;
  int64_t group = 0;
};

// The scale grid of one payload: `rows` (all groups) × `cols` elements, `groups` groups, granularity g.
struct ScaleGrid {
  Granularity granularity;
  int64_t rows = 0, cols = 0, groups = 1;
  ScaleLayout layout = ScaleLayout::RowMajor;

  int64_t group_rows() const { return groups > 0 ? rows / groups : 0; }
  int64_t block_rows_per_group() const { return granularity.scale_rows(group_rows()); }
  int64_t block_cols() const { return granularity.scale_cols(cols); }
  // Shape of the scale Tensor (see the top of this file).
  Shape shape() const;
  int64_t numel() const;
  ScaleStrides strides() const;
  // Offset of the scale of element (r, c) (r counts over all groups).
  int64_t offset_of(int64_t r, int64_t c) const;
};

struct QPayload {
  Tensor codes;
  Tensor scales;
  ScaleLayout layout = ScaleLayout::RowMajor;
  bool defined() const { return codes.defined(); }
};

struct QTensor {
  QuantSpec spec;
  int64_t rows = 0, cols = 0;
  int64_t groups = 1;
  bool pow2_scales = false;
  QPayload rowwise;  // x [rows, cols]
  QPayload colwise;  // optional: xᵀ per group (see the top of this file)

  // Allocates the payloads asked for (codes uninitialised, scales zero) on `device`.
  static QTensor empty(const QuantSpec& spec, int64_t rows, int64_t cols, int64_t groups, bool with_rowwise,
                       bool with_colwise, ScaleLayout layout, Device device,
                       MemCategory category = MemCategory::Workspace);

  bool defined() const { return rowwise.defined() || colwise.defined(); }
  bool has_colwise() const { return colwise.defined(); }
  Format format() const { return spec.format; }
  const Granularity& granularity() const { return spec.granularity; }
  Device device() const;
  int64_t group_rows() const { return groups > 0 ? rows / groups : 0; }
  // Scale grid extents of the row-wise payload, per group (scale_rows) and across (scale_cols).
  int64_t scale_rows() const { return spec.granularity.scale_rows(group_rows()); }
  int64_t scale_cols() const { return spec.granularity.scale_cols(cols); }
  ScaleGrid rowwise_grid() const { return {spec.granularity, rows, cols, groups, rowwise.layout}; }
  ScaleGrid colwise_grid() const { return {spec.granularity, groups * cols, group_rows(), groups, colwise.layout}; }

  // The tensor of xᵀ (per group): the column-wise payload becomes the row-wise one and the reverse; rows
  // become groups·cols and cols rows / groups. Requires the column-wise payload.
  QTensor transposed() const;
  // The same tensor without its column-wise payload.
  QTensor rowwise_only() const;
  // Rows [g·rows/groups, (g+1)·rows/groups) as a groups = 1 tensor (row-wise payload, RowMajor; views, no copy
  // unless E5M6 codes must be repacked).
  QTensor group(int64_t g) const;
  // A copy on another device (both payloads).
  QTensor to(Device device, MemCategory category = MemCategory::Workspace) const;
  // Re-books every payload's storage under `category` (what a cache keeps).
  void set_category(MemCategory category) const;
  // Storage held: code and scale bytes of both payloads.
  size_t bytes() const;

  // ---- host access to the row-wise payload (a CPU tensor, any layout) --------------------------------------
  // Scale of element (r, c).
  float scale_of(int64_t r, int64_t c) const;
  // The element's code (E4M3/E5M2/INT8: the byte; BF16/E5M6: the 16-bit code) and decoded, unscaled value.
  uint32_t code_at(int64_t r, int64_t c) const;
  float decoded_at(int64_t r, int64_t c) const;
  // decoded_at * scale_of: one element of dequantize().
  float value_at(int64_t r, int64_t c) const;
  // The row-wise codes as bytes (code_bytes(format, rows·cols) of them) and scales (host pointers; CPU only).
  uint8_t* code_ptr() const;
  float* scale_ptr() const;
  size_t code_byte_count() const { return code_bytes(spec.format, rows * cols); }
  // The row-wise scales (any device) copied to the host in RowMajor order: [groups · scale_rows, scale_cols].
  std::vector<float> row_major_scales() const;
  // The row-wise code bytes (any device) copied to the host.
  std::vector<uint8_t> code_vector() const;
};

// A payload's scales re-laid out (same device; CPU tensors only for now): RowMajor <-> GemmNative.
QPayload relayout_scales(const QPayload& p, const ScaleGrid& from, ScaleLayout to, MemCategory category);

}  // namespace fp8train::quant
