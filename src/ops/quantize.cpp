// Quantization entry points (ops/quantize.h): validate, allocate the QTensor's payloads on ctx's device, and call
// the device's launcher.
#include "ops/quantize.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "ops/checks.h"
#include "ops/swiglu.h"

namespace fp8train::ops {

std::string_view quantize_outputs_name(QuantizeOutputs o) {
  switch (o) {
    case QuantizeOutputs::Rowwise: return "rowwise";
    case QuantizeOutputs::Colwise: return "colwise";
    case QuantizeOutputs::Both: return "both";
  }
  return "?";
}

namespace {

int64_t ld_of(const Tensor& m) { return m.size(0) > 1 ? m.ld() : m.size(1); }

void check_input(const char* op, const ExecCtx& ctx, const Tensor& x) {
  check::matrix(op, "x", x);
  FP8T_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "{}: x must be F32 or BF16, got {}", op,
             dtype_name(x.dtype()));
  check::on_device(op, ctx, {&x});
}

// E5M6 packs 8 codes per 12 bytes over the flat index: a group must start on a packing boundary.
void check_groups(const char* op, const quant::QuantSpec& spec, int64_t rows, int64_t cols, int64_t groups) {
  FP8T_CHECK(groups >= 1 && rows % groups == 0, "{}: {} rows do not split into {} equal groups", op, rows, groups);
  FP8T_CHECK(spec.format != quant::Format::E5M6 || groups == 1 || (rows / groups * cols) % 8 == 0,
             "{}: E5M6 groups of [{}, {}] elements do not start on 8-code packing boundaries", op, rows / groups, cols);
}

// The profile key of a quantization op: its name, or with a shape-recording profile "name RxC outputs".
std::string profile_key(const ExecCtx& ctx, const char* op, int64_t rows, int64_t cols, std::string_view outputs) {
  if (ctx.profile == nullptr || !ctx.profile->shapes()) return op;
  return fmt::format("{} {}x{} {}", op, rows, cols, outputs);
}
const char* outputs_name(bool rowwise, bool colwise) { return rowwise && colwise ? "both" : rowwise ? "rowwise" : "colwise"; }

QuantizedOut out_of(const quant::QPayload& p) {
  if (!p.defined()) return {};
  return {p.codes.raw(), p.scales.data<float>()};
}

QuantizeProblem problem_of(const Tensor& x, const quant::QuantSpec& spec, QuantizeOutputs outputs,
                           quant::ScaleLayout layout, int64_t groups) {
  QuantizeProblem p;
  p.in_dtype = x.dtype();
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.ld = ld_of(x);
  p.groups = groups;
  p.spec = spec;
  p.layout = layout;
  p.rowwise = outputs != QuantizeOutputs::Colwise;
  p.colwise = outputs != QuantizeOutputs::Rowwise;
  return p;
}

}  // namespace

quant::QTensor quantize(const ExecCtx& ctx, const Tensor& x, const quant::QuantSpec& spec, QuantizeOutputs outputs,
                        quant::ScaleLayout layout, int64_t groups, MemCategory category) {
  const char* op = "quantize";
  check_input(op, ctx, x);
  quant::check_spec(spec, op);
  check_groups(op, spec, x.size(0), x.size(1), groups);
  const QuantizeProblem p = problem_of(x, spec, outputs, layout, groups);
  quant::QTensor q =
      quant::QTensor::empty(spec, p.rows, p.cols, groups, p.rowwise, p.colwise, layout, ctx.device, category);
  const std::string key = profile_key(ctx, op, p.rows, p.cols, outputs_name(p.rowwise, p.colwise));
  launcher(ctx, &OpTable::quantize, key)(ctx, p, x.raw(), out_of(q.rowwise), out_of(q.colwise));
  return q;
}

// ---- delayed scaling ------------------------------------------------------------------------------------------
AmaxHistoryState AmaxHistoryState::make(const ExecCtx& ctx, int length, quant::AmaxAlgorithm algorithm, int margin,
                                        MemCategory category) {
  // quant::AmaxHistory's checks (length, margin, algorithm), with its messages.
  const quant::AmaxHistory rules(length, algorithm, margin);
  AmaxHistoryState h;
  h.entries = Tensor::zeros({length}, DType::F32, category, ctx.device);
  h.meta = Tensor::zeros({3}, DType::I32, category, ctx.device);
  h.length = rules.length();
  h.algorithm = rules.algorithm();
  h.margin = rules.margin();
  return h;
}

