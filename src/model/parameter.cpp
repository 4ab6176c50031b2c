// ParameterSet (see parameter.h).
#include "model/parameter.h"

#include <exception>
#include <map>
#include <random>
#include <set>

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
  FP8T_CHECK(!p.trainable || !finalized(), "parameter '{}' added after the parameters moved into their arenas", p.name);
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

Parameter& ParameterSet::add_view(const std::string& name, const Tensor& value, const Tensor& grad, Init init,
                                  bool local_experts) {
  FP8T_CHECK(value.is_contiguous() && grad.is_contiguous() && value.shape() == grad.shape(),
             "parameter '{}': value {} and grad {} must be contiguous views of one shape", name, value.str(),
             grad.str());
  Parameter p;
  p.name = name;
  p.value = value;
  p.grad = grad;
  p.weight_decay = value.dim() >= 2;
  p.init = init;
  p.local_experts = local_experts;
  FP8T_CHECK(!local_experts || p.weight_decay, "parameter '{}': a local expert's matrix must be at least 2-D", name);
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
  if (finalized()) {
    grads_.flat().zero_();
    return;
  }
  for (auto& p : params_)
    if (p->trainable) p->grad.zero_();
}

void ParameterSet::initialize(uint64_t seed, double std) {
  mark_updated();
  std::vector<Parameter*> todo;
  for (auto& p : params_)
    if (p->trainable) todo.push_back(p.get());
  for (Parameter* p : todo)
    FP8T_CHECK(p->value.dtype() == DType::F32 || p->value.dtype() == DType::F64, "parameter '{}' has dtype {}",
               p->name, dtype_name(p->value.dtype()));
  // Each parameter draws from its own stream (seeded by its name), so they are generated in parallel — a
  // benchmark-sized model has billions of values — and copied to the device one at a time.
  std::exception_ptr failure;  // an exception may not leave an OpenMP region: the first is rethrown after it
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < todo.size(); ++i) try {
    Parameter* p = todo[i];
    const int64_t n = p->value.numel();
    std::vector<double> v(static_cast<size_t>(n), p->init == Init::Ones ? 1.0 : 0.0);
    if (p->init == Init::Normal) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ fnv1a(p->name));
      std::normal_distribution<double> normal(0.0, std);
      for (double& x : v) x = normal(rng);
    }
    const std::vector<float> f = p->value.dtype() == DType::F64 ? std::vector<float>{}
                                                                 : std::vector<float>(v.begin(), v.end());
#pragma omp critical(fp8train_parameter_init_copy)
    {
      if (p->value.dtype() == DType::F64) {
        p->value.copy_from(Tensor::from_vector(v, p->value.shape(), MemCategory::Workspace, Device::cpu()));
      } else {
        p->value.copy_from(Tensor::from_vector(f, p->value.shape(), MemCategory::Workspace, Device::cpu()));
      }
    }
  } catch (...) {
#pragma omp critical(fp8train_parameter_init_failure)
    if (!failure) failure = std::current_exception();
  }
  if (failure) std::rethrow_exception(failure);
}

namespace {
// Element offset of a view from the start of its Storage.
int64_t offset_in_storage(const Tensor& t) {
  return static_cast<int64_t>(static_cast<const char*>(t.raw()) - static_cast<const char*>(t.storage().data())) /
         static_cast<int64_t>(dtype_size(t.dtype()));
}
}  // namespace

