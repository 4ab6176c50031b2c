// CPU SwiGLU on a fused [rows, 2F] input (gate | up): out = silu(gate)∘up, silu(g) = g·σ(g).
// Backward: d_up = dout∘silu(g);  d_gate = dout∘up∘σ(g)·(1 + g·(1 − σ(g))).
#include <cmath>

#include "ops/cpu/kernels.h"
#include "ops/swiglu.h"

namespace fp8train::ops::cpu {
namespace {

template <class S, class T = compute_t<S>>
void forward_impl(const SwigluProblem& p, const S* in, S* out) {
  const int64_t f = p.ffn_dim;
#pragma omp parallel for schedule(static) if (p.rows * f > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const S* g = in + r * p.ld_in;
    const S* u = g + f;
    S* o = out + r * p.ld_out;
    for (int64_t c = 0; c < f; ++c) {
      const T gc = load(g[c]);
      const T sig = T(1) / (T(1) + std::exp(-gc));
      o[c] = store<S>(gc * sig * load(u[c]));
    }
  }
}

template <class S, class T = compute_t<S>>
void backward_impl(const SwigluProblem& p, const S* in, const S* dout, S* din) {
  const int64_t f = p.ffn_dim;
#pragma omp parallel for schedule(static) if (p.rows * f > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    const S* g = in + r * p.ld_in;
    const S* u = g + f;
    const S* d = dout + r * p.ld_out;
    S* dg = din + r * p.ld_in;
    S* du = dg + f;
    for (int64_t c = 0; c < f; ++c) {
      const T gc = load(g[c]), uc = load(u[c]), dc = load(d[c]);
      const T sig = T(1) / (T(1) + std::exp(-gc));
      const T silu = gc * sig;
      const T dgate = dc * uc * sig * (T(1) + gc * (T(1) - sig));
      du[c] = store<S>(dc * silu);
      dg[c] = store<S>(dgate);
    }
  }
}

}  // namespace

void swiglu_forward(const ExecCtx&, const SwigluProblem& p, const void* in, void* out) {
  dispatch_storage(p.dtype, "swiglu_forward", [&](auto tag) {
    using S = decltype(tag);
    forward_impl<S>(p, static_cast<const S*>(in), static_cast<S*>(out));
  });
}

void swiglu_backward(const ExecCtx&, const SwigluProblem& p, const void* in, const void* dout, void* din) {
  dispatch_storage(p.dtype, "swiglu_backward", [&](auto tag) {
    using S = decltype(tag);
    backward_impl<S>(p, static_cast<const S*>(in), static_cast<const S*>(dout), static_cast<S*>(din));
  });
}

}  // namespace fp8train::ops::cpu
