// CPU RMSNorm: y = x·rstd·w with rstd = 1/sqrt(mean(x²) + eps) per row.
// Backward, with g = dy∘w:  dx = rstd·g − x·rstd³·(Σ g∘x)/dim;  dw += Σ_rows dy∘x·rstd.
// dw is reduced over fixed 64-row chunks whose partial sums are added in chunk order (thread-count independent).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/rmsnorm.h"

namespace fp8train::ops::cpu {
namespace {

constexpr int64_t kRowsPerChunk = 64;

template <class T>
void forward_impl(const RmsNormProblem& p, const T* x, const T* w, T* y, T* rstd_out) {
#pragma omp parallel for schedule(static) if (p.rows * p.dim > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* xr = x + r * p.ld_x;
    T ss = 0;
    for (int64_t c = 0; c < p.dim; ++c) ss += xr[c] * xr[c];
    const T rstd = T(1) / std::sqrt(ss / static_cast<T>(p.dim) + static_cast<T>(p.eps));
    if (rstd_out) rstd_out[r] = rstd;
    T* yr = y + r * p.ld_y;
    for (int64_t c = 0; c < p.dim; ++c) yr[c] = xr[c] * rstd * w[c];
  }
}

template <class T>
void backward_impl(const RmsNormProblem& p, const T* x, const T* w, const T* rstd, const T* dy, T* dx, T* dw) {
  const int64_t chunks = (p.rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<T> partial(dw ? static_cast<size_t>(chunks * p.dim) : 0, T(0));
  const T inv_dim = T(1) / static_cast<T>(p.dim);
#pragma omp parallel for schedule(static) if (p.rows * p.dim > 16384)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    T* part = dw ? partial.data() + ch * p.dim : nullptr;
    const int64_t r1 = std::min(p.rows, (ch + 1) * kRowsPerChunk);
    for (int64_t r = ch * kRowsPerChunk; r < r1; ++r) {
      const T* xr = x + r * p.ld_x;
      const T* dyr = dy + r * p.ld_dy;
      T* dxr = dx + r * p.ld_dx;
      const T rs = rstd[r];
      T dot = 0;
      for (int64_t c = 0; c < p.dim; ++c) dot += dyr[c] * w[c] * xr[c];
      const T k = rs * rs * rs * dot * inv_dim;
      if (p.accumulate_dx) {
        for (int64_t c = 0; c < p.dim; ++c) dxr[c] += rs * dyr[c] * w[c] - xr[c] * k;
      } else {
        for (int64_t c = 0; c < p.dim; ++c) dxr[c] = rs * dyr[c] * w[c] - xr[c] * k;
      }
      if (part)
        for (int64_t c = 0; c < p.dim; ++c) part[c] += dyr[c] * xr[c] * rs;
    }
  }
  if (!dw) return;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const T* part = partial.data() + ch * p.dim;
    for (int64_t c = 0; c < p.dim; ++c) dw[c] += part[c];
  }
}

}  // namespace

void rmsnorm_forward(const ExecCtx&, const RmsNormProblem& p, const void* x, const void* w, void* y, void* rstd) {
  dispatch_float(p.dtype, "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(p, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), static_cast<T*>(rstd));
  });
}

void rmsnorm_backward(const ExecCtx&, const RmsNormProblem& p, const void* x, const void* w, const void* rstd,
                      const void* dy, void* dx, void* dw) {
  dispatch_float(p.dtype, "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(p, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(rstd),
                     static_cast<const T*>(dy), static_cast<T*>(dx), static_cast<T*>(dw));
  });
}

}  // namespace fp8train::ops::cpu
