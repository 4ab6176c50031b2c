// recipe::measure_health and recipe::measure_accuracy on the CPU, now computed through the numerics-health ops
// (ops/health_stats.h), give exactly the numbers of the host loops they replaced (copied below as they were): every
// count, the scale range and every FP64 sum bit for bit, on operands with saturating values, underflow, zeros and
// NaNs, in every orientation and layout training measures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../common/random_data.h"
#include "common/error.h"
#include "ops/elementwise.h"
#include "ops/quantize.h"
#include "recipe/health.h"

using namespace fp8train;
using fp8train::recipe::GemmAccuracy;
using fp8train::recipe::OperandHealth;

namespace {

// ---- the former host arithmetic ---------------------------------------------------------------------------------
std::vector<float> former_host_values(const Tensor& x) {
  if (x.dtype() == DType::F32) return x.to_vector<float>();
  const Tensor f = Tensor::empty(x.shape(), DType::F32, MemCategory::Workspace, Device::cpu());
  ops::copy(ExecCtx::cpu(), x, f);
  return f.to_vector<float>();
}

OperandHealth former_measure_health(const Tensor& x_in, const quant::QTensor& q, bool transposed) {
  const std::vector<float> x = former_host_values(x_in);
  OperandHealth h;
  h.elements = q.rows * q.cols;
  for (float s : q.row_major_scales()) {
    if (!std::isfinite(s)) continue;
    h.scale_min = std::min(h.scale_min, s);
    h.scale_max = std::max(h.scale_max, s);
  }
  float limit = quant::format_max(q.spec.format);
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
      break;
  }
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const float v = transposed ? x[c * q.rows + r] : x[r * q.cols + c];
      if (v == 0.0f || std::isnan(v)) continue;
      ++h.nonzero;
      const float s = q.scale_of(r, c);
      if (std::fabs(v) / s > limit) ++h.saturated;
      if (q.decoded_at(r, c) == 0.0f) ++h.underflow;
    }
  }
  return h;
}

GemmAccuracy former_measure_accuracy(const Tensor& y_t, const Tensor& ref_t) {
  const std::vector<float> y = former_host_values(y_t), y_ref = former_host_values(ref_t);
  const int64_t rows = y_t.size(0), cols = y_t.size(1);
  std::vector<double> err(static_cast<size_t>(rows)), ref(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    double e = 0, r2 = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double r = y_ref[i * cols + j], d = static_cast<double>(y[i * cols + j]) - r;
      e += d * d;
      r2 += r * r;
    }
    err[static_cast<size_t>(i)] = e;
    ref[static_cast<size_t>(i)] = r2;
  }
  GemmAccuracy a;
  for (size_t i = 0; i < err.size(); ++i) {
    a.error_sq += err[i];
    a.reference_sq += ref[i];
    if (ref[i] > 0) {
      a.row_rel_sum += std::sqrt(err[i] / ref[i]);
      ++a.rows;
    }
  }
  return a;
}

// ---- inputs -----------------------------------------------------------------------------------------------------
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

Tensor as_dtype(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype) {
  const Tensor f = Tensor::from_vector(v, {rows, cols});
  if (dtype == DType::F32) return f;
  const Tensor b = Tensor::empty({rows, cols}, dtype);
  ops::copy(ExecCtx::cpu(), f, b);
  return b;
}

