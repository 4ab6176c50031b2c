// The backend test table (after ggml's test-backend-ops): one row per op case — how to build its random inputs
// (never zeros; outputs the op allocates are poisoned first, outputs the caller passes are filled with NaN), how
// to run it on an ExecCtx, and how to compare. tests/ops/backend_ops_test.cpp runs every row on the CPU against
// its reference (the quant/ reference functions, or an FP64 evaluation for the reducing ops);
// tests/cuda/backend_ops_gpu_test.cpp runs every row on CUDA against the CPU op of the same name when a GPU is
// present. Comparisons: exact (code bytes equal; floats equal bit for bit, NaN equal to NaN), the normalized
// error 1 − 2Σxy / Σ(x² + y²) below a stated bound, or FP64 outputs value by value within a relative bound.
// Adding a row: append a BackendOpCase in the function of its op family (or a new family function listed in
// backend_cases()).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "ops/gemm.h"
#include "ops/quantize.h"
#include "ops/scaled_gemm.h"
#include "ops/swiglu.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"
#include "tensor/exec_ctx.h"

namespace fp8train::backend_test {

// One named output, read back to the host.
struct OpResult {
  std::string name;
  std::vector<uint8_t> bytes;  // code bytes, BF16 bits: compared byte for byte
  std::vector<float> floats;   // scales, F32 outputs: compared bit for bit or by normalized error
};

struct Compare {
  bool exact = true;
  double bound = 0.0;  // normalized error bound when not exact
  // FP64 outputs returned as bytes (8 per value): compared value by value, |got − want| <= bound·|want| (NaN equal
  // to NaN), instead of byte for byte.
  bool f64_relative = false;
  static Compare bits() { return {true, 0.0, false}; }
  static Compare normalized(double b) { return {false, b, false}; }
  static Compare f64_within(double relative) { return {false, relative, true}; }
};

struct BackendOpCase {
  std::string op;    // the op's name ("quantize", "scaled_gemm", ...)
  std::string name;  // the case: shapes, formats, options
  Compare cpu;       // the CPU op against `reference`
  Compare cuda;      // the CUDA op against the CPU op
  bool on_cuda = true;  // false: the CUDA backend must refuse the case with "not implemented on cuda"
  std::function<std::vector<OpResult>(const ExecCtx&, uint64_t seed)> run;
  std::function<std::vector<OpResult>(uint64_t seed)> reference;
};

// Makes the next allocations of these byte sizes on a device hand out poisoned memory (set per device by the
// test executable: the CPU half drops the CPU allocator's cache first, the CUDA half the CUDA one's).
using PoisonFn = void (*)(Device device, const std::vector<size_t>& bytes);
inline PoisonFn& poison_hook() {
  static PoisonFn fn = nullptr;
  return fn;
}
inline void poison_next(Device device, const std::vector<size_t>& bytes) {
  if (poison_hook() != nullptr) poison_hook()(device, bytes);
}

// ---- inputs --------------------------------------------------------------------------------------------------
// rows × cols values, never zero: random signs, magnitudes e^U(-2, 2) times a per-row and per-128-column band
// factor spanning six decades (so block scales differ everywhere).
inline std::vector<float> random_values(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> mag(-2.0f, 2.0f), decade(-3.0f, 3.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> row_f(static_cast<size_t>(rows)), band_f(static_cast<size_t>((cols + 127) / 128));
  for (auto& f : row_f) f = std::pow(10.0f, decade(gen) * 0.5f);
  for (auto& f : band_f) f = std::pow(10.0f, decade(gen) * 0.5f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = std::exp(mag(gen)) * row_f[static_cast<size_t>(r)] * band_f[static_cast<size_t>(c / 128)];
      x[static_cast<size_t>(r * cols + c)] = sign(gen) ? v : -v;
    }
  return x;
}

// The values as the op's input: F32, or BF16 (then `x` is rounded in place to what the op sees).
inline Tensor input_on(const ExecCtx& ctx, std::vector<float>& x, int64_t rows, int64_t cols, DType dtype) {
  if (dtype == DType::BF16) {
    std::vector<bf16> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      b[i] = bf16(x[i]);
      x[i] = static_cast<float>(b[i]);
    }
    return Tensor::from_vector(b, {rows, cols}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
  }
  return Tensor::from_vector(x, {rows, cols}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
}

// ---- results -------------------------------------------------------------------------------------------------
inline OpResult bytes_of(const std::string& name, const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t.clone() : t.to(Device::cpu());
  OpResult r{name, {}, {}};
  const auto* p = static_cast<const uint8_t*>(h.raw());
  r.bytes.assign(p, p + h.nbytes());
  return r;
}
inline OpResult floats_of(const std::string& name, const Tensor& t) {
  return {name, {}, (t.device().is_cpu() ? t.clone() : t.to(Device::cpu())).to_vector<float>()};
}
// A QTensor's payloads as they are stored (codes and scales, layout and padding included).
inline void add_payloads(std::vector<OpResult>& out, const quant::QTensor& q, const std::string& prefix = "") {
  if (q.rowwise.defined()) {
    out.push_back(bytes_of(prefix + "rowwise codes", q.rowwise.codes));
    out.push_back(floats_of(prefix + "rowwise scales", q.rowwise.scales));
  }
  if (q.colwise.defined()) {
    out.push_back(bytes_of(prefix + "colwise codes", q.colwise.codes));
    out.push_back(floats_of(prefix + "colwise scales", q.colwise.scales));
  }
}

inline double normalized_error(const std::vector<float>& x, const std::vector<float>& y) {
  double xy = 0, sq = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += static_cast<double>(x[i]) * y[i];
    sq += static_cast<double>(x[i]) * x[i] + static_cast<double>(y[i]) * y[i];
  }
  return sq == 0 ? 0.0 : 1.0 - 2.0 * xy / sq;
}

// An empty string when got matches want under `compare`, else what differs first.
inline std::string compare_results(const std::vector<OpResult>& got, const std::vector<OpResult>& want,
                                   const Compare& compare) {
  if (got.size() != want.size()) return "the op returned " + std::to_string(got.size()) + " outputs, want " +
                                        std::to_string(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const OpResult& g = got[i];
    const OpResult& w = want[i];
    if (g.name != w.name) return "output " + std::to_string(i) + " is '" + g.name + "', want '" + w.name + "'";
    if (g.bytes.size() != w.bytes.size() || g.floats.size() != w.floats.size())
      return w.name + ": " + std::to_string(g.bytes.size() + g.floats.size()) + " elements, want " +
             std::to_string(w.bytes.size() + w.floats.size());
    if (compare.f64_relative && w.bytes.size() % sizeof(double) == 0) {
      for (size_t j = 0; j < w.bytes.size() / sizeof(double); ++j) {
        double gv, wv;
        std::memcpy(&gv, g.bytes.data() + j * sizeof(double), sizeof(double));
        std::memcpy(&wv, w.bytes.data() + j * sizeof(double), sizeof(double));
        const bool same =
            (std::isnan(gv) && std::isnan(wv)) || gv == wv || std::abs(gv - wv) <= compare.bound * std::abs(wv);
        if (!same)
          return w.name + ": value " + std::to_string(j) + " is " + fmt::format("{:.17g}", gv) + ", want " +
                 fmt::format("{:.17g}", wv) + " (relative bound " + fmt::format("{:g}", compare.bound) + ")";
      }
    } else {
      for (size_t j = 0; j < w.bytes.size(); ++j)
        if (g.bytes[j] != w.bytes[j])
          return w.name + ": byte " + std::to_string(j) + " is " + std::to_string(g.bytes[j]) + ", want " +
                 std::to_string(w.bytes[j]);
    }
    if (compare.exact) {
      for (size_t j = 0; j < w.floats.size(); ++j) {
        const bool same = (std::isnan(g.floats[j]) && std::isnan(w.floats[j])) ||
                          std::memcmp(&g.floats[j], &w.floats[j], sizeof(float)) == 0;
        if (!same)
          return w.name + ": element " + std::to_string(j) + " is " + std::to_string(g.floats[j]) + ", want " +
                 std::to_string(w.floats[j]);
      }
    } else {
      const double e = normalized_error(g.floats, w.floats);
      if (!(e <= compare.bound))
        return w.name + ": normalized error " + std::to_string(e) + " above the bound " + std::to_string(compare.bound);
    }
  }
  return "";
}

// ---- quantize / dequantize / with_colwise rows ------------------------------------------------------------------
namespace detail {

inline std::string spec_name(const quant::QuantSpec& s) { return quant::describe(s); }

// The reference of quantize(x, spec, outputs, layout, groups): quant::quantize per group (row-wise), and
// quant::transpose(quant::quantize(x_g, spec with the granularity transposed)) (column-wise), the scales
// re-laid out into the payload's layout (relayout_scales).
inline quant::QTensor reference_quantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                                         const quant::QuantSpec& spec, ops::QuantizeOutputs outputs,
                                         quant::ScaleLayout layout, int64_t groups) {
  const bool row = outputs != ops::QuantizeOutputs::Colwise, col = outputs != ops::QuantizeOutputs::Rowwise;
  quant::QTensor q = quant::QTensor::empty(spec, rows, cols, groups, row, col, quant::ScaleLayout::RowMajor,
                                           Device::cpu());
  const int64_t rg = rows / groups;
  // quant::quantize counts the stochastic-rounding positions from the slice's first element; the ops count them
  // in x, so a stochastic reference is modelled for one group only.
  FP8T_CHECK(groups == 1 || spec.rounding == quant::Rounding::Nearest,
             "reference_quantize: stochastic rounding of row groups is not modelled here");
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x.data() + g * rg * cols;
    if (row) {
      const quant::QTensor part = quant::quantize(xg, rg, cols, spec);
      std::memcpy(static_cast<uint8_t*>(q.rowwise.codes.raw()) + quant::code_bytes(spec.format, g * rg * cols),
                  part.code_ptr(), part.code_byte_count());
      const int64_t n = part.rowwise.scales.numel();
      std::memcpy(q.rowwise.scales.data<float>() + g * n, part.scale_ptr(), static_cast<size_t>(n) * sizeof(float));
    }
    if (col) {
      quant::QuantSpec s = spec;
      s.granularity = spec.granularity.transposed();
      const quant::QTensor part = quant::transpose(quant::quantize(xg, rg, cols, s));
      std::memcpy(static_cast<uint8_t*>(q.colwise.codes.raw()) + quant::code_bytes(spec.format, g * cols * rg),
                  part.code_ptr(), part.code_byte_count());
      const int64_t n = part.rowwise.scales.numel();
      std::memcpy(q.colwise.scales.data<float>() + g * n, part.scale_ptr(), static_cast<size_t>(n) * sizeof(float));
    }
  }
  if (row) q.rowwise = quant::relayout_scales(q.rowwise, q.rowwise_grid(), layout, MemCategory::Workspace);
  if (col) q.colwise = quant::relayout_scales(q.colwise, q.colwise_grid(), layout, MemCategory::Workspace);
  return q;
}

inline quant::QuantSpec make_spec(quant::Format f, quant::Granularity g, bool pow2, bool stochastic = false,
                                  uint64_t seed = 0) {
  quant::QuantSpec s;
  s.format = f;
  s.granularity = g;
  s.scale_mode = pow2 ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  s.rounding = stochastic ? quant::Rounding::Stochastic : quant::Rounding::Nearest;
  s.seed = seed;
  return s;
}

inline std::string shape_name(int64_t rows, int64_t cols, int64_t groups, DType dtype) {
  std::string s = "[" + std::to_string(rows) + "x" + std::to_string(cols) + "]";
  if (groups > 1) s += " groups " + std::to_string(groups);
  return s + " " + std::string(dtype_name(dtype));
}

}  // namespace detail