std::vector<float> AmaxHistoryState::window() const {
  const std::vector<float> e = entries.to_vector<float>();
  const std::vector<int32_t> m = meta.to_vector<int32_t>();
  std::vector<float> out(static_cast<size_t>(m[0]));
  for (int32_t i = 0; i < m[0]; ++i) out[static_cast<size_t>(i)] = e[static_cast<size_t>((m[1] - m[0] + i + length) % length)];
  return out;
}

void AmaxHistoryState::check() const {
  const std::vector<int32_t> m = meta.to_vector<int32_t>();
  FP8T_CHECK(m[2] == 0, "delayed scaling: a tensor holding Inf or NaN was offered to the amax history (it was "
             "refused and the history left as it was)");
}

quant::QTensor quantize_delayed(const ExecCtx& ctx, const Tensor& x, const quant::QuantSpec& spec,
                                AmaxHistoryState& history, QuantizeOutputs outputs, quant::ScaleLayout layout,
                                MemCategory category) {
  const char* op = "quantize_delayed";
  check_input(op, ctx, x);
  quant::QuantSpec s = spec;
  s.granularity = quant::Granularity::tensor();
  quant::check_spec(s, op);
  FP8T_CHECK(history.length >= 1 && history.entries.defined() && history.meta.defined(),
             "{}: the amax history is not made (AmaxHistoryState::make)", op);
  check::vector(op, "history.entries", history.entries, history.length);
  check::dtype(op, "history.entries", history.entries, DType::F32);
  check::vector(op, "history.meta", history.meta, 3);
  check::dtype(op, "history.meta", history.meta, DType::I32);
  check::on_device(op, ctx, {&history.entries, &history.meta});
  const QuantizeProblem p = problem_of(x, s, outputs, layout, 1);
  quant::QTensor q = quant::QTensor::empty(s, p.rows, p.cols, 1, p.rowwise, p.colwise, layout, ctx.device, category);
  const AmaxHistoryProblem h{history.length, history.algorithm, history.margin};
  launcher(ctx, &OpTable::quantize_delayed, op)(ctx, p, h, x.raw(), history.entries.data<float>(),
                                                history.meta.data<int32_t>(), out_of(q.rowwise), out_of(q.colwise));
  return q;
}

// ---- dequantize / with_colwise ------------------------------------------------------------------------------------
namespace {
void check_quantized(const char* op, const ExecCtx& ctx, const quant::QTensor& q) {
  FP8T_CHECK(q.rowwise.defined(), "{}: the quantized tensor has no row-wise payload", op);
  quant::check_spec(q.spec, op);
  FP8T_CHECK(q.groups >= 1 && q.rows % q.groups == 0, "{}: {} rows do not split into {} groups", op, q.rows, q.groups);
  FP8T_CHECK(q.rowwise.codes.is_contiguous() && q.rowwise.scales.is_contiguous() &&
                 q.rowwise.codes.nbytes() == quant::code_bytes(q.format(), q.rows * q.cols) &&
                 q.rowwise.scales.numel() == q.rowwise_grid().numel(),
             "{}: a [{}, {}] {} tensor holds {} code bytes and {} scales, which do not match its shape and layout", op,
             q.rows, q.cols, quant::format_name(q.format()), q.rowwise.codes.nbytes(), q.rowwise.scales.numel());
  check::on_device(op, ctx, {&q.rowwise.codes, &q.rowwise.scales});
}
}  // namespace

Tensor dequantize(const ExecCtx& ctx, const quant::QTensor& q, DType out, MemCategory category) {
  const char* op = "dequantize";
  check_quantized(op, ctx, q);
  FP8T_CHECK(out == DType::F32 || out == DType::BF16, "{}: the output must be F32 or BF16, got {}", op,
             dtype_name(out));
  Tensor y = Tensor::empty({q.rows, q.cols}, out, category, ctx.device);
  DequantizeProblem p;
  p.format = q.format();
  p.granularity = q.granularity();
  p.rows = q.rows;
  p.cols = q.cols;
  p.groups = q.groups;
  p.layout = q.rowwise.layout;
  p.out_dtype = out;
  p.ld_out = q.cols;
  const std::string key = profile_key(ctx, op, p.rows, p.cols, quant::format_name(p.format));
  launcher(ctx, &OpTable::dequantize, key)(ctx, p, q.rowwise.codes.raw(), q.rowwise.scales.data<float>(), y.raw());
  return y;
}

