// CUDA launchers of the quantization ops (ops/quantize.h) on today's kernels (quantize_cuda.h):
//   row-wise     1x128 / 128x128 fast paths (cols % 16 == 0, 16-byte aligned), quantize_blocks for any other block
//                shape or size and per tensor, the E5M6 1x128 quantizer
//   column-wise  the fused 1x128 (+ xᵀ 1x128, i.e. x's 128x1 tiles) and 128x128 (+ Wᵀ) kernels (rows per group
//                % 16 == 0); otherwise x quantized under the transposed blocks into scratch and transposed
//                (transpose.cu) — the CPU kernel's definition, stochastic positions counted in x
//   delayed      amax history compute -> per-tensor codes (amax measured in the same pass) -> push
//   dequantize   decode · scale into F32 / BF16 (cols % 8 == 0), E5M6 1x128
//   with_colwise square blocks: the transposed codes and scales; otherwise dequantize + the column-wise path
// Row groups run as one launch when no block straddles a group (1xG tiles, or groups of whole block rows);
// otherwise one launch per group, whose stochastic-rounding positions would restart at each group's first
// element, so stochastic rounding of such groups is refused.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/quantize_cuda.h"
#include "ops/quantize.h"
#include "tensor/cuda/cuda_check.h"

namespace fp8train::ops::cuda {
namespace kernels {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
InType in_type(DType t) { return t == DType::F32 ? InType::F32 : InType::BF16; }
bool one_byte(quant::Format f) {
  return f == quant::Format::E4M3 || f == quant::Format::E5M2 || f == quant::Format::INT8;
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
ScaleStrides kernel_strides(const quant::ScaleGrid& g) {
  const quant::ScaleStrides s = g.strides();
  return {s.row, s.col};
}
GridStrides grid_strides(const quant::ScaleGrid& g) {
  const quant::ScaleStrides s = g.strides();
  return {s.row, s.col, s.group};
}
QuantOptions options_of(const quant::QuantSpec& s) {
  QuantOptions o;
  o.format = s.format;
  o.pow2_scales = s.scale_mode == quant::ScaleMode::PowerOfTwo;
  o.stochastic = s.rounding == quant::Rounding::Stochastic;
  o.seed = s.seed;
  o.encoder = Encoder::Hardware;
  return o;
}
// Groups that can run as one launch: no block straddles a group boundary, and the grid's group stride is what a
// single grid over all rows would use.
bool collapsible(const quant::Granularity& g, int64_t group_rows, int64_t groups) {
  if (groups == 1) return true;
  if (g.per_tensor) return false;
  return g.block_rows == 1 || group_rows % g.block_rows == 0;
}

// Row-wise payload of x [rows, cols] (one launch's rows) under spec into codes / scales with the given strides.
void quantize_rowwise(const ExecCtx& ctx, const quant::QuantSpec& spec, const void* x, InType type, int64_t rows,
                      int64_t cols, uint8_t* codes, float* scales, ScaleStrides strides) {
  const cudaStream_t stream = stream_of(ctx);
  const quant::Granularity& g = spec.granularity;
  const bool fast = cols % 16 == 0 && aligned16(x) && aligned16(codes);
  if (fast && g == quant::Granularity::tile_1x128()) {
    Quant1x128Args a;
    a.x = x;
    a.x_type = type;
    a.rows = rows;
    a.cols = cols;
    a.opt = options_of(spec);
    a.q = codes;
    a.q_scales = scales;
    a.q_strides = strides;
    quantize_1x128(a, stream);
    return;
  }
  if (fast && g == quant::Granularity::block_128x128()) {
    Quant128x128Args a;
    a.x = x;
    a.x_type = type;
    a.rows = rows;
    a.cols = cols;
    a.opt = options_of(spec);
    a.q = codes;
    a.q_scales = scales;
    a.q_strides = strides;
    quantize_128x128(a, stream);
    return;
  }
  QuantBlocksArgs a;
  a.x = x;
  a.x_type = type;
  a.rows = rows;
  a.cols = cols;
  a.block_rows = g.per_tensor ? 0 : g.block_rows;
  a.block_cols = g.per_tensor ? 0 : g.block_cols;
  a.opt = options_of(spec);
  a.q = codes;
  a.scales = scales;
  a.strides = strides;
  Tensor scratch;
  if (g.per_tensor) {
    scratch = ctx.scratch({4}, DType::I32);  // amax bits + the {scale, inverse} pair
    a.amax_scratch = reinterpret_cast<uint32_t*>(scratch.raw());
  }
  quantize_blocks(a, stream);
}

// The payloads of QuantizeProblem p (one-byte formats) from x on the device.
void quantize_one_byte(const ExecCtx& ctx, const QuantizeProblem& p, const void* x, const QuantizedOut& row,
                       const QuantizedOut& col) {
  const char* op = "quantize";
  const cudaStream_t stream = stream_of(ctx);
  const quant::Granularity& g = p.spec.granularity;
  const int64_t rg = p.rows / p.groups, cols = p.cols;
  const size_t esize = p.in_dtype == DType::F32 ? 4 : 2;
  const InType type = in_type(p.in_dtype);
  const bool stochastic = p.spec.rounding == quant::Rounding::Stochastic;
  const quant::ScaleGrid row_grid{g, p.rows, cols, p.groups, p.layout};
  const quant::ScaleGrid col_grid{g, p.groups * cols, rg, p.groups, p.layout};
  auto x_of = [&](int64_t grp) { return static_cast<const char*>(x) + grp * rg * cols * static_cast<int64_t>(esize); };
  auto refuse_stochastic_groups = [&](const char* what) {
    if (stochastic && p.groups > 1)
      throw_not_implemented(op, std::string("stochastic rounding of ") + std::to_string(p.groups) + " row groups (" +
                                    what + ")");
  };

  // The fused kernels write both payloads from one read of x (rows per group % 16 == 0 for the transposed stores).
  const bool fused_ok = cols % 16 == 0 && rg % 16 == 0 && aligned16(x) && (rg * cols * esize) % 16 == 0 &&
                        (g == quant::Granularity::tile_1x128() || g == quant::Granularity::block_128x128());
  if (col.codes != nullptr && fused_ok) {
    if (p.groups > 1) refuse_stochastic_groups("one launch per group");
    // Groups of whole 128-row tiles run as one launch (one wave for many small experts), others one per group.
    const bool one_launch = p.groups > 1 && rg % 128 == 0;
    for (int64_t grp = 0; grp < (one_launch ? 1 : p.groups); ++grp) {
      const quant::ScaleStrides rs = row_grid.strides(), cs = col_grid.strides();
      const int64_t launch_rows = one_launch ? p.rows : rg, launch_groups = one_launch ? p.groups : 1;
      uint8_t* q = row.codes ? static_cast<uint8_t*>(row.codes) + grp * rg * cols : nullptr;
      float* qs = row.codes ? row.scales + grp * rs.group : nullptr;
      uint8_t* qt = static_cast<uint8_t*>(col.codes) + grp * cols * rg;
      float* qts = col.scales + grp * cs.group;
      if (g == quant::Granularity::tile_1x128()) {
        Quant1x128Args a;
        a.x = x_of(grp);
        a.x_type = type;
        a.rows = launch_rows;
        a.cols = cols;
        a.opt = options_of(p.spec);
        a.q = q;
        a.q_scales = qs;
        a.q_strides = kernel_strides(row_grid);
        a.qt = qt;
        a.qt_scales = qts;
        a.qt_strides = kernel_strides(col_grid);
        a.groups = launch_groups;
        a.q_scales_group = rs.group;
        a.qt_scales_group = cs.group;
        quantize_1x128(a, stream);
      } else {
        Quant128x128Args a;
        a.x = x_of(grp);
        a.x_type = type;
        a.rows = launch_rows;
        a.cols = cols;
        a.opt = options_of(p.spec);
        a.q = q;
        a.q_scales = qs;
        a.q_strides = kernel_strides(row_grid);
        a.qt = qt;
        a.qt_scales = qts;
        a.qt_strides = kernel_strides(col_grid);
        a.groups = launch_groups;
        a.q_scales_group = rs.group;
        a.qt_scales_group = cs.group;
        quantize_128x128(a, stream);
      }
    }
    return;
  }

  if (row.codes != nullptr) {
    if (collapsible(g, rg, p.groups)) {
      quantize_rowwise(ctx, p.spec, x, type, p.rows, cols, static_cast<uint8_t*>(row.codes), row.scales,
                       kernel_strides(row_grid));
    } else {
      refuse_stochastic_groups("one launch per group");
      const quant::ScaleStrides rs = row_grid.strides();
      for (int64_t grp = 0; grp < p.groups; ++grp)
        quantize_rowwise(ctx, p.spec, x_of(grp), type, rg, cols, static_cast<uint8_t*>(row.codes) + grp * rg * cols,
                         row.scales + grp * rs.group, kernel_strides(row_grid));
    }
  }
  if (col.codes != nullptr) {
    // x under the transposed blocks into scratch (row-major scales), then each group's codes and grid transposed.
    quant::QuantSpec st = p.spec;
    st.granularity = g.transposed();
    const quant::ScaleGrid tmp_grid{st.granularity, p.rows, cols, p.groups, quant::ScaleLayout::RowMajor};
    Tensor codes = ctx.scratch({p.rows * cols}, DType::U8);
    Tensor scales = ctx.scratch({std::max<int64_t>(1, tmp_grid.numel())}, DType::F32);
    auto* c = static_cast<uint8_t*>(codes.raw());
    float* s = scales.data<float>();
    if (collapsible(st.granularity, rg, p.groups)) {
      quantize_rowwise(ctx, st, x, type, p.rows, cols, c, s, kernel_strides(tmp_grid));
    } else {
      refuse_stochastic_groups("one launch per group");
      for (int64_t grp = 0; grp < p.groups; ++grp)
        quantize_rowwise(ctx, st, x_of(grp), type, rg, cols, c + grp * rg * cols, s + grp * tmp_grid.strides().group,
                         kernel_strides(tmp_grid));
    }
    transpose_codes(c, static_cast<uint8_t*>(col.codes), rg, cols, p.groups, rg * cols, cols * rg, stream);
    transpose_scales(s, grid_strides(tmp_grid), col.scales, grid_strides(col_grid), tmp_grid.block_rows_per_group(),
                     tmp_grid.block_cols(), p.groups, stream);
  }
}

void quantize_e5m6(const ExecCtx& ctx, const QuantizeProblem& p, const void* x, const QuantizedOut& row,
                   const QuantizedOut& col) {
  const char* op = "quantize";
  if (p.spec.granularity != quant::Granularity::tile_1x128())
    throw_not_implemented(op, "E5M6 with " + p.spec.granularity.name() + " blocks (1x128 only)");
  if (col.codes != nullptr) throw_not_implemented(op, "the column-wise payload of E5M6");
  if (p.cols % 8 != 0) throw_not_implemented(op, "E5M6 rows of " + std::to_string(p.cols) + " values (a multiple of 8)");
  QuantE5M6Args a;
  a.x = x;
  a.x_type = in_type(p.in_dtype);
  a.rows = p.rows;
  a.cols = p.cols;
  a.pow2_scales = p.spec.scale_mode == quant::ScaleMode::PowerOfTwo;
  a.packed = static_cast<uint8_t*>(row.codes);
  a.scales = row.scales;
  a.strides = kernel_strides({p.spec.granularity, p.rows, p.cols, p.groups, p.layout});  // 1x128: groups collapse
  quantize_e5m6_1x128(a, stream_of(ctx));
}

void check_contiguous_input(const char* op, const QuantizeProblem& p) {
  if (p.rows > 1 && p.ld != p.cols)
    throw_not_implemented(op, "a strided input (row stride " + std::to_string(p.ld) + " for " +
                                  std::to_string(p.cols) + " columns)");
}

}  // namespace

void quantize(const ExecCtx& ctx, const QuantizeProblem& p, const void* x, const QuantizedOut& rowwise,
              const QuantizedOut& colwise) {
  check_contiguous_input("quantize", p);
  if (p.rows == 0 || p.cols == 0) {
    if (p.spec.granularity.per_tensor) {  // the CPU's scale of an empty tensor: 1
      const std::vector<float> ones(static_cast<size_t>(p.groups), 1.0f);
      for (const QuantizedOut* o : {&rowwise, &colwise})
        if (o->scales != nullptr)
          FP8T_CUDA_CHECK(cudaMemcpyAsync(o->scales, ones.data(), ones.size() * sizeof(float),
                                          cudaMemcpyHostToDevice, stream_of(ctx)));
      FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
    }
    return;
  }
  if (p.spec.format == quant::Format::E5M6) return quantize_e5m6(ctx, p, x, rowwise, colwise);
  if (!one_byte(p.spec.format))
    throw_not_implemented("quantize", std::string("format ") + std::string(quant::format_name(p.spec.format)));
  quantize_one_byte(ctx, p, x, rowwise, colwise);
}

void quantize_delayed(const ExecCtx& ctx, const QuantizeProblem& p, const AmaxHistoryProblem& h, const void* x,
                      float* entries, int32_t* meta, const QuantizedOut& rowwise, const QuantizedOut& colwise) {
  const char* op = "quantize_delayed";
  check_contiguous_input(op, p);
  if (!one_byte(p.spec.format))
    throw_not_implemented(op, std::string("format ") + std::string(quant::format_name(p.spec.format)));
  const cudaStream_t stream = stream_of(ctx);
  Tensor scratch = ctx.scratch({4}, DType::I32);  // [0]: amax bits, [1]: a scale when no row-wise payload, [2..3]: pair
  auto* amax = reinterpret_cast<uint32_t*>(scratch.raw());
  float* scale_inverse = reinterpret_cast<float*>(amax + 2);
  Tensor codes_scratch;
  uint8_t* codes = static_cast<uint8_t*>(rowwise.codes);
  float* scale_out = rowwise.scales != nullptr ? rowwise.scales : reinterpret_cast<float*>(amax + 1);
  if (codes == nullptr) {
    codes_scratch = ctx.scratch({std::max<int64_t>(1, p.rows * p.cols)}, DType::U8);
    codes = static_cast<uint8_t*>(codes_scratch.raw());
  }
  const DeviceAmaxHistoryView view{entries, meta, h.length, h.algorithm == quant::AmaxAlgorithm::MostRecent, h.margin};
  FP8T_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(uint32_t), stream));
  delayed_compute_scale(view, p.spec.format, p.spec.scale_mode == quant::ScaleMode::PowerOfTwo, scale_inverse, stream);
  if (p.rows * p.cols > 0) {
    QuantWithScaleArgs a;
    a.x = x;
    a.x_type = in_type(p.in_dtype);
    a.rows = p.rows;
    a.cols = p.cols;
    a.opt = options_of(p.spec);
    a.scale_inverse = scale_inverse;
    a.q = codes;
    a.scale_out = scale_out;
    a.amax_bits = amax;
    quantize_with_scale(a, stream);
  } else {
    FP8T_CUDA_CHECK(cudaMemcpyAsync(scale_out, scale_inverse, sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
  delayed_push_amax(view, amax, stream);
  if (colwise.codes != nullptr) {
    transpose_codes(codes, static_cast<uint8_t*>(colwise.codes), p.rows, p.cols, 1, 0, 0, stream);
    FP8T_CUDA_CHECK(cudaMemcpyAsync(colwise.scales, scale_out, sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
}

void dequantize(const ExecCtx& ctx, const DequantizeProblem& p, const void* codes, const float* scales, void* out) {
  const char* op = "dequantize";
  if (p.rows == 0 || p.cols == 0) return;
  if (p.ld_out != p.cols) throw_not_implemented(op, "a strided output");
  if (p.cols % 8 != 0) throw_not_implemented(op, "rows of " + std::to_string(p.cols) + " values (a multiple of 8)");
  const cudaStream_t stream = stream_of(ctx);
  const InType ot = p.out_dtype == DType::F32 ? InType::F32 : InType::BF16;
  const quant::ScaleGrid grid{p.granularity, p.rows, p.cols, p.groups, p.layout};
  if (p.format == quant::Format::E5M6) {
    if (p.granularity != quant::Granularity::tile_1x128())
      throw_not_implemented(op, "E5M6 with " + p.granularity.name() + " blocks (1x128 only)");
    dequantize_e5m6_1x128(static_cast<const uint8_t*>(codes), scales, kernel_strides(grid), p.rows, p.cols, out, ot,
                          stream);
    return;
  }
  if (!one_byte(p.format)) throw_not_implemented(op, std::string("format ") + std::string(quant::format_name(p.format)));
  const int64_t rg = p.rows / p.groups;
  const quant::ScaleStrides s = grid.strides();
  DequantArgs a;
  a.format = p.format;
  a.cols = p.cols;
  a.out_type = ot;
  if (p.granularity.per_tensor) {  // one block per group: block (g, 0) at scales[g]
    a.q = static_cast<const uint8_t*>(codes);
    a.rows = p.rows;
    a.block_rows = rg;
    a.block_cols = p.cols;
    a.scales = scales;
    a.strides = {s.group, 0};
    a.out = out;
    ops::cuda::dequantize(a, stream);
    return;
  }
  a.block_rows = p.granularity.block_rows;
  a.block_cols = p.granularity.block_cols;
  a.strides = kernel_strides(grid);
  if (collapsible(p.granularity, rg, p.groups)) {
    a.q = static_cast<const uint8_t*>(codes);
    a.rows = p.rows;
    a.scales = scales;
    a.out = out;
    ops::cuda::dequantize(a, stream);
    return;
  }
  const size_t esize = p.out_dtype == DType::F32 ? 4 : 2;
  for (int64_t g = 0; g < p.groups; ++g) {
    a.q = static_cast<const uint8_t*>(codes) + g * rg * p.cols;
    a.rows = rg;
    a.scales = scales + g * s.group;
    a.out = static_cast<char*>(out) + g * rg * p.cols * static_cast<int64_t>(esize);
    ops::cuda::dequantize(a, stream);
  }
}

void row_tile_scales(const ExecCtx& ctx, const RowTileScalesProblem& p, const float* from, float* to) {
  expand_scale_rows(from, grid_strides(p.from), to, grid_strides(p.to), p.from.group_rows(), p.from.block_cols(),
                    p.from.groups, p.from.granularity.block_rows, stream_of(ctx));
}

void with_colwise(const ExecCtx& ctx, const ColwiseProblem& p, const void* codes, const float* scales,
                  const QuantizedOut& colwise) {
  const char* op = "with_colwise";
  if (!one_byte(p.spec.format))
    throw_not_implemented(op, std::string("the column-wise payload of ") + std::string(quant::format_name(p.spec.format)));
  const cudaStream_t stream = stream_of(ctx);
  const quant::Granularity& g = p.spec.granularity;
  const int64_t rg = p.rows / p.groups;
  const quant::ScaleGrid row_grid{g, p.rows, p.cols, p.groups, p.layout};
  const quant::ScaleGrid col_grid{g, p.groups * p.cols, rg, p.groups, p.colwise_layout};
  if (g.square()) {  // the exact transpose of the codes and of each group's scale grid
    transpose_codes(static_cast<const uint8_t*>(codes), static_cast<uint8_t*>(colwise.codes), rg, p.cols, p.groups,
                    rg * p.cols, p.cols * rg, stream);
    transpose_scales(scales, grid_strides(row_grid), colwise.scales, grid_strides(col_grid),
                     g.per_tensor ? 1 : row_grid.block_rows_per_group(), g.per_tensor ? 1 : row_grid.block_cols(),
                     p.groups, stream);
    return;
  }
  // 1x128 E4M3/E5M2 codes: re-tiled by the fused 1x128 kernel reading the codes and their scales directly (the
  // values dequantize would write, code * scale in FP32), one launch for groups of whole 128-row tiles.
  const bool retile_ok = g == quant::Granularity::tile_1x128() && p.spec.rounding != quant::Rounding::Stochastic &&
                         (p.spec.format == quant::Format::E4M3 || p.spec.format == quant::Format::E5M2) &&
                         p.cols % 16 == 0 && rg % 16 == 0 && aligned16(codes) && (rg * p.cols) % 16 == 0;
  if (retile_ok) {
    const bool one_launch = p.groups == 1 || rg % 128 == 0;
    const quant::ScaleStrides rs = row_grid.strides(), cs = col_grid.strides();
    for (int64_t grp = 0; grp < (one_launch ? 1 : p.groups); ++grp) {
      Quant1x128Args a;
      a.x = static_cast<const uint8_t*>(codes) + grp * rg * p.cols;
      a.rows = one_launch ? p.rows : rg;
      a.cols = p.cols;
      a.opt = options_of(p.spec);
      a.qt = static_cast<uint8_t*>(colwise.codes) + grp * p.cols * rg;
      a.qt_scales = colwise.scales + grp * cs.group;
      a.qt_strides = kernel_strides(col_grid);
      a.groups = one_launch ? p.groups : 1;
      a.qt_scales_group = cs.group;
      a.x_scales = scales + grp * rs.group;
      a.x_strides = kernel_strides(row_grid);
      a.x_scales_group = rs.group;
      quantize_1x128(a, stream);
    }
    return;
  }
  // Otherwise the values are re-quantized: dequantize to scratch, then the column-wise path of quantize. With
  // power-of-two scales (the FP8 dispatch format) every code·scale is exact in BF16 -- 8 significant bits hold
  // E4M3's 4, E5M2's 3 and INT8's 7, and the exponent range is FP32's -- so the scratch is BF16: the same values in
  // half the bytes; otherwise FP32.
  const bool bf16_exact = p.spec.scale_mode == quant::ScaleMode::PowerOfTwo;
  const DType scratch_dtype = bf16_exact ? DType::BF16 : DType::F32;
  Tensor values = ctx.scratch({p.rows, p.cols}, scratch_dtype);
  DequantizeProblem d;
  d.format = p.spec.format;
  d.granularity = g;
  d.rows = p.rows;
  d.cols = p.cols;
  d.groups = p.groups;
  d.layout = p.layout;
  d.out_dtype = scratch_dtype;
  d.ld_out = p.cols;
  dequantize(ctx, d, codes, scales, values.raw());
  QuantizeProblem q;
  q.in_dtype = scratch_dtype;
  q.rows = p.rows;
  q.cols = p.cols;
  q.ld = p.cols;
  q.groups = p.groups;
  q.spec = p.spec;
  q.layout = p.colwise_layout;
  q.rowwise = false;
  q.colwise = true;
  quantize_one_byte(ctx, q, values.raw(), QuantizedOut{}, colwise);
}

void swiglu_quantize(const ExecCtx& ctx, const SwigluQuantizeProblem& p, const void* codes, const float* scales,
                     const void* dout, const QuantizedOut& rowwise, const QuantizedOut& colwise) {
  const int64_t cols = p.backward ? 2 * p.ffn_dim : p.ffn_dim;
  const quant::Granularity g = quant::Granularity::tile_1x128();
  const quant::ScaleGrid in_grid{g, p.rows, 2 * p.ffn_dim, 1, p.in_layout};
  const quant::ScaleGrid row_grid{g, p.rows, cols, 1, p.layout};
  const quant::ScaleGrid col_grid{g, cols, p.rows, 1, p.layout};
  Quant1x128Args a;
  a.x = codes;
  a.rows = p.rows;
  a.cols = cols;
  a.opt = options_of(p.spec);
  if (rowwise.codes != nullptr) {
    a.q = static_cast<uint8_t*>(rowwise.codes);
    a.q_scales = rowwise.scales;
    a.q_strides = kernel_strides(row_grid);
  }
  if (colwise.codes != nullptr) {
    a.qt = static_cast<uint8_t*>(colwise.codes);
    a.qt_scales = colwise.scales;
    a.qt_strides = kernel_strides(col_grid);
  }
  a.x_scales = scales;
  a.x_strides = kernel_strides(in_grid);
  a.swiglu = p.backward ? 2 : 1;
  a.x_cols = 2 * p.ffn_dim;
  a.dout = dout;
  a.ld_dout = p.ld_dout;
  quantize_1x128(a, stream_of(ctx));
}

void swiglu_gate_up(const ExecCtx& ctx, const SwigluGateUpProblem& p, const void* x, const QuantizedOut& cache,
                    const QuantizedOut& act) {
  const quant::Granularity g = quant::Granularity::tile_1x128();
  QuantSwigluGateUpArgs a;
  a.x = x;
  a.rows = p.rows;
  a.ffn = p.ffn_dim;
  a.ld_x = p.ld;
  if (cache.codes != nullptr) {
    a.cache = static_cast<uint8_t*>(cache.codes);
    a.cache_scales = cache.scales;
    a.cache_strides = kernel_strides(quant::ScaleGrid{g, p.rows, 2 * p.ffn_dim, 1, p.cache_layout});
    a.cache_pow2 = p.cache_spec.scale_mode == quant::ScaleMode::PowerOfTwo;
  }
  a.act = static_cast<uint8_t*>(act.codes);
  a.act_scales = act.scales;
  a.act_strides = kernel_strides(quant::ScaleGrid{g, p.rows, p.ffn_dim, 1, p.layout});
  a.act_pow2 = p.spec.scale_mode == quant::ScaleMode::PowerOfTwo;
  a.act_format = p.spec.format;
  a.encoder = options_of(p.spec).encoder;
  quantize_swiglu_gate_up(a, stream_of(ctx));
}

}  // namespace kernels
}  // namespace fp8train::ops::cuda