inline void add_quantize_case(std::vector<BackendOpCase>& out, const quant::QuantSpec& spec,
                              ops::QuantizeOutputs outputs, quant::ScaleLayout layout, int64_t rows, int64_t cols,
                              int64_t groups, DType dtype, bool on_cuda = true) {
  BackendOpCase c;
  c.op = "quantize";
  c.name = detail::spec_name(spec) + " " + std::string(ops::quantize_outputs_name(outputs)) + " " +
           std::string(quant::scale_layout_name(layout)) + " " + detail::shape_name(rows, cols, groups, dtype);
  c.on_cuda = on_cuda;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> x = random_values(rows, cols, seed);
    const Tensor xt = input_on(ctx, x, rows, cols, dtype);
    poison_next(ctx.device, {quant::code_bytes(spec.format, rows * cols)});
    const quant::QTensor q = ops::quantize(ctx, xt, spec, outputs, layout, groups);
    std::vector<OpResult> r;
    add_payloads(r, q);
    return r;
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> x = random_values(rows, cols, seed);
    if (dtype == DType::BF16)
      for (float& v : x) v = static_cast<float>(bf16(v));
    std::vector<OpResult> r;
    add_payloads(r, detail::reference_quantize(x, rows, cols, spec, outputs, layout, groups));
    return r;
  };
  out.push_back(std::move(c));
}

