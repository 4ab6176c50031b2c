// CpuKernels: the built-in Kernels of the CPU backend, forwarding to the functions of ops/cpu/*.cpp, and the
// CPU thread settings (OpenMP threads; OpenBLAS pinned to one thread so that our row splits do the threading).
#include "ops/cpu/cpu_kernels.h"

#include <omp.h>

#include "common/error.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace fp8train::ops {

namespace cpu {

void throw_unsupported_dtype(DType dtype, const char* op) {
  FP8T_FAIL("CPU op {} supports f32 and f64 tensors, got {}", op, dtype_name(dtype));
}

namespace {
class CpuKernels final : public Kernels {
 public:
  CpuKernels() { openblas_set_num_threads(1); }
  std::string name() const override { return "cpu"; }
  void gemm(const GemmProblem& p, const void* a, const void* b, void* c) override { cpu::gemm(p, a, b, c); }
  void axpby(const AxpbyProblem& p, const void* a, const void* b, void* out) override { cpu::axpby(p, a, b, out); }
  void fill(const AxpbyProblem& p, double value, void* out) override { cpu::fill(p, value, out); }
  void embedding_forward(const EmbeddingProblem& p, const int32_t* ids, const void* table, void* out) override {
    cpu::embedding_forward(p, ids, table, out);
  }
  void embedding_backward(const EmbeddingProblem& p, const int32_t* ids, const void* dout, void* dtable) override {
    cpu::embedding_backward(p, ids, dout, dtable);
  }
  void rmsnorm_forward(const RmsNormProblem& p, const void* x, const void* w, void* y, void* rstd) override {
    cpu::rmsnorm_forward(p, x, w, y, rstd);
  }
  void rmsnorm_backward(const RmsNormProblem& p, const void* x, const void* w, const void* rstd, const void* dy,
                        void* dx, void* dw) override {
    cpu::rmsnorm_backward(p, x, w, rstd, dy, dx, dw);
  }
  void rope(const RopeProblem& p, void* x) override { cpu::rope(p, x); }
  void attention_forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* o,
                         void* lse) override {
    cpu::attention_forward(p, q, k, v, o, lse);
  }
  void attention_backward(const AttentionProblem& p, const void* q, const void* k, const void* v, const void* o,
                          const void* lse, const void* dout, void* dq, void* dk, void* dv) override {
    cpu::attention_backward(p, q, k, v, o, lse, dout, dq, dk, dv);
  }
  void swiglu_forward(const SwigluProblem& p, const void* in, void* out) override { cpu::swiglu_forward(p, in, out); }
  void swiglu_backward(const SwigluProblem& p, const void* in, const void* dout, void* din) override {
    cpu::swiglu_backward(p, in, dout, din);
  }
  void router_forward(const RouterProblem& p, const void* logits, const float* bias, void* scores, int32_t* selected,
                      void* gates, int32_t* expert_counts) override {
    cpu::router_forward(p, logits, bias, scores, selected, gates, expert_counts);
  }
  void router_backward(const RouterProblem& p, const void* scores, const int32_t* selected, const void* dgates,
                       const void* dscores_extra, void* dlogits) override {
    cpu::router_backward(p, scores, selected, dgates, dscores_extra, dlogits);
  }
  double balance_loss_forward(const BalanceLossProblem& p, const void* scores, const int32_t* selected) override {
    return cpu::balance_loss_forward(p, scores, selected);
  }
  void balance_loss_backward(const BalanceLossProblem& p, const void* scores, const int32_t* selected, double dloss,
                             void* dscores) override {
    cpu::balance_loss_backward(p, scores, selected, dloss, dscores);
  }
  void moe_build_plan(const MoePlanProblem& p, const int32_t* selected, int32_t* expert_offsets, int32_t* slot_token,
                      int32_t* choice_slot) override {
    cpu::moe_build_plan(p, selected, expert_offsets, slot_token, choice_slot);
  }
  void moe_permute(const MoePermuteProblem& p, const void* x, const int32_t* slot_token, void* xp) override {
    cpu::moe_permute(p, x, slot_token, xp);
  }
  void moe_permute_backward(const MoePermuteProblem& p, const void* dxp, const int32_t* choice_slot,
                            void* dx) override {
    cpu::moe_permute_backward(p, dxp, choice_slot, dx);
  }
  void moe_unpermute(const MoePermuteProblem& p, const void* yp, const int32_t* choice_slot, const void* gates,
                     void* y) override {
    cpu::moe_unpermute(p, yp, choice_slot, gates, y);
  }
  void moe_unpermute_backward(const MoePermuteProblem& p, const void* dy, const void* yp, const int32_t* choice_slot,
                              const void* gates, void* dyp, void* dgates) override {
    cpu::moe_unpermute_backward(p, dy, yp, choice_slot, gates, dyp, dgates);
  }
  void cross_entropy(const CrossEntropyProblem& p, void* logits, const int32_t* targets, double* row_loss) override {
    cpu::cross_entropy(p, logits, targets, row_loss);
  }
};
}  // namespace

Kernels& cpu_kernels() {
  static CpuKernels kernels;
  return kernels;
}

}  // namespace cpu

void set_cpu_threads(int threads) {
  FP8T_CHECK(threads >= 1, "set_cpu_threads: {} threads", threads);
  cpu::cpu_kernels();  // make sure OpenBLAS has been pinned to one thread
  omp_set_num_threads(threads);
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace fp8train::ops
