// CPU quantization kernels (ops/quantize.h): the exact arithmetic of quant/quant.h, group by group.
//   row-wise payload of group g  = quant::quantize_into(x_g, spec)
//   column-wise payload of group g = quant::transpose_into(quant::quantize_into(x_g, spec with the granularity
//                                    transposed)) — the blocks of x_gᵀ under spec; stochastic rounding draws the
//                                    random bits of element x(r, c) from its position r·cols + c in x in both
//                                    payloads (what the fused CUDA quantizer does)
//   scales are produced row-major and then stored in the problem's layout (quant/qtensor.h ScaleGrid).
// BF16 inputs are widened to FP32 first (exact), so both input dtypes share one arithmetic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "ops/cpu/kernels.h"
#include "ops/quantize.h"

namespace fp8train::ops::cpu {
namespace {

// Rows [r0, r1) of x (F32 or BF16, row stride ld) as contiguous FP32.
std::vector<float> load_rows(DType dtype, const void* x, int64_t ld, int64_t r0, int64_t r1, int64_t cols) {
  std::vector<float> out(static_cast<size_t>((r1 - r0) * cols));
#pragma omp parallel for schedule(static) if ((r1 - r0) * cols > 65536)
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out.data() + (r - r0) * cols;
    if (dtype == DType::F32) {
      std::memcpy(o, static_cast<const float*>(x) + r * ld, static_cast<size_t>(cols) * sizeof(float));
    } else {
      const bf16* src = static_cast<const bf16*>(x) + r * ld;
      for (int64_t c = 0; c < cols; ++c) o[c] = static_cast<float>(src[c]);
    }
  }
  return out;
}

// Group g's row-major scale grid [sr, sc] into a payload's scale tensor of `grid`'s layout.
void store_scales(const quant::ScaleGrid& grid, int64_t g, const float* row_major, float* out) {
  const quant::ScaleStrides s = grid.strides();
  const int64_t sr = grid.block_rows_per_group(), sc = grid.block_cols();
  if (grid.granularity.per_tensor) {
    out[g * s.group] = row_major[0];
    return;
  }
  for (int64_t br = 0; br < sr; ++br)
    for (int64_t bc = 0; bc < sc; ++bc) out[g * s.group + br * s.row + bc * s.col] = row_major[br * sc + bc];
}

// Group g's scales read back row-major [sr, sc] from a payload of `grid`'s layout.
std::vector<float> load_scales(const quant::ScaleGrid& grid, int64_t g, const float* scales) {
  const quant::ScaleStrides s = grid.strides();
  const int64_t sr = grid.granularity.per_tensor ? 1 : grid.block_rows_per_group();
  const int64_t sc = grid.granularity.per_tensor ? 1 : grid.block_cols();
  std::vector<float> out(static_cast<size_t>(sr * sc));
  if (grid.granularity.per_tensor) {
    out[0] = scales[g * s.group];
    return out;
  }
  for (int64_t br = 0; br < sr; ++br)
    for (int64_t bc = 0; bc < sc; ++bc) out[br * sc + bc] = scales[g * s.group + br * s.row + bc * s.col];
  return out;
}

// [rows, cols] → [cols, rows], in 32×32 tiles so both sides stay in cache.
std::vector<float> transpose_f32(const float* v, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  constexpr int64_t kTile = 32;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t c0 = 0; c0 < cols; c0 += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) out[c * rows + r] = v[r * cols + c];
  return out;
}

int64_t scale_count(const quant::Granularity& g, int64_t rows, int64_t cols) {
  return g.scale_rows(rows) * g.scale_cols(cols);
}