inline void quantize_cases(std::vector<BackendOpCase>& out) {
  using quant::Format;
  using quant::Granularity;
  using ops::QuantizeOutputs;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  // Activations: 1x128 with the 128x1 copy (Wgrad), every one-byte format, both scale rules and layouts.
  for (Format f : {Format::E4M3, Format::E5M2, Format::INT8})
    for (bool pow2 : {false, true})
      for (DType dt : {DType::BF16, DType::F32})
        add_quantize_case(out, detail::make_spec(f, Granularity::tile_1x128(), pow2), QuantizeOutputs::Both,
                          pow2 ? GN : RM, 256, 384, 1, dt);
  add_quantize_case(out, detail::make_spec(Format::INT8, Granularity::tile_1x128(), false, true, 77),
                    QuantizeOutputs::Both, GN, 256, 512, 1, DType::BF16);
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), QuantizeOutputs::Colwise,
                    GN, 272, 400, 1, DType::F32);
  // Weights: 128x128 with Wᵀ, ragged, and MoE experts as row groups (N = 160 per expert: padded blocks).
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), QuantizeOutputs::Both,
                    GN, 384, 256, 1, DType::F32);
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), true), QuantizeOutputs::Both,
                    RM, 272, 400, 1, DType::BF16);
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), QuantizeOutputs::Both,
                    GN, 3 * 160, 256, 3, DType::F32);
  add_quantize_case(out, detail::make_spec(Format::INT8, Granularity::block_128x128(), false), QuantizeOutputs::Rowwise,
                    RM, 256, 384, 1, DType::F32);
  // Row groups of whole 128-row tiles (one launch over the groups): experts' activation gradients and stacked
  // expert weights, ragged columns.
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), QuantizeOutputs::Both, GN,
                    3 * 256, 384, 3, DType::BF16);
  add_quantize_case(out, detail::make_spec(Format::E5M2, Granularity::tile_1x128(), false), QuantizeOutputs::Both, RM,
                    2 * 128, 272, 2, DType::F32);
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), QuantizeOutputs::Both,
                    GN, 2 * 256, 400, 2, DType::BF16);
  // Any block shape, any size, per tensor (also one scale per group).
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::block(32, 64), false), QuantizeOutputs::Rowwise,
                    RM, 37, 300, 1, DType::F32);
  add_quantize_case(out, detail::make_spec(Format::E5M2, Granularity::tensor(), false), QuantizeOutputs::Rowwise, RM,
                    300, 129, 1, DType::BF16);
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::tensor(), false), QuantizeOutputs::Rowwise, RM,
                    4 * 64, 128, 4, DType::F32);
  add_quantize_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), QuantizeOutputs::Rowwise,
                    RM, 100, 200, 1, DType::F32);
  // E5M6 with power-of-two scales: the cached input of the attention output projection.
  add_quantize_case(out, detail::make_spec(Format::E5M6, Granularity::tile_1x128(), true), QuantizeOutputs::Rowwise,
                    RM, 256, 384, 1, DType::BF16);
  add_quantize_case(out, detail::make_spec(Format::E5M6, Granularity::tile_1x128(), false), QuantizeOutputs::Rowwise,
                    RM, 37, 656, 1, DType::F32);
  // The column-wise copy of E5M6 is CPU only.
  add_quantize_case(out, detail::make_spec(Format::E5M6, Granularity::tile_1x128(), true), QuantizeOutputs::Both, RM,
                    128, 256, 1, DType::F32, /*on_cuda=*/false);
}

inline void add_dequantize_case(std::vector<BackendOpCase>& out, const quant::QuantSpec& spec,
                                quant::ScaleLayout layout, int64_t rows, int64_t cols, int64_t groups, DType dtype) {
  BackendOpCase c;
  c.op = "dequantize";
  c.name = detail::spec_name(spec) + " " + std::string(quant::scale_layout_name(layout)) + " -> " +
           std::string(dtype_name(dtype)) + " " + detail::shape_name(rows, cols, groups, DType::F32);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> x = random_values(rows, cols, seed);
    const quant::QTensor q = ops::quantize(ctx, input_on(ctx, x, rows, cols, DType::F32), spec,
                                           ops::QuantizeOutputs::Rowwise, layout, groups);
    poison_next(ctx.device, {static_cast<size_t>(rows * cols) * dtype_size(dtype)});
    const Tensor y = ops::dequantize(ctx, q, dtype);
    return std::vector<OpResult>{dtype == DType::F32 ? floats_of("values", y) : bytes_of("values", y)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> x = random_values(rows, cols, seed);
    std::vector<float> v;
    const int64_t rg = rows / groups;
    for (int64_t g = 0; g < groups; ++g) {
      const std::vector<float> part = quant::dequantize(quant::quantize(x.data() + g * rg * cols, rg, cols, spec));
      v.insert(v.end(), part.begin(), part.end());
    }
    const Tensor t = Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, Device::cpu());
    if (dtype == DType::F32) return std::vector<OpResult>{floats_of("values", t)};
    std::vector<bf16> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
    return std::vector<OpResult>{
        bytes_of("values", Tensor::from_vector(b, {rows, cols}, MemCategory::Workspace, Device::cpu()))};
  };
  out.push_back(std::move(c));
}

inline void dequantize_cases(std::vector<BackendOpCase>& out) {
  using quant::Format;
  using quant::Granularity;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  for (Format f : {Format::E4M3, Format::E5M2, Format::INT8})
    for (DType dt : {DType::F32, DType::BF16}) {
      add_dequantize_case(out, detail::make_spec(f, Granularity::tile_1x128(), false), GN, 200, 272, 1, dt);
      add_dequantize_case(out, detail::make_spec(f, Granularity::block_128x128(), true), RM, 200, 264, 1, dt);
    }
  add_dequantize_case(out, detail::make_spec(Format::E4M3, Granularity::tensor(), false), RM, 96, 160, 1, DType::F32);
  add_dequantize_case(out, detail::make_spec(Format::E4M3, Granularity::block(4, 12), false), RM, 200, 264, 1,
                      DType::F32);
  add_dequantize_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), GN, 3 * 128, 256, 3,
                      DType::BF16);
  add_dequantize_case(out, detail::make_spec(Format::E5M6, Granularity::tile_1x128(), true), RM, 100, 200, 1,
                      DType::F32);
  add_dequantize_case(out, detail::make_spec(Format::E5M6, Granularity::tile_1x128(), true), RM, 64, 384, 1,
                      DType::BF16);
}

// `col_layout`: the column-wise payload's scale layout when it differs from the row-wise one (the dispatched
// experts' input: row-major rows, the Wgrad GEMM's native layout for the re-tiled copy).
inline void add_with_colwise_case(std::vector<BackendOpCase>& out, const quant::QuantSpec& spec,
                                  quant::ScaleLayout layout, int64_t rows, int64_t cols, int64_t groups,
                                  std::optional<quant::ScaleLayout> col_layout = std::nullopt) {
  BackendOpCase c;
  c.op = "with_colwise";
  c.name = detail::spec_name(spec) + " " + std::string(quant::scale_layout_name(layout)) +
           (col_layout ? " -> " + std::string(quant::scale_layout_name(*col_layout)) : std::string()) + " " +
           detail::shape_name(rows, cols, groups, DType::F32);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> x = random_values(rows, cols, seed);
    const quant::QTensor q = ops::quantize(ctx, input_on(ctx, x, rows, cols, DType::F32), spec,
                                           ops::QuantizeOutputs::Rowwise, layout, groups);
    poison_next(ctx.device, {quant::code_bytes(spec.format, rows * cols)});
    const quant::QTensor t = ops::with_colwise(ctx, q, MemCategory::Workspace, col_layout);
    std::vector<OpResult> r;
    add_payloads(r, t);
    return r;
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> x = random_values(rows, cols, seed);
    // Square blocks: the column-wise payload of a direct quantization is the exact transpose. Otherwise the
    // dequantized values are re-quantized: retile's rule on xᵀ.
    const int64_t rg = rows / groups;
    std::vector<float> v;
    for (int64_t g = 0; g < groups; ++g) {
      const std::vector<float> part = quant::dequantize(quant::quantize(x.data() + g * rg * cols, rg, cols, spec));
      v.insert(v.end(), part.begin(), part.end());
    }
    const quant::QTensor row = detail::reference_quantize(x, rows, cols, spec, ops::QuantizeOutputs::Rowwise, layout,
                                                          groups);
    const quant::QTensor col =
        detail::reference_quantize(spec.granularity.square() ? x : v, rows, cols, spec, ops::QuantizeOutputs::Colwise,
                                   col_layout.value_or(layout), groups);
    quant::QTensor both = row;
    both.colwise = col.colwise;
    std::vector<OpResult> r;
    add_payloads(r, both);
    return r;
  };
  out.push_back(std::move(c));
}

