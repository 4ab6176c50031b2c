// Named parameters and non-trainable state of a model.
//   Parameter: a stable name ("layers.3.attn.wq_a.weight", "layers.3.moe.experts.5.w1.weight"), the value
//   (MemCategory::Weights) and, when trainable, the gradient (MemCategory::Gradients) of the same shape and dtype
//   (F32 master weights; F64 in gradient-check models). Values and gradients are contiguous; a parameter may be
//   a row block of a fused buffer (e.g. w1 and w3 are the two halves of one [2F, d] matrix so their GEMMs run
//   as one), which is still contiguous, so the optimizer and checkpoints see one flat array per name.
//   Non-trainable state (the routers' biases b_i) is registered as a buffer: a value without a gradient.
// Initialization is per name (seeded by the model seed and a hash of the name), so it does not depend on the
// order in which layers are built.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
};

class ParameterSet {
 public:
  // A parameter with its own storage; grad zero-filled.
  Parameter& add(const std::string& name, const Shape& shape, DType dtype, Init init);
  // A parameter whose value and grad are views into buffers owned by a layer (must be contiguous).
  Parameter& add_view(const std::string& name, const Tensor& value, const Tensor& grad, Init init);
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

 private:
  Parameter& insert(Parameter p);
  std::vector<std::unique_ptr<Parameter>> params_;
  uint64_t version_ = 0;
};

}  // namespace fp8train::model
