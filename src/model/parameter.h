// Named parameters and non-trainable state of a model.
//   Parameter: a stable name ("layers.3.attn.wq_a.weight", "layers.3.moe.experts.5.w1.weight"), the value
//   (MemCategory::Weights) and, when trainable, the gradient (MemCategory::Gradients) of the same shape and dtype
//   (F32 master weights; F64 in gradient-check models). Values and gradients are contiguous; a parameter may be
//   a row block of a fused buffer (e.g. w1 and w3 are the two halves of one [2F, d] matrix so their GEMMs run
//   as one), which is still contiguous, so the optimizer and checkpoints see one flat array per name.
//   Non-trainable state (the routers' biases b_i) is registered as a buffer: a value without a gradient.
// Initialization is per name (seeded by the model seed and a hash of the name), so it does not depend on the
// order in which layers are built.
// Flat arenas (finalize): once the model is built, every trainable parameter moves into two arenas of one layout
// (tensor/arena.h) — values (MemCategory::Weights) and gradients (MemCategory::Gradients) — with one region per
// Storage (a fused buffer moves as one region, its named views inside it), the regions of parameters with weight
// decay first (kDecayGroup) and those without (1-D gains, kNoDecayGroup) after them, and the views in
// registration order. The layers' Tensors keep pointing at the same Storage objects, which now live in the arenas.
// Buffers (router biases) stay outside: they are not trained, not reduced across ranks, and are updated by the
// model itself between steps.
// Expert parallelism with the experts sharded in memory (MoE built with an ExpertShard): this rank's routed
// experts are registered as `local_experts` parameters and their regions form their own group, placed first
// (kExpertGroup), so that the arena is [this rank's experts | the other parameters with weight decay | those
// without]: the experts' elements are one prefix (reduced over the ranks holding the same experts only), the
// replicated ones the rest, and the weight-decay elements still one contiguous range.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/arena.h"
#include "tensor/tensor.h"

namespace fp8train::model {

enum class Init : uint8_t { Normal, Ones, Zeros };

struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;  // undefined for buffers
  bool trainable = true;
  bool weight_decay = true;  // false for RMSNorm gains and other 1-D parameters
  Init init = Init::Normal;
  bool local_experts = false;  // a shard of the routed experts that only some ranks hold (see the top)
};

class ParameterSet {
 public:
  // The arena groups of finalize(), in the order they are placed: the local experts' (weight decay, empty unless
  // the experts are sharded), the other parameters with weight decay, those without.
  static constexpr int kExpertGroup = 0;
  static constexpr int kDecayGroup = 1;
  static constexpr int kNoDecayGroup = 2;

  // A parameter with its own storage; grad zero-filled.
  Parameter& add(const std::string& name, const Shape& shape, DType dtype, Init init);
  // A parameter whose value and grad are views into buffers owned by a layer (must be contiguous); local_experts:
  // a shard of the routed experts (Parameter::local_experts).
  Parameter& add_view(const std::string& name, const Tensor& value, const Tensor& grad, Init init,
                      bool local_experts = false);
  // Non-trainable state (no gradient, never decayed), e.g. a router bias; `value` is kept as given.
  Parameter& add_buffer(const std::string& name, const Tensor& value);

  Parameter& get(const std::string& name);
  const Parameter* find(const std::string& name) const;
  std::vector<Parameter*> trainable() const;  // in registration order
  std::vector<Parameter*> buffers() const;
  int64_t trainable_count() const;  // total elements of trainable parameters

  void zero_grad();
  // Normal(0, std²) / ones / zeros per parameter (buffers untouched), seeded per name.
  void initialize(uint64_t seed, double std);

  // A counter that changes whenever the parameter values may have changed (initialize(), mark_updated()): the
  // Linears refresh their compute copies of the weights when it moves.
  uint64_t version() const { return version_; }
  void mark_updated() { ++version_; }
  // Moves every trainable parameter's value and gradient into the two arenas (see above); values are kept.
  // Checks that all trainable parameters share one dtype and device, that each value Storage holds nothing but
  // named parameters of one weight-decay kind, and that the gradients mirror the values (one gradient Storage
  // per value Storage, each gradient at its value's offset). No trainable parameter may be added afterwards.
  // Calling it again does nothing.
  void finalize();
  bool finalized() const { return values_.defined(); }
  // The arenas (finalize() first): views named and shaped like the parameters, in registration order.
  const Arena& value_arena() const;
  const Arena& grad_arena() const;
  // The arena elements of the parameters with / without weight decay (contiguous, padding included; the local
  // experts' are among those with), and of the local experts (empty unless sharded; a prefix of the arena).
  ArenaRange decay_range() const;
  ArenaRange no_decay_range() const { return value_arena().layout().group_range(kNoDecayGroup); }
  ArenaRange expert_range() const { return value_arena().layout().group_range(kExpertGroup); }

 private:
  Parameter& insert(Parameter p);
  std::vector<std::unique_ptr<Parameter>> params_;
  uint64_t version_ = 0;
  Arena values_, grads_;
};

}  // namespace fp8train::model