inline void with_colwise_cases(std::vector<BackendOpCase>& out) {
  using quant::Format;
  using quant::Granularity;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), GN, 384, 256, 1);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), RM, 3 * 160, 256, 3);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), GN, 256, 384, 1);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), RM, 256, 256, 1);
  add_with_colwise_case(out, detail::make_spec(Format::E5M2, Granularity::tensor(), false), RM, 128, 96, 1);
  // 1x128 re-tiled straight from the codes: groups of whole 128-row tiles in one launch (the dispatched experts'
  // input), groups of 144 rows one launch each, E5M2 with ragged columns; and columns the fused kernel does not
  // take (200 % 16 != 0), which go through a dequantized scratch.
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), GN, 3 * 256, 384, 3);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), RM, 2 * 144, 272, 2);
  add_with_colwise_case(out, detail::make_spec(Format::E5M2, Granularity::tile_1x128(), true), RM, 256, 400, 1);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), RM, 128, 200, 1);
  // The column-wise copy in another layout than the rows: re-tiled from codes (groups of whole tiles and one group),
  // through the dequantized scratch, and square blocks (the transposed scale grid).
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), RM, 3 * 256, 384, 3, GN);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), GN, 256, 272, 1, RM);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), RM, 128, 200, 1, GN);
  add_with_colwise_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), RM, 384, 256, 1, GN);
}

// ---- block scales as row tiles (ops::block_scales_as_row_tiles, the dgrad_block ablation) -----------------------
// The reference: the block quantization's codes, and for every element (r, c) the scale of its block written where
// the 1×bc grid in `layout` keeps the scale of (r, c) (ScaleGrid::offset_of, not the kernels' strides).
inline void add_row_tile_scales_case(std::vector<BackendOpCase>& out, const quant::QuantSpec& spec,
                                     quant::ScaleLayout layout, int64_t rows, int64_t cols, int64_t groups) {
  BackendOpCase c;
  c.op = "block_scales_as_row_tiles";
  c.name = detail::spec_name(spec) + " " + std::string(quant::scale_layout_name(layout)) + " " +
           detail::shape_name(rows, cols, groups, DType::F32);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> x = random_values(rows, cols, seed);
    const quant::QTensor q = ops::quantize(ctx, input_on(ctx, x, rows, cols, DType::F32), spec,
                                           ops::QuantizeOutputs::Rowwise, layout, groups);
    const quant::Granularity tile = quant::Granularity::row_tile(spec.granularity.block_cols);
    poison_next(ctx.device,
                {static_cast<size_t>(quant::ScaleGrid{tile, rows, cols, groups, layout}.numel()) * sizeof(float)});
    const quant::QTensor t = ops::block_scales_as_row_tiles(ctx, q);
    std::vector<OpResult> r;
    add_payloads(r, t);
    r.push_back({"granularity " + t.spec.granularity.name(), {}, {}});
    return r;
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> x = random_values(rows, cols, seed);
    const quant::QTensor q = detail::reference_quantize(x, rows, cols, spec, ops::QuantizeOutputs::Rowwise,
                                                        quant::ScaleLayout::RowMajor, groups);
    quant::QuantSpec ts = spec;
    ts.granularity = quant::Granularity::row_tile(spec.granularity.block_cols);
    quant::QTensor t = quant::QTensor::empty(ts, rows, cols, groups, true, false, layout, Device::cpu());
    std::memcpy(t.rowwise.codes.raw(), q.rowwise.codes.raw(), q.rowwise.codes.nbytes());
    const quant::ScaleGrid to = t.rowwise_grid();
    float* dst = t.rowwise.scales.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; col += spec.granularity.block_cols)
        dst[to.offset_of(r, col)] = q.scale_of(r, col);
    std::vector<OpResult> res;
    add_payloads(res, t);
    res.push_back({"granularity " + ts.granularity.name(), {}, {}});
    return res;
  };
  out.push_back(std::move(c));
}

inline void row_tile_scales_cases(std::vector<BackendOpCase>& out) {
  using quant::Format;
  using quant::Granularity;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  // dy of a dense Dgrad (native layout), a ragged last block in both directions, and groups of whole blocks (the
  // MoE's padded experts) in each layout.
  add_row_tile_scales_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), GN, 384, 256, 1);
  add_row_tile_scales_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), true), RM, 200, 320, 1);
  add_row_tile_scales_case(out, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), RM, 3 * 256, 256,
                           3);
  add_row_tile_scales_case(out, detail::make_spec(Format::E5M2, Granularity::block_128x128(), true), GN, 2 * 128, 384,
                           2);
}

// ---- SwiGLU fused into quantization (ops::quantize_swiglu_forward / _backward) ----------------------------------
// The op is defined as the composition dequantize -> swiglu -> quantize: the reference runs those CPU ops, so the
// CPU op (which is that composition) matches it bit for bit. The CUDA op is one fused kernel whose SwiGLU uses the
// device's expf (within 2 ulp of the CPU's), so a value can land one BF16 ulp away and a code one step away near a
// rounding boundary: the CUDA payloads are compared decoded, by normalized error (a wrong column, row or half
// moves it to ~1). tests/cuda/quantize_gpu_test.cpp checks the kernel against the same composition on the GPU
// bit for bit.
inline void add_swiglu_quantize_case(std::vector<BackendOpCase>& out, bool backward, const quant::QuantSpec& spec,
                                     ops::QuantizeOutputs outputs, quant::ScaleLayout layout, bool pow2_cache,
                                     int64_t rows, int64_t F) {
  BackendOpCase c;
  c.op = backward ? "quantize_swiglu_backward" : "quantize_swiglu_forward";
  c.name = detail::spec_name(spec) + " " + std::string(ops::quantize_outputs_name(outputs)) + " " +
           std::string(quant::scale_layout_name(layout)) + (pow2_cache ? " pow2 cache " : " amax cache ") +
           detail::shape_name(rows, 2 * F, 1, DType::BF16);
  c.cpu = Compare::bits();
  c.cuda = Compare::normalized(1e-4);
  const quant::QuantSpec cache = detail::make_spec(quant::Format::E4M3, quant::Granularity::tile_1x128(), pow2_cache);
  // The decoded payloads (codes times scales, F32), so that the comparison is by value.
  const auto decoded = [](const quant::QTensor& q) {
    const ExecCtx ctx = ExecCtx::on(q.device());
    std::vector<OpResult> r;
    if (q.rowwise.defined()) r.push_back(floats_of("rowwise values", ops::dequantize(ctx, q.rowwise_only())));
    if (q.colwise.defined())
      r.push_back(floats_of("colwise values", ops::dequantize(ctx, q.transposed().rowwise_only())));
    return r;
  };
  const auto run = [=](const ExecCtx& ctx, uint64_t seed, bool composed) {
    std::vector<float> g = random_values(rows, 2 * F, seed), d = random_values(rows, F, seed + 1);
    const quant::QTensor in =
        ops::quantize(ctx, input_on(ctx, g, rows, 2 * F, DType::BF16), cache, ops::QuantizeOutputs::Rowwise, layout);
    const Tensor dout = input_on(ctx, d, rows, F, DType::BF16);
    if (!composed) {
      return backward ? ops::quantize_swiglu_backward(ctx, in, dout, spec, outputs, layout)
                      : ops::quantize_swiglu_forward(ctx, in, DType::BF16, spec, outputs, layout);
    }
    const Tensor x = ops::dequantize(ctx, in, DType::BF16);
    const Tensor y = Tensor::empty({rows, backward ? 2 * F : F}, DType::BF16, MemCategory::Workspace, ctx.device);
    if (backward) {
      ops::swiglu_backward(ctx, x, dout, y);
    } else {
      ops::swiglu_forward(ctx, x, y);
    }
    return ops::quantize(ctx, y, spec, outputs, layout);
  };
  c.run = [=](const ExecCtx& ctx, uint64_t seed) { return decoded(run(ctx, seed, false)); };
  c.reference = [=](uint64_t seed) { return decoded(run(ExecCtx::cpu(), seed, true)); };
  out.push_back(std::move(c));
}

