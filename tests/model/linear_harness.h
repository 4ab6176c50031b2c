// A Linear under a recipe for the Linear tests (header only): its own parameters, activation store and health
// recorder, and conversions between F32 host vectors and tensors of the compute dtype.
#pragma once
#include <string>
#include <vector>

#include "model/activation_store.h"
#include "model/linear.h"
#include "ops/elementwise.h"
#include "recipe/health.h"
#include "recipe/recipe.h"

namespace fp8train::model::testing {

// A Linear under a recipe, with its own parameters, store and health recorder.
struct Harness {
  recipe::RecipeConfig recipe;
  ParameterSet params;
  ActivationStore store;
  recipe::HealthRecorder health;
  Linear lin;
  Harness(const std::string& spec, int64_t in, int64_t out, recipe::LinearRole role = recipe::LinearRole::DenseUp)
      : recipe(recipe::parse_recipe(spec)), store(recipe), lin(params, "test.linear", in, out, role, DType::F32, 0) {}
  void set_weight(const std::vector<float>& w) {
    Tensor weight = lin.weight();
    weight.copy_from(Tensor::from_vector(w, weight.shape()));
    params.mark_updated();
  }
  void zero_grad() {
    Tensor g = lin.grad();
    g.zero_();
  }
  StepContext ctx(DType dtype = DType::F32, int64_t step = 0, bool sample = false) {
    StepContext c;
    c.exec = ExecCtx::cpu();
    c.batch = 1;
    c.training = true;
    c.recipe = &recipe;
    c.store = &store;
    c.health = sample ? &health : nullptr;
    c.step = step;
    c.dtype = dtype;
    return c;
  }
};

inline Tensor as(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype = DType::F32) {
  const Tensor f = Tensor::from_vector(v, {rows, cols});
  if (dtype == DType::F32) return f;
  const Tensor t = Tensor::empty({rows, cols}, dtype);
  ops::copy(ExecCtx::cpu(), f, t);
  return t;
}

inline std::vector<float> values(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_vector<float>();
  const Tensor f = Tensor::empty(t.shape(), DType::F32);
  ops::copy(ExecCtx::cpu(), t, f);
  return f.to_vector<float>();
}

}  // namespace fp8train::model::testing