// Writes the payloads of group g from its FP32 values v [rg, cols]. `encode` quantizes a [rows, cols] buffer into
// codes + row-major scales (online or with a given scale); counter_base is the group's first flat index in x.
template <class Encode>
void write_group(const QuantizeProblem& p, int64_t g, const std::vector<float>& v, const QuantizedOut& row,
                 const QuantizedOut& col, Encode&& encode) {
  const quant::Format f = p.spec.format;
  const quant::Granularity gr = p.spec.granularity;
  const int64_t rg = p.rows / p.groups, cols = p.cols;
  const uint64_t counter_base = static_cast<uint64_t>(g * rg * cols);
  if (row.codes != nullptr) {
    const quant::ScaleGrid grid{gr, p.rows, cols, p.groups, p.layout};
    std::vector<float> rm(static_cast<size_t>(std::max<int64_t>(1, scale_count(gr, rg, cols))), 1.0f);
    encode(v.data(), rg, cols, gr, static_cast<uint8_t*>(row.codes) + quant::code_bytes(f, g * rg * cols), rm.data(),
           counter_base);
    if (rg * cols > 0 || gr.per_tensor) store_scales(grid, g, rm.data(), row.scales);
  }
  if (col.codes != nullptr) {
    const quant::ScaleGrid grid{gr, p.groups * cols, rg, p.groups, p.layout};
    if (p.spec.rounding != quant::Rounding::Stochastic) {
      // x_gᵀ in FP32, quantized under spec straight into the payload: the same blocks, amaxes and codes as the
      // general path below (an amax does not depend on the order it is taken in), at row-wise speed.
      const std::vector<float> vt = transpose_f32(v.data(), rg, cols);
      std::vector<float> rm(static_cast<size_t>(std::max<int64_t>(1, scale_count(gr, cols, rg))), 1.0f);
      encode(vt.data(), cols, rg, gr, static_cast<uint8_t*>(col.codes) + quant::code_bytes(f, g * cols * rg), rm.data(),
             counter_base);
      if (rg * cols > 0 || gr.per_tensor) store_scales(grid, g, rm.data(), col.scales);
      return;
    }
    // Stochastic rounding draws element x(r, c)'s random bits from its position in x, so x_g is quantized under
    // the transposed blocks and the codes transposed: the blocks of x_gᵀ under spec.
    const quant::Granularity gt = gr.transposed();
    std::vector<uint8_t> codes(quant::code_bytes(f, rg * cols));
    std::vector<float> rm(static_cast<size_t>(std::max<int64_t>(1, scale_count(gt, rg, cols))), 1.0f);
    encode(v.data(), rg, cols, gt, codes.data(), rm.data(), counter_base);
    std::vector<float> rm_t(rm.size(), 1.0f);
    quant::transpose_into(codes.data(), rm.data(), rg, cols, f, gt,
                          static_cast<uint8_t*>(col.codes) + quant::code_bytes(f, g * cols * rg), rm_t.data());
    if (rg * cols > 0 || gr.per_tensor) store_scales(grid, g, rm_t.data(), col.scales);
  }
}

}  // namespace

void quantize(const ExecCtx&, const QuantizeProblem& p, const void* x, const QuantizedOut& rowwise,
              const QuantizedOut& colwise) {
  const int64_t rg = p.rows / p.groups;
  for (int64_t g = 0; g < p.groups; ++g) {
    const std::vector<float> v = load_rows(p.in_dtype, x, p.ld, g * rg, (g + 1) * rg, p.cols);
    write_group(p, g, v, rowwise, colwise,
                [&](const float* xv, int64_t rows, int64_t cols, const quant::Granularity& gran, uint8_t* codes,
                    float* scales, uint64_t counter_base) {
                  quant::QuantSpec s = p.spec;
                  s.granularity = gran;
                  quant::quantize_into(xv, rows, cols, s, codes, scales, counter_base);
                });
  }
}

void quantize_delayed(const ExecCtx&, const QuantizeProblem& p, const AmaxHistoryProblem& h, const void* x,
                      float* entries, int32_t* meta, const QuantizedOut& rowwise, const QuantizedOut& colwise) {
  const std::vector<float> v = load_rows(p.in_dtype, x, p.ld, 0, p.rows, p.cols);
  const float amax = p.rows * p.cols == 0 ? 0.0f : quant::tensor_amax(v.data(), p.rows * p.cols);
  if (!std::isfinite(amax)) {
    meta[2] = 1;  // the history stays as it was (quant::AmaxHistory::push refuses such an amax)
    FP8T_FAIL("delayed scaling: the [{}, {}] tensor holds Inf or NaN (amax {}); the amax history is unchanged",
              p.rows, p.cols, amax);
  }
  // The scale from the history before this tensor (quant::AmaxHistory::scale).
  const int size = meta[0], next = meta[1];
  float reference = 0.0f;
  if (size > 0) {
    if (h.algorithm == quant::AmaxAlgorithm::MostRecent) {
      reference = entries[(next - 1 + h.length) % h.length];
    } else {
      for (int i = 0; i < size; ++i) reference = std::max(reference, entries[i]);
    }
  }
  quant::BlockScale scale{1.0f, 1.0f};
  if (reference != 0.0f && quant::is_scaled(p.spec.format)) {
    const float margin = num::bits_float(static_cast<uint32_t>(h.margin + 127) << 23);  // 2^margin, exact
    scale = quant::block_scale(reference * margin, p.spec.format, p.spec.scale_mode);
  }
  write_group(p, 0, v, rowwise, colwise,
              [&](const float* xv, int64_t rows, int64_t cols, const quant::Granularity&, uint8_t* codes,
                  float* scales, uint64_t counter_base) {
                quant::quantize_with_scale_into(xv, rows, cols, p.spec.format, scale, p.spec.rounding, p.spec.seed,
                                                codes, scales, counter_base);
              });
  // Push amax(x) (quant::AmaxHistory::push).
  entries[next] = amax;
  meta[1] = (next + 1) % h.length;
  meta[0] = std::min(size + 1, h.length);
}