// quantize_swiglu_gate_up: the cache (when asked) and act, compared as the other SwiGLU rows are.
inline void add_swiglu_gate_up_case(std::vector<BackendOpCase>& out, bool cache, const quant::QuantSpec& spec,
                                    quant::ScaleLayout layout, bool pow2_cache, int64_t rows, int64_t F) {
  BackendOpCase c;
  c.op = "quantize_swiglu_gate_up";
  c.name = detail::spec_name(spec) + " " + std::string(quant::scale_layout_name(layout)) +
           (cache ? (pow2_cache ? " pow2 cache " : " amax cache ") : " no cache ") +
           detail::shape_name(rows, 2 * F, 1, DType::BF16);
  c.cpu = Compare::bits();
  c.cuda = Compare::normalized(1e-4);
  const quant::QuantSpec cache_spec =
      detail::make_spec(quant::Format::E4M3, quant::Granularity::tile_1x128(), pow2_cache);
  const auto decoded = [](const quant::QTensor& q, const std::string& name) {
    return floats_of(name, ops::dequantize(ExecCtx::on(q.device()), q));
  };
  const auto run = [=](const ExecCtx& ctx, uint64_t seed, bool composed) {
    std::vector<float> g = random_values(rows, 2 * F, seed);
    const Tensor x = input_on(ctx, g, rows, 2 * F, DType::BF16);
    std::vector<OpResult> r;
    if (!composed) {
      const ops::SwigluGateUpQuantized q = ops::quantize_swiglu_gate_up(ctx, x, cache ? &cache_spec : nullptr, layout,
                                                                        MemCategory::Workspace, spec, layout);
      if (cache) r.push_back(decoded(q.cache, "cache values"));
      r.push_back(decoded(q.act, "act values"));
      return r;
    }
    if (cache)
      r.push_back(decoded(ops::quantize(ctx, x, cache_spec, ops::QuantizeOutputs::Rowwise, layout), "cache values"));
    const Tensor act = Tensor::empty({rows, F}, DType::BF16, MemCategory::Workspace, ctx.device);
    ops::swiglu_forward(ctx, x, act);
    r.push_back(decoded(ops::quantize(ctx, act, spec, ops::QuantizeOutputs::Rowwise, layout), "act values"));
    return r;
  };
  c.run = [=](const ExecCtx& ctx, uint64_t seed) { return run(ctx, seed, false); };
  c.reference = [=](uint64_t seed) { return run(ExecCtx::cpu(), seed, true); };
  out.push_back(std::move(c));
}

inline void swiglu_quantize_cases(std::vector<BackendOpCase>& out) {
  using quant::Format;
  using quant::Granularity;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  const auto Both = ops::QuantizeOutputs::Both, Col = ops::QuantizeOutputs::Colwise,
             Row = ops::QuantizeOutputs::Rowwise;
  for (bool backward : {false, true}) {
    // The fused forms (rows past the last whole tile; amax and power-of-two caches; both layouts; E5M2 out) ...
    add_swiglu_quantize_case(out, backward, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), Both, GN,
                             true, 272, 256);
    add_swiglu_quantize_case(out, backward, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), Col, RM,
                             false, 384, 128);
    add_swiglu_quantize_case(out, backward, detail::make_spec(Format::E5M2, Granularity::tile_1x128(), false), Row, GN,
                             false, 144, 384);
    // ... and forms composed on every backend: F not a multiple of 128, 128x128 blocks.
    add_swiglu_quantize_case(out, backward, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), Both, RM,
                             true, 64, 96);
    add_swiglu_quantize_case(out, backward, detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), Both,
                             GN, false, 256, 128);
  }
  // SwiGLU's forward with its quantizations: fused (with and without the cache, a partial last row tile, E5M2 act)
  // and composed (F not a multiple of 128).
  add_swiglu_gate_up_case(out, true, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), GN, true, 200,
                          256);
  add_swiglu_gate_up_case(out, false, detail::make_spec(Format::E5M2, Granularity::tile_1x128(), true), RM, false, 128,
                          384);
  add_swiglu_gate_up_case(out, true, detail::make_spec(Format::E4M3, Granularity::tile_1x128(), true), RM, false, 64,
                          96);
}

// ---- delayed scaling --------------------------------------------------------------------------------------------
inline void delayed_cases(std::vector<BackendOpCase>& out) {
  for (bool most_recent : {false, true})
    for (int margin : {0, 2, -1})
      for (quant::Format f : {quant::Format::E4M3, quant::Format::E5M2})
        for (bool pow2 : {false, true}) {
          BackendOpCase c;
          c.op = "quantize_delayed";
          const quant::QuantSpec spec = detail::make_spec(f, quant::Granularity::tensor(), pow2);
          const auto algo = most_recent ? quant::AmaxAlgorithm::MostRecent : quant::AmaxAlgorithm::Max;
          c.name = detail::spec_name(spec) + (most_recent ? " most-recent" : " max") + " margin " +
                   std::to_string(margin) + " length 3, 5 tensors [96x160] bf16";
          const int64_t rows = 96, cols = 160;
          const int steps = 5;
          c.run = [=](const ExecCtx& ctx, uint64_t seed) {
            ops::AmaxHistoryState h = ops::AmaxHistoryState::make(ctx, 3, algo, margin);
            std::vector<OpResult> r;
            for (int s = 0; s < steps; ++s) {
              std::vector<float> x = random_values(rows, cols, seed + 31 * s);
              const Tensor xt = input_on(ctx, x, rows, cols, DType::BF16);
              poison_next(ctx.device, {quant::code_bytes(f, rows * cols)});
              const quant::QTensor q = ops::quantize_delayed(ctx, xt, spec, h,
                                                             s == 2 ? ops::QuantizeOutputs::Both
                                                                    : ops::QuantizeOutputs::Rowwise);
              add_payloads(r, q, "step " + std::to_string(s) + " ");
            }
            h.check();
            r.push_back({"window", {}, h.window()});
            return r;
          };
          c.reference = [=](uint64_t seed) {
            quant::AmaxHistory h(3, algo, margin);
            std::vector<OpResult> r;
            for (int s = 0; s < steps; ++s) {
              std::vector<float> x = random_values(rows, cols, seed + 31 * s);
              for (float& v : x) v = static_cast<float>(bf16(v));
              const quant::QTensor q = quant::quantize_delayed(x.data(), rows, cols, spec, h);
              quant::QTensor both = q;
              if (s == 2) {
                const quant::QTensor t = quant::transpose(q);
                both.colwise = t.rowwise;
              }
              add_payloads(r, both, "step " + std::to_string(s) + " ");
            }
            r.push_back({"window", {}, std::vector<float>(h.entries().begin(), h.entries().end())});
            return r;
          };
          out.push_back(std::move(c));
        }
}