// N(0, 1) values with a spread of magnitudes per row, some tiny (underflow), NaN in one place when asked.
std::vector<float> operand_values(int64_t rows, int64_t cols, uint64_t seed, bool nan) {
  std::vector<float> x = test_data::randn(rows * cols, seed);
  for (int64_t i = 0; i < rows * cols; ++i) {
    x[static_cast<size_t>(i)] *= std::pow(10.0f, static_cast<float>((i / cols) % 5) - 2.0f);
    if (i % 11 == 3) x[static_cast<size_t>(i)] *= 1e-6f;
    if (i % 23 == 7) x[static_cast<size_t>(i)] *= 1e-44f;
  }
  if (nan) x[3] = std::numeric_limits<float>::quiet_NaN();
  return x;
}
// The same after quantization, as a stale scale sees it: some values ×8 (saturate), zeros, NaNs.
std::vector<float> stale(std::vector<float> x) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 13 == 1) x[i] *= 8.0f;
    if (i % 29 == 2) x[i] = 0.0f;
    if (i % 31 == 4) x[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

struct Form {
  quant::Format format;
  quant::Granularity granularity;
  bool pow2;
  quant::ScaleLayout layout;
  int64_t groups;
  bool transposed;
  DType dtype;
  int64_t rows, cols;  // of x
  bool nan_before = false;
};

}  // namespace

TEST(HealthMeasure, OperandHealthOnTheCpuIsTheFormerHostLoopExactly) {
  using quant::Format;
  using quant::Granularity;
  const auto RM = quant::ScaleLayout::RowMajor, GN = quant::ScaleLayout::GemmNative;
  const std::vector<Form> forms = {
      {Format::E4M3, Granularity::tile_1x128(), false, RM, 1, false, DType::BF16, 200, 300},
      {Format::E4M3, Granularity::tile_1x128(), false, GN, 1, true, DType::BF16, 272, 260},  // Wgrad's 128x1 copy
      {Format::E5M2, Granularity::tile_1x128(), true, GN, 1, false, DType::F32, 130, 256},
      {Format::INT8, Granularity::tile_1x128(), false, RM, 1, true, DType::F32, 256, 129},
      {Format::E4M3, Granularity::block_128x128(), false, GN, 3, false, DType::F32, 3 * 160, 256},  // experts
      {Format::E4M3, Granularity::block_128x128(), true, RM, 1, true, DType::F32, 300, 260},        // Wᵀ
      {Format::E5M6, Granularity::tile_1x128(), true, RM, 1, false, DType::BF16, 37, 656},
      {Format::E4M3, Granularity::tensor(), false, RM, 4, false, DType::F32, 4 * 33, 70},
      {Format::INT8, Granularity::block(32, 64), false, RM, 1, false, DType::F32, 37, 300},
      {Format::E4M3, Granularity::tile_1x128(), false, RM, 1, false, DType::F32, 64, 256, /*nan_before=*/true},
  };
  int64_t saturated = 0, underflow = 0, skipped = 0;
  for (size_t k = 0; k < forms.size(); ++k) {
    const Form& f = forms[k];
    SCOPED_TRACE(std::string(quant::format_name(f.format)) + " " + f.granularity.name() + " form " + std::to_string(k));
    const std::vector<float> xq = operand_values(f.rows, f.cols, 100 + k, f.nan_before);
    quant::QuantSpec spec;
    spec.format = f.format;
    spec.granularity = f.granularity;
    spec.scale_mode = f.pow2 ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
    const quant::QTensor full =
        ops::quantize(ExecCtx::cpu(), as_dtype(xq, f.rows, f.cols, f.dtype), spec,
                      f.transposed ? ops::QuantizeOutputs::Both : ops::QuantizeOutputs::Rowwise, f.layout, f.groups);
    const quant::QTensor q = f.transposed ? full.transposed().rowwise_only() : full;
    const std::vector<float> xs = stale(xq);
    const Tensor x = as_dtype(xs, f.rows, f.cols, f.dtype);
    const OperandHealth got = recipe::measure_health(x, q, f.transposed);
    const OperandHealth want = former_measure_health(x, q, f.transposed);
    EXPECT_EQ(got.elements, want.elements);
    EXPECT_EQ(got.nonzero, want.nonzero);
    EXPECT_EQ(got.saturated, want.saturated);
    EXPECT_EQ(got.underflow, want.underflow);
    EXPECT_TRUE(same_bits(got.scale_min, want.scale_min)) << got.scale_min << " vs " << want.scale_min;
    EXPECT_TRUE(same_bits(got.scale_max, want.scale_max)) << got.scale_max << " vs " << want.scale_max;
    // The same through an explicit context.
    const OperandHealth again = recipe::measure_health(ExecCtx::cpu(), x, q, f.transposed);
    EXPECT_EQ(again.saturated, want.saturated);
    EXPECT_EQ(again.underflow, want.underflow);
    saturated += want.saturated;
    underflow += want.underflow;
    skipped += want.elements - want.nonzero;
  }
  // The inputs exercise every rule.
  EXPECT_GT(saturated, 0);
  EXPECT_GT(underflow, 0);
  EXPECT_GT(skipped, 0);
}

