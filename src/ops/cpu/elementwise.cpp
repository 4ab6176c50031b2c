// CPU elementwise ops on matrix views: out = alpha·a + beta·b (any mix of f32 and bf16 arguments, computed in f32
// and rounded once into out; or all f64), fill.
#include "ops/elementwise.h"
#include "ops/cpu/kernels.h"

namespace fp8train::ops::cpu {
namespace {

template <class A, class B, class O, class T = compute_t<O>>
void axpby_impl(const AxpbyProblem& p, const A* a, const B* b, O* out) {
  const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
  const bool big = p.rows * p.cols > 32768;
#pragma omp parallel for schedule(static) if (big)
  for (int64_t r = 0; r < p.rows; ++r) {
    const A* ar = a + r * p.ld_a;
    O* o = out + r * p.ld_out;
    if (b == nullptr) {
      if (p.alpha == 1.0) {  // a copy (or a cast): no multiply
        for (int64_t c = 0; c < p.cols; ++c) o[c] = store<O>(load(ar[c]));
      } else {
        for (int64_t c = 0; c < p.cols; ++c) o[c] = store<O>(alpha * load(ar[c]));
      }
    } else {
      const B* br = b + r * p.ld_b;
      if (p.alpha == 1.0 && p.beta == 1.0) {
        for (int64_t c = 0; c < p.cols; ++c) o[c] = store<O>(load(ar[c]) + load(br[c]));
      } else {
        for (int64_t c = 0; c < p.cols; ++c) o[c] = store<O>(alpha * load(ar[c]) + beta * load(br[c]));
      }
    }
  }
}

// f(A{}, B{}, O{}) for the argument dtypes: each f32 or bf16, or all f64 (the entry point checks).
template <class F>
void dispatch_axpby(const AxpbyProblem& p, F&& f) {
  if (p.dtype == DType::F64) return f(double{}, double{}, double{});
  auto with_out = [&](auto a, auto b) {
    if (p.dtype == DType::BF16) return f(a, b, bf16{});
    return f(a, b, float{});
  };
  auto with_b = [&](auto a) {
    if (p.b_dtype == DType::BF16) return with_out(a, bf16{});
    return with_out(a, float{});
  };
  if (p.a_dtype == DType::BF16) return with_b(bf16{});
  return with_b(float{});
}

template <class T>
void fill_impl(const AxpbyProblem& p, double value, T* out) {
  const T v = static_cast<T>(static_cast<compute_t<T>>(value));
#pragma omp parallel for schedule(static) if (p.rows * p.cols > 32768)
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) out[r * p.ld_out + c] = v;
}

}  // namespace

void axpby(const ExecCtx&, const AxpbyProblem& p, const void* a, const void* b, void* out) {
  dispatch_axpby(p, [&](auto a_tag, auto b_tag, auto out_tag) {
    using A = decltype(a_tag);
    using B = decltype(b_tag);
    using O = decltype(out_tag);
    axpby_impl<A, B, O>(p, static_cast<const A*>(a), static_cast<const B*>(b), static_cast<O*>(out));
  });
}

void fill(const ExecCtx&, const AxpbyProblem& p, double value, void* out) {
  dispatch_storage(p.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_impl<T>(p, value, static_cast<T*>(out));
  });
}

}  // namespace fp8train::ops::cpu