// ---- scaled GEMMs ---------------------------------------------------------------------------------------------------
namespace detail {

struct GemmSide {
  quant::QuantSpec spec;
  int64_t rows;
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
  int64_t groups = 1;
};

// An operand quantized on ctx (through the op) and its CPU reference twin (quant::quantize, row-major).
inline quant::QTensor operand_on(const ExecCtx& ctx, const GemmSide& s, int64_t k, uint64_t seed) {
  std::vector<float> x = random_values(s.rows, k, seed);
  return ops::quantize(ctx, input_on(ctx, x, s.rows, k, DType::F32), s.spec, ops::QuantizeOutputs::Rowwise, s.layout,
                       s.groups);
}
inline quant::QTensor operand_ref(const GemmSide& s, int64_t k, uint64_t seed) {
  return reference_quantize(random_values(s.rows, k, seed), s.rows, k, s.spec, ops::QuantizeOutputs::Rowwise,
                            quant::ScaleLayout::RowMajor, s.groups);
}

// d's initial contents: C for accumulation, NaN poison otherwise.
inline std::vector<float> initial_d(int64_t n, bool accumulate, uint64_t seed) {
  if (accumulate) return random_values(1, n, seed);
  return std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
}
inline Tensor d_on(const ExecCtx& ctx, const std::vector<float>& init, Shape shape, DType dtype) {
  if (dtype == DType::F32) return Tensor::from_vector(init, shape, MemCategory::Workspace, Device::cpu()).to(ctx.device);
  std::vector<bf16> b(init.size());
  for (size_t i = 0; i < init.size(); ++i) b[i] = bf16(init[i]);
  return Tensor::from_vector(b, shape, MemCategory::Workspace, Device::cpu()).to(ctx.device);
}
// A GEMM's d as floats (BF16 decoded exactly), so bit-exact rows compare every bit and the rows held to a
// normalized error (cuBLASLt's block scaling) can compare BF16 outputs too.
inline std::vector<float> bf16_values(const uint16_t* p, size_t n) {
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(p[i]) << 16;
    std::memcpy(&f[i], &u, sizeof(float));
  }
  return f;
}
inline OpResult d_result(const Tensor& d) {
  if (d.dtype() == DType::F32) return floats_of("d", d);
  const OpResult b = bytes_of("d", d);
  return {"d", {}, bf16_values(reinterpret_cast<const uint16_t*>(b.bytes.data()), b.bytes.size() / 2)};
}

inline std::string gemm_name(const GemmSide& a, const GemmSide& b, int64_t k, DType out, bool accumulate,
                             const quant::GemmConfig& g) {
  return std::string(quant::format_name(a.spec.format)) + "(" + a.spec.granularity.name() + ", " +
         std::string(quant::scale_layout_name(a.layout)) + ") x " + std::string(quant::format_name(b.spec.format)) +
         "(" + b.spec.granularity.name() + ", " + std::string(quant::scale_layout_name(b.layout)) + ") -> " +
         std::string(dtype_name(out)) + (accumulate ? " +=" : "") + " M=" + std::to_string(a.rows) +
         " N=" + std::to_string(b.rows / b.groups) + " K=" + std::to_string(k) + " " +
         std::string(quant::accum_mode_name(g.mode)) +
         (g.mode == quant::AccumMode::Hopper ? " P=" + std::to_string(g.promote_interval) : "") +
         (g.k_splits > 1 ? " splits " + std::to_string(g.k_splits) : "");
}

inline quant::GemmConfig numerics(quant::AccumMode mode, int promote = 128, int splits = 1) {
  quant::GemmConfig g;
  g.mode = mode;
  g.promote_interval = promote;
  g.k_splits = splits;
  return g;
}

}  // namespace detail

inline void add_scaled_gemm_case(std::vector<BackendOpCase>& out, const detail::GemmSide& a, const detail::GemmSide& b,
                                 int64_t k, DType dtype, bool accumulate, const quant::GemmConfig& g,
                                 Compare cuda, bool on_cuda) {
  BackendOpCase c;
  c.op = "scaled_gemm";
  c.name = detail::gemm_name(a, b, k, dtype, accumulate, g);
  c.cuda = cuda;
  c.on_cuda = on_cuda;
  const int64_t m = a.rows, n = b.rows;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const quant::QTensor qa = detail::operand_on(ctx, a, k, seed), qb = detail::operand_on(ctx, b, k, seed + 1);
    const Tensor d = detail::d_on(ctx, detail::initial_d(m * n, accumulate, seed + 2), {m, n}, dtype);
    ops::ScaledGemmOptions o;
    o.numerics = g;
    o.accumulate = accumulate;
    ops::scaled_gemm(ctx, qa, qb, d, o);
    return std::vector<OpResult>{detail::d_result(d)};
  };
  c.reference = [=](uint64_t seed) {
    const quant::QTensor qa = detail::operand_ref(a, k, seed), qb = detail::operand_ref(b, k, seed + 1);
    const std::vector<float> c0 = detail::initial_d(m * n, accumulate, seed + 2);
    quant::GemmConfig cfg = g;
    cfg.accumulate = accumulate;
    if (dtype == DType::F32) {
      std::vector<float> d(static_cast<size_t>(m * n));
      quant::ref_gemm(qa, qb, cfg, d.data(), accumulate ? c0.data() : nullptr);
      return std::vector<OpResult>{{"d", {}, d}};
    }
    std::vector<float> cw(c0.size());
    for (size_t i = 0; i < c0.size(); ++i) cw[i] = static_cast<float>(bf16(c0[i]));
    std::vector<uint16_t> d(static_cast<size_t>(m * n));
    quant::ref_gemm_bf16(qa, qb, cfg, d.data(), accumulate ? cw.data() : nullptr);
    return std::vector<OpResult>{{"d", {}, detail::bf16_values(d.data(), d.size())}};
  };
  out.push_back(std::move(c));
}