TEST(HealthMeasure, GemmAccuracyOnTheCpuIsTheFormerHostLoopExactly) {
  struct Case {
    int64_t rows, cols;
    DType y, ref;
  };
  for (const Case& c : {Case{7, 1000, DType::F32, DType::F32}, Case{130, 33, DType::BF16, DType::F32},
                        Case{9, 2900, DType::F32, DType::BF16}, Case{1, 1, DType::F32, DType::F32}}) {
    SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols));
    std::vector<float> r = test_data::randn(c.rows * c.cols, 7 + c.cols), y = r;
    const std::vector<float> noise = test_data::randn(c.rows * c.cols, 8 + c.cols);
    for (size_t i = 0; i < y.size(); ++i) y[i] *= 1.0f + 0.004f * noise[i];
    if (c.rows >= 3) std::fill(r.begin() + c.cols, r.begin() + 2 * c.cols, 0.0f);  // a zero reference row
    if (c.rows >= 5) y[static_cast<size_t>(3 * c.cols + 1)] = std::numeric_limits<float>::quiet_NaN();
    const Tensor yt = as_dtype(y, c.rows, c.cols, c.y), rt = as_dtype(r, c.rows, c.cols, c.ref);
    const GemmAccuracy got = recipe::measure_accuracy(yt, rt), want = former_measure_accuracy(yt, rt);
    EXPECT_TRUE(same_bits(got.error_sq, want.error_sq)) << got.error_sq << " vs " << want.error_sq;
    EXPECT_TRUE(same_bits(got.reference_sq, want.reference_sq)) << got.reference_sq << " vs " << want.reference_sq;
    EXPECT_TRUE(same_bits(got.row_rel_sum, want.row_rel_sum)) << got.row_rel_sum << " vs " << want.row_rel_sum;
    EXPECT_EQ(got.rows, want.rows);
    if (c.rows >= 3) {
      EXPECT_LT(got.rows, c.rows);  // the zero reference row is not counted
    }
    // The host-pointer form agrees with the tensor form.
    if (c.y == DType::F32 && c.ref == DType::F32) {
      const GemmAccuracy p = recipe::measure_accuracy(y.data(), r.data(), c.rows, c.cols);
      EXPECT_TRUE(same_bits(p.error_sq, want.error_sq));
      EXPECT_TRUE(same_bits(p.row_rel_sum, want.row_rel_sum));
    }
  }
}

TEST(HealthMeasure, MismatchedShapesAreRefused) {
  const Tensor a = Tensor::zeros({4, 8}, DType::F32), b = Tensor::zeros({4, 9}, DType::F32);
  EXPECT_THROW(recipe::measure_accuracy(a, b), Error);
  const Tensor x = Tensor::from_vector(test_data::randn(4 * 128, 1), {4, 128});
  const quant::QTensor q = ops::quantize(ExecCtx::cpu(), x, quant::QuantSpec{}, ops::QuantizeOutputs::Both);
  EXPECT_THROW(recipe::measure_health(a, q), Error);
  EXPECT_NO_THROW(recipe::measure_health(x, q));
  // q.transposed() quantizes xᵀ [128, 4]: measured against x itself, transposed.
  EXPECT_NO_THROW(recipe::measure_health(x, q.transposed(), true));
  EXPECT_THROW(recipe::measure_health(x, q.transposed(), false), Error);
}