void ParameterSet::finalize() {
  if (finalized()) return;
  const std::vector<Parameter*> params = trainable();
  FP8T_CHECK(!params.empty(), "finalize: the model has no trainable parameters");
  const DType dtype = params.front()->value.dtype();
  const Device device = params.front()->value.device();
  // One region per value Storage, in the order of its first parameter; its gradient Storage alongside.
  struct Region {
    std::shared_ptr<Storage> value, grad;
    int index = 0;
    bool weight_decay = true;
    bool local_experts = false;
  };
  std::vector<Region> regions;
  std::map<const Storage*, size_t> region_of;
  std::set<const Storage*> grad_storages;
  auto layout = std::make_shared<ArenaLayout>();
  for (Parameter* p : params) {
    FP8T_CHECK(p->value.dtype() == dtype && p->value.device() == device,
               "finalize: parameter '{}' is {} on {}, the others {} on {} (one arena per dtype and device)", p->name,
               dtype_name(p->value.dtype()), p->value.device().str(), dtype_name(dtype), device.str());
    FP8T_CHECK(p->grad.defined() && p->grad.dtype() == dtype && p->grad.device() == device &&
                   p->value.is_contiguous() && p->grad.is_contiguous() && p->grad.shape() == p->value.shape(),
               "finalize: parameter '{}' needs a contiguous gradient of its value's shape, dtype and device", p->name);
    const Storage* key = &p->value.storage();
    auto [it, fresh] = region_of.emplace(key, regions.size());
    if (fresh) {
      FP8T_CHECK(!grad_storages.count(key), "finalize: the value of '{}' lives in another parameter's gradient buffer",
                 p->name);
      Region r;
      r.value = p->value.storage_ptr();
      r.grad = p->grad.storage_ptr();
      r.weight_decay = p->weight_decay;
      r.local_experts = p->local_experts;
      FP8T_CHECK(r.value->bytes() % dtype_size(dtype) == 0 && r.grad->bytes() == r.value->bytes(),
                 "finalize: the gradient buffer of '{}' ({} bytes) does not mirror its value buffer ({} bytes)",
                 p->name, r.grad->bytes(), r.value->bytes());
      FP8T_CHECK(r.value != r.grad && grad_storages.insert(r.grad.get()).second && !region_of.count(r.grad.get()),
                 "finalize: the gradient buffer of '{}' is shared with another parameter buffer", p->name);
      const int group = p->local_experts ? kExpertGroup : p->weight_decay ? kDecayGroup : kNoDecayGroup;
      r.index = layout->add_region(static_cast<int64_t>(r.value->bytes() / dtype_size(dtype)), group);
      regions.push_back(r);
    }
    const Region& r = regions[it->second];
    FP8T_CHECK(p->weight_decay == r.weight_decay,
               "finalize: parameter '{}' shares a buffer with parameters of the other weight-decay kind", p->name);
    FP8T_CHECK(p->local_experts == r.local_experts,
               "finalize: parameter '{}' shares a buffer with parameters that are not local experts (or are)", p->name);
    FP8T_CHECK(p->grad.storage_ptr() == r.grad && offset_in_storage(p->grad) == offset_in_storage(p->value),
               "finalize: the gradient of '{}' does not sit beside its value in a mirrored buffer", p->name);
    layout->add_view(p->name, p->value.shape(), r.index, offset_in_storage(p->value));
  }
  layout->finish();  // also refuses overlapping parameters
  // Every element of a moved buffer must belong to a parameter: the optimizer updates whole regions.
  std::vector<int64_t> covered(regions.size(), 0);
  for (const ArenaLayout::View& v : layout->views()) covered[static_cast<size_t>(v.region)] += v.numel;
  for (const Region& r : regions) {
    const int64_t elements = layout->regions()[static_cast<size_t>(r.index)].elements;
    FP8T_CHECK(covered[static_cast<size_t>(r.index)] == elements,
               "finalize: a parameter buffer of {} elements holds only {} elements of named parameters", elements,
               covered[static_cast<size_t>(r.index)]);
  }
  Arena values(layout, dtype, MemCategory::Weights, device);
  Arena grads(layout, dtype, MemCategory::Gradients, device);
  for (const Region& r : regions) {
    values.adopt(r.index, r.value);
    grads.adopt(r.index, r.grad);
  }
  values_ = std::move(values);
  grads_ = std::move(grads);
}

ArenaRange ParameterSet::decay_range() const {
  const ArenaLayout& l = value_arena().layout();
  const ArenaRange experts = l.group_range(kExpertGroup), decay = l.group_range(kDecayGroup);
  if (experts.empty()) return decay;
  return {experts.begin, decay.empty() ? experts.end : decay.end};  // the groups are placed back to back
}

const Arena& ParameterSet::value_arena() const {
  FP8T_CHECK(finalized(), "the parameters are not in arenas yet (call ParameterSet::finalize)");
  return values_;
}

const Arena& ParameterSet::grad_arena() const {
  FP8T_CHECK(finalized(), "the parameters are not in arenas yet (call ParameterSet::finalize)");
  return grads_;
}

}  // namespace fp8train::model