inline void scaled_gemm_cases(std::vector<BackendOpCase>& out) {
  using quant::AccumMode;
  using quant::Format;
  using quant::Granularity;
  using detail::make_spec;
  using detail::numerics;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  const auto act = make_spec(Format::E4M3, Granularity::tile_1x128(), false);
  const auto act2 = make_spec(Format::E4M3, Granularity::tile_1x128(), true);
  const auto wgt = make_spec(Format::E4M3, Granularity::block_128x128(), false);
  const Compare bits = Compare::bits();
  // Fprop / Dgrad: 1x128 x 128x128 -> BF16, fp8train's own kernels (bit-exact), both scale layouts, N not a
  // multiple of 128, small M (the split-K heuristic is not used: k_splits is part of the numerics).
  for (auto layout : {RM, GN}) {
    add_scaled_gemm_case(out, {act, 192, layout}, {wgt, 272, layout}, 384, DType::BF16, false,
                         numerics(AccumMode::Hopper), bits, true);
    add_scaled_gemm_case(out, {act2, 64, layout}, {wgt, 256, layout}, 1024, DType::BF16, false,
                         numerics(AccumMode::Hopper, 128, 2), bits, true);
    // Accumulating into a BF16 d (a Dgrad adding into an input gradient), K with a partial last block (576 =
    // 4.5 x 128: MLA's kv_lora_rank + rope dims), and into F32 (the numerics-health samples' view of the product).
    add_scaled_gemm_case(out, {act, 192, layout}, {wgt, 272, layout}, 576, DType::BF16, true,
                         numerics(AccumMode::Hopper), bits, true);
    add_scaled_gemm_case(out, {act, 192, layout}, {wgt, 272, layout}, 384, DType::F32, false,
                         numerics(AccumMode::Hopper), bits, true);
    add_scaled_gemm_case(out, {act, 130, layout}, {wgt, 160, layout}, 576, DType::F32, true,
                         numerics(AccumMode::Hopper), bits, true);
  }
  // Wgrad: 1x128 x 1x128 -> FP32 += C.
  add_scaled_gemm_case(out, {act, 256, GN}, {act, 384, GN}, 512, DType::F32, true, numerics(AccumMode::Hopper), bits,
                       true);
  add_scaled_gemm_case(out, {act2, 128, RM}, {act2, 256, RM}, 256, DType::F32, false, numerics(AccumMode::Hopper),
                       bits, true);
  // Per-tensor FP8 (cuBLASLt on CUDA: measured bit-exact against the hopper model, bounded here all the same).
  const auto t4 = make_spec(Format::E4M3, Granularity::tensor(), false);
  const auto t5 = make_spec(Format::E5M2, Granularity::tensor(), false);
  add_scaled_gemm_case(out, {t4, 128, RM}, {t4, 256, RM}, 512, DType::F32, false, numerics(AccumMode::Hopper),
                       Compare::normalized(1e-6), true);
  add_scaled_gemm_case(out, {t5, 128, RM}, {t4, 192, RM}, 256, DType::BF16, false,
                       numerics(AccumMode::Hopper, num::kNeverPromote), Compare::normalized(1e-5), true);
  // INT8 x INT8 (int8-blockwise): exact integer sums per 128 block, then the FP32 promotion -- exact and hopper
  // accumulation mean the same for INT8. CUDA: fp8train's kernels on the integer tensor-core instruction,
  // bit-exact. Fprop into F32 and (accumulating, a partial last K block) into BF16; Wgrad += C.
  const auto i8a = make_spec(Format::INT8, Granularity::tile_1x128(), false);
  const auto i8w = make_spec(Format::INT8, Granularity::block_128x128(), false);
  for (auto layout : {RM, GN}) {
    add_scaled_gemm_case(out, {i8a, 96, layout}, {i8w, 160, layout}, 384, DType::F32, false,
                         numerics(AccumMode::Hopper), bits, true);
    add_scaled_gemm_case(out, {i8a, 192, layout}, {i8w, 272, layout}, 576, DType::BF16, true,
                         numerics(AccumMode::Exact), bits, true);
  }
  add_scaled_gemm_case(out, {i8a, 256, GN}, {i8a, 384, GN}, 512, DType::F32, true, numerics(AccumMode::Exact), bits,
                       true);
  // promote=never (the ablation): each 128 block's scaled partial added into a pending sum with the truncating FP22
  // adder (quant/ref_gemm.h). CUDA: fp8train's kernels built so, bit-exact. Fprop with K of ten blocks, K with a
  // partial last block accumulating into BF16, into F32 (health samples); Wgrad += C over K of nine blocks.
  for (auto layout : {RM, GN}) {
    add_scaled_gemm_case(out, {act, 64, layout}, {wgt, 272, layout}, 1280, DType::BF16, false,
                         numerics(AccumMode::Hopper, num::kNeverPromote), bits, true);
    add_scaled_gemm_case(out, {act, 130, layout}, {wgt, 160, layout}, 576, DType::BF16, true,
                         numerics(AccumMode::Hopper, num::kNeverPromote), bits, true);
    add_scaled_gemm_case(out, {act, 130, layout}, {wgt, 160, layout}, 640, DType::F32, true,
                         numerics(AccumMode::Hopper, num::kNeverPromote), bits, true);
  }
  add_scaled_gemm_case(out, {act, 128, GN}, {act, 256, GN}, 1152, DType::F32, true,
                       numerics(AccumMode::Hopper, num::kNeverPromote), bits, true);
  // CPU-only forms: other promotion intervals, exact and fp32 accumulation of FP8.
  add_scaled_gemm_case(out, {act, 64, RM}, {wgt, 128, RM}, 512, DType::BF16, false, numerics(AccumMode::Hopper, 64),
                       bits, false);
  add_scaled_gemm_case(out, {act, 64, RM}, {wgt, 128, RM}, 384, DType::F32, true, numerics(AccumMode::Exact), bits,
                       false);
  add_scaled_gemm_case(out, {act, 37, RM}, {act, 45, RM}, 300, DType::F32, false, numerics(AccumMode::Fp32), bits,
                       false);
}

// MoE experts over M, E4M3 (promoting every 128, and never: the promote=never ablation) and INT8: E = 3 experts of
// N = 160 rows each (padded 128x128 blocks per expert), one expert empty.
inline void grouped_cases(std::vector<BackendOpCase>& out) {
  using quant::AccumMode;
  using quant::Format;
  using quant::Granularity;
  for (const auto& [f, never] :
       {std::pair{Format::E4M3, false}, std::pair{Format::E4M3, true}, std::pair{Format::INT8, false}})
    for (auto layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative})
      for (DType dtype : {DType::BF16, DType::F32}) {
        if (never && layout == quant::ScaleLayout::RowMajor) continue;  // the scale layout is the default rows'
        const int E = 3;
        const int64_t n = 160, k = 384;
        const std::vector<int32_t> offsets = {0, 128, 128, 384};
        const int64_t m = offsets.back();
        const detail::GemmSide a{detail::make_spec(f, Granularity::tile_1x128(), false), m, layout};
        const detail::GemmSide b{detail::make_spec(f, Granularity::block_128x128(), false), E * n, layout, E};
        const quant::GemmConfig g = detail::numerics(f == Format::INT8 ? AccumMode::Exact : AccumMode::Hopper,
                                                     never ? num::kNeverPromote : 128);
        BackendOpCase c;
        c.op = "scaled_gemm_grouped";
        c.name = detail::gemm_name(a, b, k, dtype, false, g) + " experts 3 (rows 128, 0, 256)";
        c.on_cuda = true;  // BF16: the grouped kernel; F32 (health samples): one F32 product per expert
        c.run = [=](const ExecCtx& ctx, uint64_t seed) {
          const quant::QTensor qa = detail::operand_on(ctx, a, k, seed), qb = detail::operand_on(ctx, b, k, seed + 1);
          const Tensor off =
              Tensor::from_vector(offsets, {E + 1}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
          const Tensor d = detail::d_on(ctx, detail::initial_d(m * n, false, 0), {m, n}, dtype);
          ops::ScaledGemmOptions o;
          o.numerics = g;
          ops::scaled_gemm_grouped(ctx, qa, qb, off, d, o);
          return std::vector<OpResult>{detail::d_result(d)};
        };
        c.reference = [=](uint64_t seed) {
          const quant::QTensor qa = detail::operand_ref(a, k, seed), qb = detail::operand_ref(b, k, seed + 1);
          std::vector<float> d32(static_cast<size_t>(m * n));
          std::vector<uint16_t> d16(static_cast<size_t>(m * n));
          for (int e = 0; e < E; ++e) {
            if (offsets[e + 1] == offsets[e]) continue;
            quant::QTensor ae = qa;
            ae.rows = offsets[e + 1] - offsets[e];
            ae.rowwise.codes = qa.rowwise.codes.rows(offsets[e], offsets[e + 1]);
            ae.rowwise.scales = qa.rowwise.scales.rows(offsets[e], offsets[e + 1]);
            if (dtype == DType::F32)
              quant::ref_gemm(ae, qb.group(e), g, d32.data() + offsets[e] * n);
            else
              quant::ref_gemm_bf16(ae, qb.group(e), g, d16.data() + offsets[e] * n);
          }
          if (dtype == DType::F32) return std::vector<OpResult>{{"d", {}, d32}};
          return std::vector<OpResult>{{"d", {}, detail::bf16_values(d16.data(), d16.size())}};
        };
        out.push_back(std::move(c));
      }
}

