// Backend test table rows (backend_ops_table.h) of the numerics-health reductions (ops/health_stats.h).
//   row_error_sums            y against y_ref near it, F32 / BF16 / F64 each, ragged widths (1, 31, 33, 1000,
//                             2900), a row-strided view, a zero reference row, an all-zero row, a NaN element;
//                             reference: each row's FP64 sums in column order (the CPU bit for bit); CUDA within
//                             1e-12 relative (another summation order over <= 2900 positive terms)
//   quantized_operand_counts  every payload format (E4M3, E5M2, INT8, E5M6, BF16), granularities 1x128, 128x1
//                             (the transposed Wgrad operand), 128x128 (also Wᵀ and expert row groups with padded
//                             blocks), 32x64 and per tensor (also per group), both scale layouts, x F32 / BF16 /
//                             F64, ragged shapes; x is quantized (on the CPU, the payload then copied to the op's
//                             device) and afterwards changed in places as a stale scale would see it: values ×8
//                             (saturate), zeros, NaNs; tiny values before quantization (underflow) and, in one
//                             row, a NaN before quantization (a non-finite scale); reference: the host loop
//                             recipe::measure_health has always run (QTensor::scale_of / decoded_at,
//                             row_major_scales); counts and scale range bit for bit on both backends.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend_ops_table.h"
#include "ops/health_stats.h"

