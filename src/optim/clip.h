// Gradient utilities over the gradient arena: the global L2 norm of all gradients, clipping by that norm
// (torch.nn.utils.clip_grad_norm_ semantics: scale by max_norm / (norm + 1e-6) when norm > max_norm), scaling and
// zeroing. The norm is ops::sum_squares_segments with one segment per parameter (registration order), each in
// FP64 chunks of 16384 added in order, and the per-parameter sums added in registration order on the host: the
// same bits whatever the thread count or the arena's padding — resume must be bit-exact.
#pragma once
#include "optim/param.h"
#include "tensor/exec_ctx.h"

namespace fp8train::optim {

// sqrt(Σ g²) over every gradient element; +inf/NaN when a gradient is not finite.
double global_grad_norm(const ExecCtx& ctx, const ParamArenas& params);

// Scales all gradients so their global norm is at most max_norm; returns the norm before clipping.
// max_norm <= 0 disables clipping (the norm is still computed and returned).
double clip_grad_norm(const ExecCtx& ctx, const ParamArenas& params, double max_norm);

// Multiplies every gradient by `factor`.
void scale_grads(const ExecCtx& ctx, const ParamArenas& params, float factor);

// Sets every gradient to zero.
void zero_grads(const ParamArenas& params);

}  // namespace fp8train::optim
