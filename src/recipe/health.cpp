// Numerics health of the recipe GEMMs (see health.h).
#include "recipe/health.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "ops/elementwise.h"

namespace fp8train::recipe {

namespace {
// x as FP32 values on the host, contiguous [rows, cols].
std::vector<float> host_values(const Tensor& x) {
  FP8T_CHECK(x.defined() && x.dim() == 2, "numerics health: expected a matrix, got {}",
             x.defined() ? x.str() : std::string("an undefined tensor"));
  const Tensor h = x.device().is_cpu() ? x : x.to(Device::cpu());
  if (h.dtype() == DType::F32) return h.to_vector<float>();
  const Tensor f = Tensor::empty(h.shape(), DType::F32, MemCategory::Workspace, Device::cpu());
  ops::copy(ExecCtx::cpu(), h, f);
  return f.to_vector<float>();
}
}  // namespace

void OperandHealth::merge(const OperandHealth& o) {
  elements += o.elements;
  nonzero += o.nonzero;
  saturated += o.saturated;
  underflow += o.underflow;
  scale_min = std::min(scale_min, o.scale_min);
  scale_max = std::max(scale_max, o.scale_max);
}

OperandHealth measure_health(const Tensor& x_in, const quant::QTensor& q_in, bool transposed) {
  const int64_t xr = transposed ? q_in.cols : q_in.rows, xc = transposed ? q_in.rows : q_in.cols;
  FP8T_CHECK(x_in.dim() == 2 && x_in.size(0) == xr && x_in.size(1) == xc && q_in.rowwise.defined(),
             "numerics health: operand {} does not match its quantization [{}, {}]{}", x_in.str(), q_in.rows, q_in.cols,
             transposed ? " (transposed)" : "");
  const std::vector<float> x = host_values(x_in);
  const quant::QTensor q = q_in.device().is_cpu() ? q_in : q_in.to(Device::cpu());
  OperandHealth h;
  h.elements = q.rows * q.cols;
  for (float s : q.row_major_scales()) {
    if (!std::isfinite(s)) continue;
    h.scale_min = std::min(h.scale_min, s);
    h.scale_max = std::max(h.scale_max, s);
  }
  // A value saturates when it would have rounded above the largest code: beyond fmax plus half its ulp
  // (a scale one float ulp off its ideal value must not count).
  float limit = quant::format_max(q.spec.format);
  switch (q.spec.format) {
    case quant::Format::E4M3:
      limit = 464.0f;
      break;  // 448 + 32 / 2
    case quant::Format::E5M2:
      limit = 61440.0f;
      break;  // 57344 + 8192 / 2
    case quant::Format::E5M6:
      limit = 65280.0f;
      break;  // 65024 + 512 / 2
    case quant::Format::INT8:
      limit = 127.5f;
      break;
    case quant::Format::BF16:
      break;
  }
  int64_t nonzero = 0, saturated = 0, underflow = 0;
#pragma omp parallel for schedule(static) reduction(+ : nonzero, saturated, underflow)
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const float v = transposed ? x[c * q.rows + r] : x[r * q.cols + c];
      if (v == 0.0f || std::isnan(v)) continue;
      ++nonzero;
      const float s = q.scale_of(r, c);
      if (std::fabs(v) / s > limit) ++saturated;
      if (q.decoded_at(r, c) == 0.0f) ++underflow;
    }
  }
  h.nonzero = nonzero;
  h.saturated = saturated;
  h.underflow = underflow;
  return h;
}

double GemmAccuracy::relative_error() const {
  if (reference_sq > 0) return std::sqrt(error_sq / reference_sq);
  return error_sq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// Double-precision sums that do not depend on the thread count (the runs do not): each row's sums in column order
// (rows in parallel), then the rows' in row order. (The expert GEMMs of a sampled step are ~10^8 values each.)
GemmAccuracy measure_accuracy(const float* y, const float* y_ref, int64_t rows, int64_t cols) {
  std::vector<double> err(static_cast<size_t>(rows)), ref(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static)
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

GemmAccuracy measure_accuracy(const Tensor& y, const Tensor& y_ref) {
  FP8T_CHECK(y.dim() == 2 && y.shape() == y_ref.shape(), "gemm accuracy: product {} and reference {} differ", y.str(),
             y_ref.str());
  const std::vector<float> a = host_values(y), b = host_values(y_ref);
  return measure_accuracy(a.data(), b.data(), y.size(0), y.size(1));
}

void HealthRecorder::record(const std::string& linear, GemmKind kind, const OperandHealth& a, const OperandHealth& b,
                            const GemmAccuracy& accuracy) {
  std::lock_guard<std::mutex> lock(mutex_);
  GemmHealth& g = health_[{linear, static_cast<int>(kind)}];
  g.linear = linear;
  g.kind = kind;
  g.quantized = true;
  ++g.calls;
  g.a.merge(a);
  g.b.merge(b);
  g.accuracy.merge(accuracy);
}

void HealthRecorder::record(const std::string& linear, GemmKind kind, const GemmAccuracy& accuracy) {
  std::lock_guard<std::mutex> lock(mutex_);
  GemmHealth& g = health_[{linear, static_cast<int>(kind)}];
  g.linear = linear;
  g.kind = kind;
  ++g.calls;
  g.accuracy.merge(accuracy);
}

std::vector<GemmHealth> HealthRecorder::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GemmHealth> out;
  out.reserve(health_.size());
  for (auto& [key, g] : health_) out.push_back(g);
  health_.clear();
  return out;
}

}  // namespace fp8train::recipe