void dequantize(const ExecCtx&, const DequantizeProblem& p, const void* codes, const float* scales, void* out) {
  const quant::ScaleGrid grid{p.granularity, p.rows, p.cols, p.groups, p.layout};
  const quant::ScaleStrides s = grid.strides();
  const int64_t rg = p.rows / p.groups, cols = p.cols;
  const auto* code_bytes = static_cast<const uint8_t*>(codes);
#pragma omp parallel if (p.rows * p.cols > 65536)
  {
    std::vector<uint16_t> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const int64_t g = r / rg, rl = r % rg;
      quant::unpack_row_codes(code_bytes, p.format, cols, r, row.data());
      const float* srow = p.granularity.per_tensor ? scales + g * s.group
                                                   : scales + g * s.group + (rl / p.granularity.block_rows) * s.row;
      const int64_t bc = p.granularity.per_tensor ? cols + 1 : p.granularity.block_cols;
      const int64_t col_stride = p.granularity.per_tensor ? 0 : s.col;
      if (p.out_dtype == DType::F32) {
        float* o = static_cast<float*>(out) + r * p.ld_out;
        for (int64_t c = 0; c < cols; ++c) o[c] = quant::decode(p.format, row[c]) * srow[(c / bc) * col_stride];
      } else {
        bf16* o = static_cast<bf16*>(out) + r * p.ld_out;
        for (int64_t c = 0; c < cols; ++c) o[c] = bf16(quant::decode(p.format, row[c]) * srow[(c / bc) * col_stride]);
      }
    }
  }
}

// to (g, r, bc) = from (g, r / block_rows, bc): every scale of the 1×bc grid written (neither layout pads it).
void row_tile_scales(const ExecCtx&, const RowTileScalesProblem& p, const float* from, float* to) {
  const quant::ScaleStrides a = p.from.strides(), b = p.to.strides();
  const int64_t rg = p.from.group_rows(), sc = p.from.block_cols(), br = p.from.granularity.block_rows;
  for (int64_t g = 0; g < p.from.groups; ++g)
    for (int64_t r = 0; r < rg; ++r)
      for (int64_t c = 0; c < sc; ++c)
        to[g * b.group + r * b.row + c * b.col] = from[g * a.group + (r / br) * a.row + c * a.col];
}

void with_colwise(const ExecCtx&, const ColwiseProblem& p, const void* codes, const float* scales,
                  const QuantizedOut& colwise) {
  const quant::Format f = p.spec.format;
  const quant::Granularity gr = p.spec.granularity;
  const int64_t rg = p.rows / p.groups, cols = p.cols;
  const quant::ScaleGrid row_grid{gr, p.rows, cols, p.groups, p.layout};
  const quant::ScaleGrid col_grid{gr, p.groups * cols, rg, p.groups, p.colwise_layout};
  const auto* src = static_cast<const uint8_t*>(codes);
  auto* dst = static_cast<uint8_t*>(colwise.codes);
  for (int64_t g = 0; g < p.groups; ++g) {
    const uint8_t* gc = src + quant::code_bytes(f, g * rg * cols);
    const std::vector<float> rm = load_scales(row_grid, g, scales);
    uint8_t* out_codes = dst + quant::code_bytes(f, g * cols * rg);
    if (gr.square()) {  // the exact transpose of codes and scales
      std::vector<float> rm_t(rm.size());
      quant::transpose_into(gc, rm.data(), rg, cols, f, gr, out_codes, rm_t.data());
      if (rg * cols > 0 || gr.per_tensor) store_scales(col_grid, g, rm_t.data(), colwise.scales);
      continue;
    }
    // dequantize, then the blocks of x_gᵀ under spec
    std::vector<float> v(static_cast<size_t>(rg * cols));
    quant::dequantize_into(gc, rm.data(), rg, cols, f, gr, v.data());
    if (p.spec.rounding != quant::Rounding::Stochastic) {  // x_gᵀ quantized straight into the payload (see quantize)
      const std::vector<float> vt = transpose_f32(v.data(), rg, cols);
      std::vector<float> st(static_cast<size_t>(std::max<int64_t>(1, scale_count(gr, cols, rg))), 1.0f);
      quant::quantize_into(vt.data(), cols, rg, p.spec, out_codes, st.data(), 0);
      if (rg * cols > 0) store_scales(col_grid, g, st.data(), colwise.scales);
      continue;
    }
    // stochastic rounding: quantized on x_g with the transposed blocks (the random bits of x's positions), transposed
    const quant::Granularity gt = gr.transposed();
    quant::QuantSpec s = p.spec;
    s.granularity = gt;
    std::vector<uint8_t> tmp(quant::code_bytes(f, rg * cols));
    std::vector<float> st(static_cast<size_t>(std::max<int64_t>(1, scale_count(gt, rg, cols))), 1.0f);
    quant::quantize_into(v.data(), rg, cols, s, tmp.data(), st.data(), static_cast<uint64_t>(g * rg * cols));
    std::vector<float> st_t(st.size(), 1.0f);
    quant::transpose_into(tmp.data(), st.data(), rg, cols, f, gt, out_codes, st_t.data());
    if (rg * cols > 0) store_scales(col_grid, g, st_t.data(), colwise.scales);
  }
}

}  // namespace fp8train::ops::cpu