// MoE expert Wgrad over K, E4M3 (promoting every 128, and never) and INT8: E = 3, K ranges 256, 0, 256; += C.
inline void grouped_k_cases(std::vector<BackendOpCase>& out) {
  using quant::Format;
  using quant::Granularity;
  for (const auto& [f, never] :
       {std::pair{Format::E4M3, false}, std::pair{Format::E4M3, true}, std::pair{Format::INT8, false}})
    for (auto layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative})
      for (bool accumulate : {true, false}) {
        if (never && (layout == quant::ScaleLayout::RowMajor || !accumulate)) continue;  // the training form
        const int E = 3;
        const int64_t m = 128, n = 256;
        const std::vector<int32_t> offsets = {0, 256, 256, 512};
        const int64_t k = offsets.back();
        const detail::GemmSide a{detail::make_spec(f, Granularity::tile_1x128(), true), m, layout};
        const detail::GemmSide b{detail::make_spec(f, Granularity::tile_1x128(), true), n, layout};
        const quant::GemmConfig g = detail::numerics(
            f == Format::INT8 ? quant::AccumMode::Exact : quant::AccumMode::Hopper, never ? num::kNeverPromote : 128);
        BackendOpCase c;
        c.op = "scaled_gemm_grouped_k";
        c.name = detail::gemm_name(a, b, k, DType::F32, accumulate, g) + " experts 3 (K 256, 0, 256)";
        c.run = [=](const ExecCtx& ctx, uint64_t seed) {
          const quant::QTensor qa = detail::operand_on(ctx, a, k, seed), qb = detail::operand_on(ctx, b, k, seed + 1);
          const Tensor off =
              Tensor::from_vector(offsets, {E + 1}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
          const std::vector<float> init =
              accumulate ? random_values(E * m, n, seed + 2) : detail::initial_d(E * m * n, false, 0);
          const Tensor d = Tensor::from_vector(init, {E, m, n}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
          ops::ScaledGemmOptions o;
          o.numerics = g;
          o.accumulate = accumulate;
          ops::scaled_gemm_grouped_k(ctx, qa, qb, off, d, o);
          return std::vector<OpResult>{floats_of("d", d)};
        };
        c.reference = [=](uint64_t seed) {
          const quant::QTensor qa = detail::operand_ref(a, k, seed), qb = detail::operand_ref(b, k, seed + 1);
          std::vector<float> d =
              accumulate ? random_values(E * m, n, seed + 2) : std::vector<float>(static_cast<size_t>(E * m * n), 0.0f);
          quant::GemmConfig cfg = g;
          cfg.accumulate = accumulate;
          for (int e = 0; e < E; ++e) {
            if (offsets[e + 1] == offsets[e]) continue;
            float* de = d.data() + e * m * n;
            const std::vector<float> c0(de, de + m * n);
            quant::ref_gemm(quant::k_slice(qa, offsets[e] / 128, offsets[e + 1] / 128),
                            quant::k_slice(qb, offsets[e] / 128, offsets[e + 1] / 128), cfg, de,
                            accumulate ? c0.data() : nullptr);
          }
          return std::vector<OpResult>{{"d", {}, d}};
        };
        out.push_back(std::move(c));
      }
}

// ---- BF16 GEMM (the non-quantized recipes' GEMMs and the FP32 references' form) ---------------------------
// c = a·bᵀ (+ c) with BF16 a [m, k] and b [n, k], F32 c; against the FP64 product of the same BF16 values.
inline void add_gemm_case(std::vector<BackendOpCase>& out, int64_t m, int64_t n, int64_t k, bool accumulate,
                          bool trans_a, bool on_cuda) {
  BackendOpCase c;
  c.op = "gemm";
  c.name = fmt::format("bf16 {}·bᵀ{} -> f32 m={} n={} k={}", trans_a ? "aᵀ" : "a", accumulate ? " + c" : "", m, n, k);
  c.cpu = Compare::normalized(1e-10);   // FP32 accumulation against FP64
  c.cuda = Compare::normalized(1e-10);  // cuBLASLt's accumulation order against the CPU's
  c.on_cuda = on_cuda;
  const int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> a = random_values(ar, ac, seed), b = random_values(n, k, seed + 1);
    std::vector<float> c0 = random_values(m, n, seed + 2);
    const Tensor ta = input_on(ctx, a, ar, ac, DType::BF16), tb = input_on(ctx, b, n, k, DType::BF16);
    Tensor tc = input_on(ctx, c0, m, n, DType::F32);
    if (!accumulate) {
      poison_next(ctx.device, {static_cast<size_t>(m * n) * sizeof(float)});
      tc = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, ctx.device);
    }
    ops::GemmOptions o;
    o.beta = accumulate ? 1.0 : 0.0;
    ops::gemm(ctx, ta, trans_a, tb, true, tc, o);
    return std::vector<OpResult>{floats_of("c", tc)};
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> a = random_values(ar, ac, seed), b = random_values(n, k, seed + 1);
    const std::vector<float> c0 = random_values(m, n, seed + 2);
    for (float& v : a) v = static_cast<float>(bf16(v));
    for (float& v : b) v = static_cast<float>(bf16(v));
    std::vector<float> r(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = accumulate ? c0[static_cast<size_t>(i * n + j)] : 0.0;
        for (int64_t l = 0; l < k; ++l)
          acc += static_cast<double>(a[static_cast<size_t>(trans_a ? l * m + i : i * k + l)]) *
                 b[static_cast<size_t>(j * k + l)];
        r[static_cast<size_t>(i * n + j)] = static_cast<float>(acc);
      }
    return std::vector<OpResult>{OpResult{"c", {}, r}};
  };
  out.push_back(std::move(c));
}

inline void gemm_cases(std::vector<BackendOpCase>& out) {
  add_gemm_case(out, 128, 256, 512, false, false, true);
  add_gemm_case(out, 96, 200, 384, true, false, true);
  add_gemm_case(out, 64, 128, 256, false, /*trans_a=*/true, /*on_cuda=*/true);
  // every other form: backend_rows_gemm.h
}

}  // namespace fp8train::backend_test

// The op families' rows, one header each (they use the helpers above).
#include "backend_rows_attention.h"
#include "backend_rows_elementwise.h"
#include "backend_rows_gemm.h"
#include "backend_rows_heads.h"
#include "backend_rows_health.h"
#include "backend_rows_moe.h"
#include "backend_rows_train.h"

namespace fp8train::backend_test {

// Every row of the table.
inline std::vector<BackendOpCase> backend_cases() {
  std::vector<BackendOpCase> out;
  quantize_cases(out);
  dequantize_cases(out);
  with_colwise_cases(out);
  row_tile_scales_cases(out);
  swiglu_quantize_cases(out);
  delayed_cases(out);
  scaled_gemm_cases(out);
  grouped_cases(out);
  grouped_k_cases(out);
  gemm_cases(out);
  gemm_op_cases(out);
  elementwise_op_cases(out);
  heads_op_cases(out);
  attention_op_cases(out);
  moe_op_cases(out);
  train_op_cases(out);
  health_op_cases(out);
  return out;
}

}  // namespace fp8train::backend_test
