// CPU RMSNorm: y = x·rstd·w with rstd = 1/sqrt(mean(x²) + eps) per row.
// Backward, with g = dy∘w:  dx = rstd·g − x·rstd³·(Σ g∘x)/dim;  dw += Σ_rows dy∘x·rstd.
// dw is reduced over fixed 64-row chunks whose partial sums are added in chunk order (thread-count independent).
// x, y, dy, dx in the storage type S; w, dw and rstd in its compute type C (kernels.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/rmsnorm.h"

namespace fp8train::ops::cpu {
namespace {

constexpr int64_t kRowsPerChunk = 64;

template <class S, class T = compute_t<S>>
void forward_impl(const RmsNormProblem& p, const S* x, const T* w, S* y, T* rstd_out) {
#pragma omp parallel for schedule(static) if (p.rows * p.dim > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const S* xr = x + r * p.ld_x;
    T ss = 0;
    for (int64_t c = 0; c < p.dim; ++c) ss += load(xr[c]) * load(xr[c]);
    const T rstd = T(1) / std::sqrt(ss / static_cast<T>(p.dim) + static_cast<T>(p.eps));
    if (rstd_out) rstd_out[r] = rstd;
    S* yr = y + r * p.ld_y;
    for (int64_t c = 0; c < p.dim; ++c) yr[c] = store<S>(load(xr[c]) * rstd * w[c]);
  }
}

template <class S, class T = compute_t<S>>
void backward_impl(const RmsNormProblem& p, const S* x, const T* w, const T* rstd, const S* dy, S* dx, T* dw) {
  const int64_t chunks = (p.rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<T> partial(dw ? static_cast<size_t>(chunks * p.dim) : 0, T(0));
  const T inv_dim = T(1) / static_cast<T>(p.dim);
#pragma omp parallel for schedule(static) if (p.rows * p.dim > 16384)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    T* part = dw ? partial.data() + ch * p.dim : nullptr;
    const int64_t r1 = std::min(p.rows, (ch + 1) * kRowsPerChunk);
    for (int64_t r = ch * kRowsPerChunk; r < r1; ++r) {
      const S* xr = x + r * p.ld_x;
      const S* dyr = dy + r * p.ld_dy;
      S* dxr = dx + r * p.ld_dx;
      const T rs = rstd[r];
      T dot = 0;
      for (int64_t c = 0; c < p.dim; ++c) dot += load(dyr[c]) * w[c] * load(xr[c]);
      const T k = rs * rs * rs * dot * inv_dim;
      if (p.accumulate_dx) {
        for (int64_t c = 0; c < p.dim; ++c)
          dxr[c] = store<S>(load(dxr[c]) + (rs * load(dyr[c]) * w[c] - load(xr[c]) * k));
      } else {
        for (int64_t c = 0; c < p.dim; ++c) dxr[c] = store<S>(rs * load(dyr[c]) * w[c] - load(xr[c]) * k);
      }
      if (part)
        for (int64_t c = 0; c < p.dim; ++c) part[c] += load(dyr[c]) * load(xr[c]) * rs;
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
  dispatch_storage(p.dtype, "rmsnorm_forward", [&](auto tag) {
    using S = decltype(tag);
    using T = compute_t<S>;
    forward_impl<S>(p, static_cast<const S*>(x), static_cast<const T*>(w), static_cast<S*>(y), static_cast<T*>(rstd));
  });
}

void rmsnorm_backward(const ExecCtx&, const RmsNormProblem& p, const void* x, const void* w, const void* rstd,
                      const void* dy, void* dx, void* dw) {
  dispatch_storage(p.dtype, "rmsnorm_backward", [&](auto tag) {
    using S = decltype(tag);
    using T = compute_t<S>;
    backward_impl<S>(p, static_cast<const S*>(x), static_cast<const T*>(w), static_cast<const T*>(rstd),
                     static_cast<const S*>(dy), static_cast<S*>(dx), static_cast<T*>(dw));
  });
}

}  // namespace fp8train::ops::cpu
