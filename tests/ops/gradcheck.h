// Test helpers shared by tests/ops and tests/model: random tensors, f32 <-> f64 copies, and the FP64
// central-difference gradient check.
//   grad_check_error(loss, x, analytic): perturbs every element x_i (or an evenly spaced sample) by ±eps,
//   fd_i = (L(x + eps·e_i) − L(x − eps·e_i)) / (2·eps), and returns max_i |fd_i − analytic_i| / max_i |analytic_i|
//   — the error relative to the gradient's largest entry (the model's checks require < 1e-6 in FP64).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "tensor/tensor.h"

namespace fp8train::testing {

inline Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, dtype);
  std::uniform_real_distribution<double> u(lo, hi);
  if (dtype == DType::F64) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  } else {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(u(rng));
  }
  return t;
}

// Element-wise copy converting between f32 and f64 (contiguous CPU tensors of the same shape).
inline Tensor convert(const Tensor& src, DType dtype) {
  Tensor out = Tensor::empty(src.shape(), dtype);
  const Tensor s = src.is_contiguous() ? src : src.clone();
  for (int64_t i = 0; i < s.numel(); ++i) {
    const double v = s.dtype() == DType::F64 ? s.data<double>()[i] : static_cast<double>(s.data<float>()[i]);
    if (dtype == DType::F64)
      out.data<double>()[i] = v;
    else
      out.data<float>()[i] = static_cast<float>(v);
  }
  return out;
}

inline std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::F64) return t.to_vector<double>();
  const std::vector<float> f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

// max |a − b| / max |b| (b the reference).
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den > 0 ? num / den : num;
}

// Central-difference check of `analytic` (∂L/∂x, x contiguous f64 on the CPU). At most `max_samples` elements
// are perturbed (evenly spaced, first and last included); 0 = all.
inline double grad_check_error(const std::function<double()>& loss, const Tensor& x, const std::vector<double>& analytic,
                               double eps = 1e-6, int64_t max_samples = 0) {
  double* p = x.data<double>();
  const int64_t n = x.numel();
  const int64_t samples = max_samples > 0 ? std::min<int64_t>(max_samples, n) : n;
  double worst = 0, scale = 0;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t i = samples == n ? s : (samples == 1 ? 0 : s * (n - 1) / (samples - 1));
    const double orig = p[i];
    p[i] = orig + eps;
    const double lp = loss();
    p[i] = orig - eps;
    const double lm = loss();
    p[i] = orig;
    const double fd = (lp - lm) / (2 * eps);
    worst = std::max(worst, std::abs(fd - analytic[static_cast<size_t>(i)]));
  }
  return scale > 0 ? worst / scale : worst;
}

// Σ w∘y over two same-shape tensors (f64), the scalar loss the op tests differentiate: ∂L/∂y = w.
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  const std::vector<double> a = as_doubles(y), b = as_doubles(w);
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace fp8train::testing
