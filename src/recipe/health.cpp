// Numerics health of the recipe GEMMs (see health.h).
#include "recipe/health.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "ops/health_stats.h"

namespace fp8train::recipe {

namespace {
// t on device d: itself, or a copy when it lives elsewhere (an operand whose quantization lives on another device,
// or the host fallback of measure_health).
Tensor on_device(const Tensor& t, Device d) { return t.device() == d ? t : t.to(d); }

// A matrix view (unit column stride) of t: t itself, or a contiguous copy of another layout.
Tensor matrix_view(const Tensor& t) { return t.is_matrix() ? t : t.clone(); }

// The context the measurement runs on: the caller's when it is on the tensors' device, else that device's own.
ExecCtx ctx_for(const ExecCtx& ctx, Device d) { return ctx.device == d ? ctx : ExecCtx::on(d); }

// The per-row sums (ops::row_error_sums, [rows, 2]) added up: rows in row order, as the host has always done.
GemmAccuracy accuracy_of_rows(const std::vector<double>& sums) {
  GemmAccuracy a;
  for (size_t i = 0; i + 1 < sums.size(); i += 2) {
    const double err = sums[i], ref = sums[i + 1];
    a.error_sq += err;
    a.reference_sq += ref;
    if (ref > 0) {
      a.row_rel_sum += std::sqrt(err / ref);
      ++a.rows;
    }
  }
  return a;
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

OperandHealth measure_health(const ExecCtx& ctx_in, const Tensor& x_in, const quant::QTensor& q_in, bool transposed) {
  const int64_t xr = transposed ? q_in.cols : q_in.rows, xc = transposed ? q_in.rows : q_in.cols;
  FP8T_CHECK(x_in.defined() && x_in.dim() == 2 && x_in.size(0) == xr && x_in.size(1) == xc && q_in.rowwise.defined(),
             "numerics health: operand {} does not match its quantization [{}, {}]{}",
             x_in.defined() ? x_in.str() : std::string("(undefined)"), q_in.rows, q_in.cols,
             transposed ? " (transposed)" : "");
  // The counts run where q lives (x moved there if it is elsewhere), except a payload dimension of 2^31 or more on
  // a GPU, which the CUDA op does not take: that is counted on the host.
  const bool huge = q_in.rows > 0x7FFFFFFF || q_in.cols > 0x7FFFFFFF;
  const Device d = huge ? Device::cpu() : q_in.device();
  const ExecCtx ctx = ctx_for(ctx_in, d);
  const quant::QTensor q = q_in.device() == d ? q_in : q_in.to(d);
  const Tensor x = matrix_view(on_device(x_in, d));
  const Tensor counts = Tensor::empty({3}, DType::I64, MemCategory::Workspace, d);
  const Tensor range = Tensor::empty({2}, DType::F32, MemCategory::Workspace, d);
  ops::quantized_operand_counts(ctx, x, q, transposed, counts, range);
  ctx.synchronize();  // the read-backs below run on the device's own stream, which ctx's may not be
  const std::vector<int64_t> c = counts.to_vector<int64_t>();
  const std::vector<float> r = range.to_vector<float>();
  OperandHealth h;
  h.elements = q.rows * q.cols;
  h.nonzero = c[0];
  h.saturated = c[1];
  h.underflow = c[2];
  h.scale_min = r[0];
  h.scale_max = r[1];
  return h;
}

OperandHealth measure_health(const Tensor& x, const quant::QTensor& q, bool transposed) {
  return measure_health(ExecCtx::on(q.rowwise.defined() ? q.device() : x.device()), x, q, transposed);
}

double GemmAccuracy::relative_error() const {
  if (reference_sq > 0) return std::sqrt(error_sq / reference_sq);
  return error_sq > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

// Host arrays: through the CPU op (one copy into tensors), so both forms share one arithmetic.
GemmAccuracy measure_accuracy(const float* y, const float* y_ref, int64_t rows, int64_t cols) {
  const std::vector<float> a(y, y + rows * cols), b(y_ref, y_ref + rows * cols);
  return measure_accuracy(ExecCtx::cpu(), Tensor::from_vector(a, {rows, cols}, MemCategory::Workspace, Device::cpu()),
                          Tensor::from_vector(b, {rows, cols}, MemCategory::Workspace, Device::cpu()));
}

GemmAccuracy measure_accuracy(const ExecCtx& ctx_in, const Tensor& y_in, const Tensor& ref_in) {
  FP8T_CHECK(y_in.defined() && ref_in.defined() && y_in.dim() == 2 && y_in.shape() == ref_in.shape(),
             "gemm accuracy: product {} and reference {} differ",
             y_in.defined() ? y_in.str() : std::string("(undefined)"),
             ref_in.defined() ? ref_in.str() : std::string("(undefined)"));
  const Device d = y_in.device();
  const ExecCtx ctx = ctx_for(ctx_in, d);
  const Tensor y = matrix_view(y_in), ref = matrix_view(on_device(ref_in, d));
  const int64_t rows = y.size(0);
  if (rows == 0) return {};
  const Tensor sums = Tensor::empty({rows, 2}, DType::F64, MemCategory::Workspace, d);
  ops::row_error_sums(ctx, y, ref, sums);
  ctx.synchronize();  // the read-back runs on the device's own stream, which ctx's may not be
  return accuracy_of_rows(sums.to_vector<double>());
}

GemmAccuracy measure_accuracy(const Tensor& y, const Tensor& y_ref) {
  FP8T_CHECK(y.defined(), "gemm accuracy: the product is undefined");
  return measure_accuracy(ExecCtx::on(y.device()), y, y_ref);
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