quant::QTensor with_colwise(const ExecCtx& ctx, const quant::QTensor& q, MemCategory category,
                            std::optional<quant::ScaleLayout> colwise_layout) {
  const char* op = "with_colwise";
  check_quantized(op, ctx, q);
  if (q.has_colwise()) return q;
  check_groups(op, q.spec, q.rows, q.cols, q.groups);
  quant::QTensor out = q;
  const quant::ScaleLayout cl = colwise_layout.value_or(q.rowwise.layout);
  const quant::QTensor fresh =
      quant::QTensor::empty(q.spec, q.rows, q.cols, q.groups, false, true, cl, ctx.device, category);
  out.colwise = fresh.colwise;
  ColwiseProblem p;
  p.spec = q.spec;
  p.rows = q.rows;
  p.cols = q.cols;
  p.groups = q.groups;
  p.layout = q.rowwise.layout;
  p.colwise_layout = cl;
  const std::string key = profile_key(ctx, op, p.rows, p.cols, quant::format_name(q.format()));
  launcher(ctx, &OpTable::with_colwise, key)(ctx, p, q.rowwise.codes.raw(), q.rowwise.scales.data<float>(),
                                             out_of(out.colwise));
  return out;
}

// ---- block scales as row tiles --------------------------------------------------------------------------------------
quant::QTensor block_scales_as_row_tiles(const ExecCtx& ctx, const quant::QTensor& q, MemCategory category) {
  const char* op = "block_scales_as_row_tiles";
  check_quantized(op, ctx, q);
  const quant::Granularity& g = q.spec.granularity;
  FP8T_CHECK(!g.per_tensor && g.block_rows > 1, "{}: expects block scales (br x bc with br > 1), got {}", op, g.name());
  quant::QTensor t = q.rowwise_only();
  t.spec.granularity = quant::Granularity::row_tile(g.block_cols);
  RowTileScalesProblem p{q.rowwise_grid(), t.rowwise_grid()};
  t.rowwise.scales = Tensor::empty(p.to.shape(), DType::F32, category, ctx.device);
  const std::string key = profile_key(ctx, op, q.rows, q.cols, quant::format_name(q.format()));
  launcher(ctx, &OpTable::row_tile_scales, key)(ctx, p, q.rowwise.scales.data<float>(), t.rowwise.scales.data<float>());
  return t;
}

// ---- SwiGLU fused into quantization ----------------------------------------------------------------------------
namespace {

// A payload the fused SwiGLU kernels write: 1x128 E4M3 or E5M2 with nearest rounding.
bool fused_swiglu_output(const quant::QuantSpec& spec) {
  return spec.granularity == quant::Granularity::tile_1x128() &&
         (spec.format == quant::Format::E4M3 || spec.format == quant::Format::E5M2) &&
         spec.rounding == quant::Rounding::Nearest;
}

// Whether ctx's backend has the fused kernel for this form (ops/quantize.h lists them).
bool swiglu_fusable(const ExecCtx& ctx, const quant::QTensor& in, DType dtype, const quant::QuantSpec& spec,
                    const Tensor* dout) {
  if (!has_op_table(ctx.device.type) || op_table(ctx.device.type).swiglu_quantize == nullptr) return false;
  const bool out_ok = fused_swiglu_output(spec);
  const bool in_ok = in.groups == 1 && in.format() == quant::Format::E4M3 &&
                     in.granularity() == quant::Granularity::tile_1x128() && in.cols % 256 == 0 && in.rows % 16 == 0;
  const bool dout_ok = dout == nullptr || ((dout->size(0) <= 1 || ld_of(*dout) % 8 == 0) &&
                                           reinterpret_cast<uintptr_t>(dout->raw()) % 16 == 0);
  return dtype == DType::BF16 && out_ok && in_ok && dout_ok;
}

quant::QTensor quantize_swiglu(const ExecCtx& ctx, const quant::QTensor& in, const Tensor* dout, DType dtype,
                               const quant::QuantSpec& spec, QuantizeOutputs outputs, quant::ScaleLayout layout,
                               MemCategory category) {
  const char* op = dout ? "quantize_swiglu_backward" : "quantize_swiglu_forward";
  check_quantized(op, ctx, in);
  quant::check_spec(spec, op);
  FP8T_CHECK(in.cols % 2 == 0, "{}: in must have 2F columns (gate | up), got [{}, {}]", op, in.rows, in.cols);
  const int64_t F = in.cols / 2, cols = dout ? 2 * F : F;
  if (dout) {
    check::matrix(op, "dout", *dout, in.rows, F);
    check::on_device(op, ctx, {dout});
  }
  if (!swiglu_fusable(ctx, in, dtype, spec, dout)) {  // the composition itself
    const Tensor x = dequantize(ctx, in, dtype);
    const Tensor y = ctx.scratch({in.rows, cols}, dtype);
    if (dout) {
      swiglu_backward(ctx, x, *dout, y);
    } else {
      swiglu_forward(ctx, x, y);
    }
    return quantize(ctx, y, spec, outputs, layout, 1, category);
  }
  SwigluQuantizeProblem p;
  p.backward = dout != nullptr;
  p.rows = in.rows;
  p.ffn_dim = F;
  p.in_layout = in.rowwise.layout;
  p.ld_dout = dout ? ld_of(*dout) : 0;
  p.spec = spec;
  p.layout = layout;
  p.rowwise = outputs != QuantizeOutputs::Colwise;
  p.colwise = outputs != QuantizeOutputs::Rowwise;
  quant::QTensor q = quant::QTensor::empty(spec, in.rows, cols, 1, p.rowwise, p.colwise, layout, ctx.device, category);
  const std::string key = profile_key(ctx, op, in.rows, cols, outputs_name(p.rowwise, p.colwise));
  launcher(ctx, &OpTable::swiglu_quantize, key)(ctx, p, in.rowwise.codes.raw(), in.rowwise.scales.data<float>(),
                                                dout ? dout->raw() : nullptr, out_of(q.rowwise), out_of(q.colwise));
  return q;
}

}  // namespace

