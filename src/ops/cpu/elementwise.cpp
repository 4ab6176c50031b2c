// CPU elementwise ops on matrix views: out = alpha·a + beta·b, fill.
#include "ops/elementwise.h"
#include "ops/cpu/kernels.h"

namespace fp8train::ops::cpu {
namespace {

template <class T>
void axpby_impl(const AxpbyProblem& p, const T* a, const T* b, T* out) {
  const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
  const bool big = p.rows * p.cols > 32768;
#pragma omp parallel for schedule(static) if (big)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* ar = a + r * p.ld_a;
    T* o = out + r * p.ld_out;
    if (b == nullptr) {
      for (int64_t c = 0; c < p.cols; ++c) o[c] = alpha * ar[c];
    } else {
      const T* br = b + r * p.ld_b;
      if (p.alpha == 1.0 && p.beta == 1.0) {
        for (int64_t c = 0; c < p.cols; ++c) o[c] = ar[c] + br[c];
      } else {
        for (int64_t c = 0; c < p.cols; ++c) o[c] = alpha * ar[c] + beta * br[c];
      }
    }
  }
}

template <class T>
void fill_impl(const AxpbyProblem& p, double value, T* out) {
  const T v = static_cast<T>(value);
#pragma omp parallel for schedule(static) if (p.rows * p.cols > 32768)
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) out[r * p.ld_out + c] = v;
}

}  // namespace

void axpby(const ExecCtx&, const AxpbyProblem& p, const void* a, const void* b, void* out) {
  dispatch_float(p.dtype, "axpby", [&](auto tag) {
    using T = decltype(tag);
    axpby_impl<T>(p, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
  });
}

void fill(const ExecCtx&, const AxpbyProblem& p, double value, void* out) {
  dispatch_float(p.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_impl<T>(p, value, static_cast<T*>(out));
  });
}

}  // namespace fp8train::ops::cpu
