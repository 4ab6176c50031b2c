// Parameter arenas for the optimizer tests (header only): named parameters with given values and gradients, each in
// its own region, with weight decay or without (the no-decay ones land after the decay ones in the arena, while
// the views keep the order given).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "optim/param.h"

namespace fp8train::optim::testing {

struct TestParam {
  std::string name;
  std::vector<float> value, grad;
  bool decay = true;
};

inline ParamArenas make_arenas(const std::vector<TestParam>& params) {
  auto layout = std::make_shared<ArenaLayout>();
  for (const TestParam& p : params) {
    const int r = layout->add_region(static_cast<int64_t>(p.value.size()), p.decay ? 0 : 1);
    layout->add_view(p.name, {static_cast<int64_t>(p.value.size())}, r, 0);
  }
  layout->finish();
  ParamArenas a;
  a.values = Arena(layout, DType::F32, MemCategory::Weights);
  a.grads = Arena(layout, DType::F32, MemCategory::Gradients);
  a.decay = layout->group_range(0);
  a.no_decay = layout->group_range(1);
  for (size_t i = 0; i < params.size(); ++i) {
    a.values.view(i).copy_from(Tensor::from_vector(params[i].value, {static_cast<int64_t>(params[i].value.size())}));
    a.grads.view(i).copy_from(Tensor::from_vector(params[i].grad, {static_cast<int64_t>(params[i].grad.size())}));
  }
  a.validate();
  return a;
}

inline std::vector<float> values_of(const ParamArenas& a, const std::string& name) {
  return a.values.view(name).to_vector<float>();
}

inline void set_grad(const ParamArenas& a, const std::string& name, const std::vector<float>& g) {
  a.grads.view(name).copy_from(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
}

}  // namespace fp8train::optim::testing