quant::QTensor quantize_swiglu_forward(const ExecCtx& ctx, const quant::QTensor& in, DType dtype,
                                       const quant::QuantSpec& spec, QuantizeOutputs outputs, quant::ScaleLayout layout,
                                       MemCategory category) {
  return quantize_swiglu(ctx, in, nullptr, dtype, spec, outputs, layout, category);
}

quant::QTensor quantize_swiglu_backward(const ExecCtx& ctx, const quant::QTensor& in, const Tensor& dout,
                                        const quant::QuantSpec& spec, QuantizeOutputs outputs,
                                        quant::ScaleLayout layout, MemCategory category) {
  FP8T_CHECK(dout.defined(), "quantize_swiglu_backward: dout is undefined");
  return quantize_swiglu(ctx, in, &dout, dout.dtype(), spec, outputs, layout, category);
}

SwigluGateUpQuantized quantize_swiglu_gate_up(const ExecCtx& ctx, const Tensor& x, const quant::QuantSpec* cache_spec,
                                              quant::ScaleLayout cache_layout, MemCategory cache_category,
                                              const quant::QuantSpec& spec, quant::ScaleLayout layout) {
  const char* op = "quantize_swiglu_gate_up";
  check_input(op, ctx, x);
  quant::check_spec(spec, op);
  if (cache_spec) quant::check_spec(*cache_spec, op);
  FP8T_CHECK(x.size(1) % 2 == 0, "{}: x must have 2F columns (gate | up), got {}", op, x.str());
  const int64_t rows = x.size(0), F = x.size(1) / 2;
  const bool fused = has_op_table(ctx.device.type) && op_table(ctx.device.type).swiglu_gate_up != nullptr &&
                     x.dtype() == DType::BF16 && F % 128 == 0 && (rows <= 1 || ld_of(x) % 8 == 0) &&
                     reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 && fused_swiglu_output(spec) &&
                     (!cache_spec || (fused_swiglu_output(*cache_spec) && cache_spec->format == quant::Format::E4M3));
  SwigluGateUpQuantized out;
  if (!fused) {  // the composition itself
    if (cache_spec)
      out.cache = quantize(ctx, x, *cache_spec, QuantizeOutputs::Rowwise, cache_layout, 1, cache_category);
    const Tensor act = ctx.scratch({rows, F}, x.dtype());
    swiglu_forward(ctx, x, act);
    out.act = quantize(ctx, act, spec, QuantizeOutputs::Rowwise, layout);
    return out;
  }
  SwigluGateUpProblem p;
  p.rows = rows;
  p.ffn_dim = F;
  p.ld = rows <= 1 ? 2 * F : ld_of(x);
  if (cache_spec) p.cache_spec = *cache_spec;
  p.cache_layout = cache_layout;
  p.spec = spec;
  p.layout = layout;
  if (cache_spec)
    out.cache =
        quant::QTensor::empty(*cache_spec, rows, 2 * F, 1, true, false, cache_layout, ctx.device, cache_category);
  out.act = quant::QTensor::empty(spec, rows, F, 1, true, false, layout, ctx.device, MemCategory::Workspace);
  const std::string key = profile_key(ctx, op, rows, 2 * F, cache_spec ? "cache+act" : "act");
  launcher(ctx, &OpTable::swiglu_gate_up, key)(ctx, p, x.raw(), out_of(out.cache.rowwise), out_of(out.act.rowwise));
  return out;
}

}  // namespace fp8train::ops
