// Gradient utilities over a ParamList: the global L2 norm of all gradients, clipping by that norm
// (torch.nn.utils.clip_grad_norm_ semantics: scale by max_norm / (norm + 1e-6) when norm > max_norm),
// zeroing, and a finiteness check. Reductions run in FP64 in a fixed order (parameter by parameter, each in
// fixed-size chunks), so the norm is identical for any thread count — resume must be bit-exact.
#pragma once
#include "optim/param.h"

namespace fp8train::optim {

// sqrt(Σ g²) over every gradient element; +inf/NaN when a gradient is not finite.
double global_grad_norm(const ParamList& params);

// Scales all gradients so their global norm is at most max_norm; returns the norm before clipping.
// max_norm <= 0 disables clipping (the norm is still computed and returned).
double clip_grad_norm(const ParamList& params, double max_norm);

// Multiplies every gradient by `factor`.
void scale_grads(const ParamList& params, float factor);

// Sets every gradient to zero.
void zero_grads(const ParamList& params);

}  // namespace fp8train::optim
