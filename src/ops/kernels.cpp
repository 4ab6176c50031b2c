// Default (unimplemented) launchers and the per-device Kernels registry (see kernels.h).
#include "ops/kernels.h"

#include <array>
#include <mutex>

#include "common/error.h"
#include "ops/cpu/cpu_kernels.h"

namespace fp8train::ops {

void Kernels::unimplemented(const char* op) const {
  FP8T_FAIL("op {} is not implemented by the {} kernels", op, name());
}

void Kernels::gemm(const GemmProblem&, const void*, const void*, void*) { unimplemented("gemm"); }
void Kernels::axpby(const AxpbyProblem&, const void*, const void*, void*) { unimplemented("axpby"); }
void Kernels::fill(const AxpbyProblem&, double, void*) { unimplemented("fill"); }
void Kernels::embedding_forward(const EmbeddingProblem&, const int32_t*, const void*, void*) {
  unimplemented("embedding_forward");
}
void Kernels::embedding_backward(const EmbeddingProblem&, const int32_t*, const void*, void*) {
  unimplemented("embedding_backward");
}
void Kernels::rmsnorm_forward(const RmsNormProblem&, const void*, const void*, void*, void*) {
  unimplemented("rmsnorm_forward");
}
void Kernels::rmsnorm_backward(const RmsNormProblem&, const void*, const void*, const void*, const void*, void*,
                               void*) {
  unimplemented("rmsnorm_backward");
}
void Kernels::rope(const RopeProblem&, void*) { unimplemented("rope"); }
void Kernels::attention_forward(const AttentionProblem&, const void*, const void*, const void*, void*, void*) {
  unimplemented("attention_forward");
}
void Kernels::attention_backward(const AttentionProblem&, const void*, const void*, const void*, const void*,
                                 const void*, const void*, void*, void*, void*) {
  unimplemented("attention_backward");
}
void Kernels::swiglu_forward(const SwigluProblem&, const void*, void*) { unimplemented("swiglu_forward"); }
void Kernels::swiglu_backward(const SwigluProblem&, const void*, const void*, void*) {
  unimplemented("swiglu_backward");
}
void Kernels::router_forward(const RouterProblem&, const void*, const float*, void*, int32_t*, void*, int32_t*) {
  unimplemented("router_forward");
}
void Kernels::router_backward(const RouterProblem&, const void*, const int32_t*, const void*, const void*, void*) {
  unimplemented("router_backward");
}
double Kernels::balance_loss_forward(const BalanceLossProblem&, const void*, const int32_t*) {
  unimplemented("balance_loss_forward");
}
void Kernels::balance_loss_backward(const BalanceLossProblem&, const void*, const int32_t*, double, void*) {
  unimplemented("balance_loss_backward");
}
void Kernels::moe_build_plan(const MoePlanProblem&, const int32_t*, int32_t*, int32_t*, int32_t*) {
  unimplemented("moe_build_plan");
}
void Kernels::moe_permute(const MoePermuteProblem&, const void*, const int32_t*, void*) {
  unimplemented("moe_permute");
}
void Kernels::moe_permute_backward(const MoePermuteProblem&, const void*, const int32_t*, void*) {
  unimplemented("moe_permute_backward");
}
void Kernels::moe_unpermute(const MoePermuteProblem&, const void*, const int32_t*, const void*, void*) {
  unimplemented("moe_unpermute");
}
void Kernels::moe_unpermute_backward(const MoePermuteProblem&, const void*, const void*, const int32_t*,
                                     const void*, void*, void*) {
  unimplemented("moe_unpermute_backward");
}
void Kernels::cross_entropy(const CrossEntropyProblem&, void*, const int32_t*, double*) {
  unimplemented("cross_entropy");
}

namespace {
struct KernelRegistry {
  std::mutex mutex;
  std::unique_ptr<Kernels> cuda;
};
KernelRegistry& kernel_registry() {
  static KernelRegistry r;
  return r;
}
}  // namespace

Kernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu::cpu_kernels();
  KernelRegistry& r = kernel_registry();
  std::lock_guard lock(r.mutex);
  FP8T_CHECK(r.cuda != nullptr, "no kernels registered for {} (initialize the CUDA backend at start-up)",
             device.str());
  return *r.cuda;
}

void register_kernels(DeviceType type, std::unique_ptr<Kernels> kernels) {
  FP8T_CHECK(type != DeviceType::CPU, "the CPU kernels are built in and cannot be replaced");
  FP8T_CHECK(kernels != nullptr, "register_kernels: null kernels");
  KernelRegistry& r = kernel_registry();
  std::lock_guard lock(r.mutex);
  r.cuda = std::move(kernels);
}

}  // namespace fp8train::ops