namespace fp8train::backend_test {
namespace health_detail {

// The values as the op sees them (rounded to BF16, or for F64 nudged below FP32 precision so the FP64 path shows)
// and the tensor holding them; ld > cols gives a row-strided view.
inline Tensor values_in(const ExecCtx& ctx, std::vector<double>& v, int64_t rows, int64_t cols, int64_t ld,
                        DType dtype) {
  std::vector<double> padded(static_cast<size_t>(rows * ld), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double& x = v[static_cast<size_t>(r * cols + c)];
      if (dtype == DType::BF16) x = static_cast<float>(bf16(static_cast<float>(x)));
      if (dtype == DType::F32) x = static_cast<float>(x);
      padded[static_cast<size_t>(r * ld + c)] = x;
    }
  Tensor t;
  if (dtype == DType::F64) {
    t = Tensor::from_vector(padded, {rows, ld}, MemCategory::Workspace, Device::cpu());
  } else if (dtype == DType::F32) {
    t = Tensor::from_vector(std::vector<float>(padded.begin(), padded.end()), {rows, ld}, MemCategory::Workspace,
                            Device::cpu());
  } else {
    std::vector<bf16> b(padded.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = bf16(static_cast<float>(padded[i]));
    t = Tensor::from_vector(b, {rows, ld}, MemCategory::Workspace, Device::cpu());
  }
  t = t.to(ctx.device);
  return ld == cols ? t : t.narrow(1, 0, cols);
}

// ---- row_error_sums ---------------------------------------------------------------------------------------------
// y_ref and y = y_ref·(1 + 2^-9·noise) (what a low-precision product looks like); row 1 (when there are 3 or more)
// has a zero reference, row 2 is zero in both, row 3 (5 or more) holds a NaN in y.
struct ErrorSumsInputs {
  std::vector<double> y, ref;
};
inline ErrorSumsInputs error_sums_inputs(int64_t rows, int64_t cols, uint64_t seed) {
  const std::vector<float> r = random_values(rows, cols, seed), n = random_values(rows, cols, seed ^ 0x9e37ULL);
  ErrorSumsInputs in{std::vector<double>(r.size()), std::vector<double>(r.size())};
  for (size_t i = 0; i < r.size(); ++i) {
    const double noise = std::tanh(static_cast<double>(n[i]));
    in.ref[i] = r[i] * (1.0 + 1e-9 * noise);  // below FP32 precision: seen by F64 inputs only
    in.y[i] = r[i] * (1.0 + std::ldexp(noise, -9));
  }
  auto row = [&](std::vector<double>& v, int64_t i) { return v.begin() + i * cols; };
  if (rows >= 3) std::fill(row(in.ref, 1), row(in.ref, 2), 0.0);
  if (rows >= 3) {
    std::fill(row(in.ref, 2), row(in.ref, 3), 0.0);
    std::fill(row(in.y, 2), row(in.y, 3), 0.0);
  }
  if (rows >= 5) in.y[static_cast<size_t>(3 * cols + cols / 2)] = std::numeric_limits<double>::quiet_NaN();
  return in;
}

inline OpResult doubles_of(const std::string& name, const std::vector<double>& d) {
  OpResult r{name, std::vector<uint8_t>(d.size() * sizeof(double)), {}};
  std::memcpy(r.bytes.data(), d.data(), r.bytes.size());
  return r;
}

inline void add_row_error_sums_case(std::vector<BackendOpCase>& out, int64_t rows, int64_t cols, DType y_dtype,
                                    DType ref_dtype, int64_t ld = 0) {
  if (ld == 0) ld = cols;
  BackendOpCase c;
  c.op = "row_error_sums";
  c.name = fmt::format("[{}x{}] ld {} y {} ref {}", rows, cols, ld, dtype_name(y_dtype), dtype_name(ref_dtype));
  c.cpu = Compare::bits();
  c.cuda = Compare::f64_within(1e-12);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    ErrorSumsInputs in = error_sums_inputs(rows, cols, seed);
    const Tensor y = values_in(ctx, in.y, rows, cols, ld, y_dtype);
    const Tensor ref = values_in(ctx, in.ref, rows, cols, cols, ref_dtype);
    poison_next(ctx.device, {static_cast<size_t>(rows) * 2 * sizeof(double)});
    const Tensor o = Tensor::empty({rows, 2}, DType::F64, MemCategory::Workspace, ctx.device);
    ops::row_error_sums(ctx, y, ref, o);
    return std::vector<OpResult>{bytes_of("sums", o)};
  };
  c.reference = [=](uint64_t seed) {
    ErrorSumsInputs in = error_sums_inputs(rows, cols, seed);
    (void)values_in(ExecCtx::cpu(), in.y, rows, cols, cols, y_dtype);  // rounds the values as the op sees them
    (void)values_in(ExecCtx::cpu(), in.ref, rows, cols, cols, ref_dtype);
    std::vector<double> o(static_cast<size_t>(2 * rows));
    for (int64_t i = 0; i < rows; ++i) {
      double e = 0, r2 = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double r = in.ref[static_cast<size_t>(i * cols + j)];
        const double d = in.y[static_cast<size_t>(i * cols + j)] - r;
        e += d * d;
        r2 += r * r;
      }
      o[static_cast<size_t>(2 * i)] = e;
      o[static_cast<size_t>(2 * i + 1)] = r2;
    }
    return std::vector<OpResult>{doubles_of("sums", o)};
  };
  out.push_back(std::move(c));
}

// ---- quantized_operand_counts -----------------------------------------------------------------------------------
struct CountsForm {
  quant::QuantSpec spec;
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
  int64_t groups = 1;
  bool transposed = false;  // q = the column-wise copy of x's quantization, transposed (q quantizes xᵀ)
  bool nan_before = false;  // one NaN in x before quantization (its block's scale is not finite)
};

// x [xr, xc] as quantized: random values, every 11th ×1e-6, every 19th ×1e-12, every 23rd ×1e-44 (underflow in
// every format), and the NaN of nan_before.
inline std::vector<float> counts_x_quantized(int64_t xr, int64_t xc, const CountsForm& f, uint64_t seed) {
  std::vector<float> x = random_values(xr, xc, seed);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 11 == 3) x[i] *= 1e-6f;
    if (i % 19 == 5) x[i] *= 1e-12f;
    if (i % 23 == 7) x[i] *= 1e-44f;
  }
  if (f.nan_before && xr * xc > 5) x[5] = std::numeric_limits<float>::quiet_NaN();
  return x;
}
// x as measured: the quantized values changed as a stale scale would see them: every 13th ×8 (saturates where
// |x| / s > limit / 8), every 29th 0, every 31st NaN.
inline std::vector<double> counts_x_measured(const std::vector<float>& xq) {
  std::vector<double> x(xq.begin(), xq.end());
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 13 == 1) x[i] *= 8.0;
    if (i % 29 == 2) x[i] = 0.0;
    if (i % 31 == 4) x[i] = std::numeric_limits<double>::quiet_NaN();
    if (i % 37 == 6) x[i] *= 1.0 + 1e-10;  // below FP32 precision: F64 x rounds it away
  }
  return x;
}

