// ParamBuffer: the optimizer's view of one named trainable parameter — its FP32 master values and FP32
// gradient, both contiguous with `size` elements (the model owns the memory; any shape, flattened).
// Names are the model's stable parameter names (e.g. "layers.3.attn.wq_a.weight"); the optimizer keys its
// state by them so a checkpoint can be matched back to the parameters.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace fp8train::optim {

struct ParamBuffer {
  std::string name;
  float* value = nullptr;  // FP32 master weights: [size]
  float* grad = nullptr;   // FP32 gradient:       [size]
  size_t size = 0;
  bool weight_decay = true;  // false for norms' gains and other 1-D parameters
};

using ParamList = std::vector<ParamBuffer>;

}  // namespace fp8train::optim
