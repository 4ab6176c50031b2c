// ParameterSet (see parameter.h).
#include "model/parameter.h"

#include <random>

#include "common/error.h"

namespace fp8train::model {

namespace {
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace

Parameter& ParameterSet::insert(Parameter p) {
  FP8T_CHECK(find(p.name) == nullptr, "parameter '{}' registered twice", p.name);
  params_.push_back(std::make_unique<Parameter>(std::move(p)));
  return *params_.back();
}

Parameter& ParameterSet::add(const std::string& name, const Shape& shape, DType dtype, Init init) {
  Parameter p;
  p.name = name;
  p.value = Tensor::zeros(shape, dtype, MemCategory::Weights);
  p.grad = Tensor::zeros(shape, dtype, MemCategory::Gradients);
  p.weight_decay = shape.size() >= 2;
  p.init = init;
  return insert(std::move(p));
}

Parameter& ParameterSet::add_view(const std::string& name, const Tensor& value, const Tensor& grad, Init init) {
  FP8T_CHECK(value.is_contiguous() && grad.is_contiguous() && value.shape() == grad.shape(),
             "parameter '{}': value {} and grad {} must be contiguous views of one shape", name, value.str(),
             grad.str());
  Parameter p;
  p.name = name;
  p.value = value;
  p.grad = grad;
  p.weight_decay = value.dim() >= 2;
  p.init = init;
  return insert(std::move(p));
}

Parameter& ParameterSet::add_buffer(const std::string& name, const Tensor& value) {
  Parameter p;
  p.name = name;
  p.value = value;
  p.trainable = false;
  p.weight_decay = false;
  p.init = Init::Zeros;
  return insert(std::move(p));
}

Parameter& ParameterSet::get(const std::string& name) {
  for (auto& p : params_)
    if (p->name == name) return *p;
  FP8T_FAIL("no parameter named '{}'", name);
}

const Parameter* ParameterSet::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

std::vector<Parameter*> ParameterSet::trainable() const {
  std::vector<Parameter*> out;
  for (const auto& p : params_)
    if (p->trainable) out.push_back(p.get());
  return out;
}

std::vector<Parameter*> ParameterSet::buffers() const {
  std::vector<Parameter*> out;
  for (const auto& p : params_)
    if (!p->trainable) out.push_back(p.get());
  return out;
}

int64_t ParameterSet::trainable_count() const {
  int64_t n = 0;
  for (const auto& p : params_)
    if (p->trainable) n += p->value.numel();
  return n;
}

void ParameterSet::zero_grad() {
  for (auto& p : params_)
    if (p->trainable) p->grad.zero_();
}

void ParameterSet::initialize(uint64_t seed, double std) {
  mark_updated();
  for (auto& p : params_) {
    if (!p->trainable) continue;
    const int64_t n = p->value.numel();
    std::vector<double> v(static_cast<size_t>(n), p->init == Init::Ones ? 1.0 : 0.0);
    if (p->init == Init::Normal) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ fnv1a(p->name));
      std::normal_distribution<double> normal(0.0, std);
      for (double& x : v) x = normal(rng);
    }
    if (p->value.dtype() == DType::F64) {
      p->value.copy_from(Tensor::from_vector(v, p->value.shape(), MemCategory::Workspace, p->value.device()));
    } else {
      FP8T_CHECK(p->value.dtype() == DType::F32, "parameter '{}' has dtype {}", p->name,
                 dtype_name(p->value.dtype()));
      std::vector<float> f(v.begin(), v.end());
      p->value.copy_from(Tensor::from_vector(f, p->value.shape(), MemCategory::Workspace, p->value.device()));
    }
  }
}

}  // namespace fp8train::model