// The quantization of xq (CPU, then copied to `device`), oriented as the op reads it.
inline quant::QTensor counts_q(const std::vector<float>& xq, int64_t xr, int64_t xc, const CountsForm& f, DType dtype,
                               Device device) {
  std::vector<float> v = xq;
  const Tensor xt = input_on(ExecCtx::cpu(), v, xr, xc, dtype == DType::BF16 ? DType::BF16 : DType::F32);
  const quant::QTensor q =
      ops::quantize(ExecCtx::cpu(), xt, f.spec,
                    f.transposed ? ops::QuantizeOutputs::Both : ops::QuantizeOutputs::Rowwise, f.layout, f.groups);
  return (f.transposed ? q.transposed().rowwise_only() : q).to(device);
}

inline void add_operand_counts_case(std::vector<BackendOpCase>& out, const CountsForm& f, int64_t xr, int64_t xc,
                                    DType dtype) {
  BackendOpCase c;
  c.op = "quantized_operand_counts";
  c.name = fmt::format("{} {} groups {} [{}x{}]{}{} x {}", detail::spec_name(f.spec),
                       quant::scale_layout_name(f.layout), f.groups, xr, xc, f.transposed ? " transposed" : "",
                       f.nan_before ? " NaN before quantization" : "", dtype_name(dtype));
  c.cpu = Compare::bits();
  c.cuda = Compare::bits();
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const std::vector<float> xq = counts_x_quantized(xr, xc, f, seed);
    const quant::QTensor q = counts_q(xq, xr, xc, f, dtype, ctx.device);
    std::vector<double> xm = counts_x_measured(xq);
    const Tensor x = values_in(ctx, xm, xr, xc, xc, dtype);
    poison_next(ctx.device, {3 * sizeof(int64_t), 2 * sizeof(float)});
    const Tensor counts = Tensor::empty({3}, DType::I64, MemCategory::Workspace, ctx.device);
    const Tensor range = Tensor::empty({2}, DType::F32, MemCategory::Workspace, ctx.device);
    ops::quantized_operand_counts(ctx, x, q, f.transposed, counts, range);
    return std::vector<OpResult>{bytes_of("counts", counts), floats_of("scale range", range)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> xq = counts_x_quantized(xr, xc, f, seed);
    const quant::QTensor q = counts_q(xq, xr, xc, f, dtype, Device::cpu());
    std::vector<double> xm = counts_x_measured(xq);
    (void)values_in(ExecCtx::cpu(), xm, xr, xc, xc, dtype);  // rounds the values as the op sees them
    // recipe::measure_health's host loop as it has always been.
    float limit = 0;
    switch (q.spec.format) {
      case quant::Format::E4M3:
        limit = 464.0f;
        break;
      case quant::Format::E5M2:
        limit = 61440.0f;
        break;
      case quant::Format::E5M6:
        limit = 65280.0f;
        break;
      case quant::Format::INT8:
        limit = 127.5f;
        break;
      case quant::Format::BF16:
        limit = quant::format_max(quant::Format::BF16);
        break;
    }
    float smin = std::numeric_limits<float>::infinity(), smax = 0.0f;
    for (float s : q.row_major_scales()) {
      if (!std::isfinite(s)) continue;
      smin = std::min(smin, s);
      smax = std::max(smax, s);
    }
    std::vector<int64_t> n(3, 0);
    for (int64_t r = 0; r < q.rows; ++r)
      for (int64_t col = 0; col < q.cols; ++col) {
        const float v = static_cast<float>(xm[static_cast<size_t>(f.transposed ? col * q.rows + r : r * q.cols + col)]);
        if (v == 0.0f || std::isnan(v)) continue;
        ++n[0];
        if (std::fabs(v) / q.scale_of(r, col) > limit) ++n[1];
        if (q.decoded_at(r, col) == 0.0f) ++n[2];
      }
    OpResult counts{"counts", std::vector<uint8_t>(3 * sizeof(int64_t)), {}};
    std::memcpy(counts.bytes.data(), n.data(), counts.bytes.size());
    return std::vector<OpResult>{counts, OpResult{"scale range", {}, {smin, smax}}};
  };
  out.push_back(std::move(c));
}

}  // namespace health_detail

