// CPU SwiGLU on a fused [rows, 2F] input (gate | up): out = silu(gate)∘up, silu(g) = g·σ(g).
// Backward: d_up = dout∘silu(g);  d_gate = dout∘up∘σ(g)·(1 + g·(1 − σ(g))).
#include <cmath>

#include "ops/cpu/kernels.h"
#include "ops/swiglu.h"

namespace fp8train::ops::cpu {
namespace {

template <class T>
void forward_impl(const SwigluProblem& p, const T* in, T* out) {
  const int64_t f = p.ffn_dim;
#pragma omp parallel for schedule(static) if (p.rows * f > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* g = in + r * p.ld_in;
    const T* u = g + f;
    T* o = out + r * p.ld_out;
    for (int64_t c = 0; c < f; ++c) {
      const T sig = T(1) / (T(1) + std::exp(-g[c]));
      o[c] = g[c] * sig * u[c];
    }
  }
}

template <class T>
void backward_impl(const SwigluProblem& p, const T* in, const T* dout, T* din) {
  const int64_t f = p.ffn_dim;
#pragma omp parallel for schedule(static) if (p.rows * f > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* g = in + r * p.ld_in;
    const T* u = g + f;
    const T* d = dout + r * p.ld_out;
    T* dg = din + r * p.ld_in;
    T* du = dg + f;
    for (int64_t c = 0; c < f; ++c) {
      const T sig = T(1) / (T(1) + std::exp(-g[c]));
      const T silu = g[c] * sig;
      const T dgate = d[c] * u[c] * sig * (T(1) + g[c] * (T(1) - sig));
      du[c] = d[c] * silu;
      dg[c] = dgate;
    }
  }
}

}  // namespace

void swiglu_forward(const ExecCtx&, const SwigluProblem& p, const void* in, void* out) {
  dispatch_float(p.dtype, "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(p, static_cast<const T*>(in), static_cast<T*>(out));
  });
}

void swiglu_backward(const ExecCtx&, const SwigluProblem& p, const void* in, const void* dout, void* din) {
  dispatch_float(p.dtype, "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(p, static_cast<const T*>(in), static_cast<const T*>(dout), static_cast<T*>(din));
  });
}

}  // namespace fp8train::ops::cpu
