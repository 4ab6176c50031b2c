// Internal: cuDNN's fused attention for the BF16 attention core (attention_cudnn.cpp), beside the own kernels of
// attention_launch.h. attention_ops.cpp picks between them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

#include "ops/cuda/attention_launch.h"

namespace fp8train::ops::cuda::detail {

// Whether this build links cuDNN.
bool cudnn_attention_available();

// Runs the forward (o, lse) or the backward (dq, dk, dv) of `a` with cuDNN on `stream` and returns "", or returns
// why cuDNN cannot run this form (then nothing was launched and the caller uses its own kernels). `deterministic`
// (backward): cuDNN's deterministic engine instead of the one that accumulates dQ with atomics. `workspace(bytes)`
// returns device memory that stays valid until the launched work has run (stream-ordered). Throws Error when a
// plan that was built fails to execute.
std::string cudnn_attention_try(const AttnArgs& a, bool backward, bool deterministic, cudaStream_t stream,
                                const std::function<void*(int64_t)>& workspace);

}  // namespace fp8train::ops::cuda::detail