inline void health_op_cases(std::vector<BackendOpCase>& out) {
  using health_detail::add_operand_counts_case;
  using health_detail::add_row_error_sums_case;
  using health_detail::CountsForm;
  using quant::Format;
  using quant::Granularity;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  // row_error_sums: the products (F32), BF16 outputs against F32 references, F64, ragged and strided.
  add_row_error_sums_case(out, 7, 1000, DType::F32, DType::F32);
  add_row_error_sums_case(out, 130, 33, DType::F32, DType::F32);
  add_row_error_sums_case(out, 9, 2900, DType::BF16, DType::F32);
  add_row_error_sums_case(out, 5, 31, DType::F32, DType::BF16);
  add_row_error_sums_case(out, 6, 1, DType::BF16, DType::BF16);
  add_row_error_sums_case(out, 11, 300, DType::F64, DType::F64);
  add_row_error_sums_case(out, 17, 129, DType::F32, DType::F32, /*ld=*/144);
  // quantized_operand_counts: an activation's 1x128 operand and its 128x1 Wgrad copy, each one-byte format.
  for (Format fmt : {Format::E4M3, Format::E5M2, Format::INT8})
    for (DType dt : {DType::BF16, DType::F32}) {
      const quant::QuantSpec s = detail::make_spec(fmt, Granularity::tile_1x128(), fmt == Format::E5M2);
      add_operand_counts_case(out, {s, dt == DType::BF16 ? GN : RM, 1, false, false}, 200, 400, dt);
      add_operand_counts_case(out, {s, dt == DType::BF16 ? RM : GN, 1, true, false}, 272, 300, dt);
    }
  // Weights: 128x128 (and Wᵀ), experts as row groups with padded blocks, per tensor (also per group).
  add_operand_counts_case(out,
                          {detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), GN, 1, false, false},
                          272, 400, DType::F32);
  add_operand_counts_case(out,
                          {detail::make_spec(Format::E4M3, Granularity::block_128x128(), true), RM, 1, true, false},
                          300, 260, DType::F32);
  add_operand_counts_case(out,
                          {detail::make_spec(Format::E4M3, Granularity::block_128x128(), false), GN, 3, false, false},
                          3 * 160, 256, DType::F32);
  add_operand_counts_case(out, {detail::make_spec(Format::E4M3, Granularity::tensor(), false), RM, 1, false, false},
                          100, 129, DType::BF16);
  add_operand_counts_case(out, {detail::make_spec(Format::E5M2, Granularity::tensor(), false), RM, 4, false, false},
                          4 * 33, 70, DType::F32);
  add_operand_counts_case(out,
                          {detail::make_spec(Format::INT8, Granularity::block(32, 64), false), RM, 1, false, false}, 37,
                          300, DType::F32);
  // E5M6 (the attention output's cached input: 12-bit codes, power-of-two scales); x F64; a NaN before quantization.
  add_operand_counts_case(out, {detail::make_spec(Format::E5M6, Granularity::tile_1x128(), true), RM, 1, false, false},
                          37, 656, DType::BF16);
  add_operand_counts_case(out, {detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), RM, 1, false, false},
                          64, 384, DType::F64);
  add_operand_counts_case(out, {detail::make_spec(Format::E4M3, Granularity::tile_1x128(), false), GN, 1, false, true},
                          64, 256, DType::F32);
  // BF16 codes (unscaled; the SNR lab's baseline): only subnormal-tiny values underflow.
  add_operand_counts_case(out, {detail::make_spec(Format::BF16, Granularity::tensor(), false), RM, 1, false, false}, 50,
                          70, DType::F32);
}

}  // namespace fp8train::backend_test
