// ParamArenas: the optimizer's view of a model's trainable parameters — FP32 master values and FP32 gradients in
// two arenas of one layout (tensor/arena.h). The layout's named views (name, shape, offset) list the parameters in
// registration order (the order checkpoints and the gradient norm walk them); the parameters with weight decay
// occupy one contiguous range of elements and those without (norm gains and other 1-D parameters) another. The
// model owns the arenas; the optimizer keeps moment arenas of the same layout, so one element offset addresses a
// parameter's value, gradient and moments alike. Arena padding is zero in every arena and stays zero under
// AdamW, clipping and zeroing.
#pragma once
#include "tensor/arena.h"

namespace fp8train::optim {

struct ParamArenas {
  Arena values;         // F32 master weights (MemCategory::Weights)
  Arena grads;          // F32 gradients (MemCategory::Gradients), same layout
  ArenaRange decay;     // elements of the parameters with weight decay
  ArenaRange no_decay;  // elements of the parameters without
  // Expert parallelism with the experts sharded in memory: this rank's routed experts, a prefix [0, e) of the
  // arena inside `decay` (model/parameter.h); empty otherwise. Its gradients are summed over the ranks holding the
  // same experts only (dist::Zero1).
  ArenaRange experts;
  int expert_shards = 1;  // the model's routed experts are split into this many shards (`experts` holds one)

  const ArenaLayout& layout() const { return values.layout(); }
  // Elements of the parameters in `experts` (padding excluded): what one shard of the experts holds.
  int64_t local_expert_elements() const;
  // The whole model's parameter elements: this rank's, with its shard of the experts counted expert_shards times.
  int64_t model_elements() const { return layout().view_elements() + (expert_shards - 1) * local_expert_elements(); }
  // Throws naming the problem unless: both arenas are defined, F32, on one device, share one layout; the two
  // ranges lie inside the arena without overlapping, and each view lies inside one of them; `experts` is empty or a
  // prefix of the arena inside `decay`.
  void validate() const;
};

}  // namespace fp8train::optim
