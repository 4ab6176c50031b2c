// CPU implementations of the ops (tier 1), one file per op stem in ops/cpu/, each a template over the float
// type (float, double) behind a non-template function that switches on problem.dtype. CpuKernels forwards the
// Kernels interface (ops/kernels.h) to them. Parallel loops use OpenMP with static partitions; reductions run in
// a fixed order (chunked partial sums added in chunk order), and GEMMs are split into shape-determined chunks
// (never along K), so results do not depend on the thread count (tests/model checks 1 vs 2 threads bit for bit).
#pragma once
#include "ops/kernels.h"

namespace fp8train::ops::cpu {

Kernels& cpu_kernels();

void gemm(const GemmProblem& p, const void* a, const void* b, void* c);
void axpby(const AxpbyProblem& p, const void* a, const void* b, void* out);
void fill(const AxpbyProblem& p, double value, void* out);
void embedding_forward(const EmbeddingProblem& p, const int32_t* ids, const void* table, void* out);
void embedding_backward(const EmbeddingProblem& p, const int32_t* ids, const void* dout, void* dtable);
void rmsnorm_forward(const RmsNormProblem& p, const void* x, const void* w, void* y, void* rstd);
void rmsnorm_backward(const RmsNormProblem& p, const void* x, const void* w, const void* rstd, const void* dy,
                      void* dx, void* dw);
void rope(const RopeProblem& p, void* x);
void attention_forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* o, void* lse);
void attention_backward(const AttentionProblem& p, const void* q, const void* k, const void* v, const void* o,
                        const void* lse, const void* dout, void* dq, void* dk, void* dv);
void swiglu_forward(const SwigluProblem& p, const void* in, void* out);
void swiglu_backward(const SwigluProblem& p, const void* in, const void* dout, void* din);
void router_forward(const RouterProblem& p, const void* logits, const float* bias, void* scores, int32_t* selected,
                    void* gates, int32_t* expert_counts);
void router_backward(const RouterProblem& p, const void* scores, const int32_t* selected, const void* dgates,
                     const void* dscores_extra, void* dlogits);
double balance_loss_forward(const BalanceLossProblem& p, const void* scores, const int32_t* selected);
void balance_loss_backward(const BalanceLossProblem& p, const void* scores, const int32_t* selected, double dloss,
                           void* dscores);
void moe_build_plan(const MoePlanProblem& p, const int32_t* selected, int32_t* expert_offsets, int32_t* slot_token,
                    int32_t* choice_slot);
void moe_permute(const MoePermuteProblem& p, const void* x, const int32_t* slot_token, void* xp);
void moe_permute_backward(const MoePermuteProblem& p, const void* dxp, const int32_t* choice_slot, void* dx);
void moe_unpermute(const MoePermuteProblem& p, const void* yp, const int32_t* choice_slot, const void* gates,
                   void* y);
void moe_unpermute_backward(const MoePermuteProblem& p, const void* dy, const void* yp, const int32_t* choice_slot,
                            const void* gates, void* dyp, void* dgates);
void cross_entropy(const CrossEntropyProblem& p, void* logits, const int32_t* targets, double* row_loss);

[[noreturn]] void throw_unsupported_dtype(DType dtype, const char* op);

// Calls f(T{}) with T = float or double according to dtype; other dtypes throw.
template <class F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  if (dtype == DType::F32) {
    f(float{});
  } else if (dtype == DType::F64) {
    f(double{});
  } else {
    throw_unsupported_dtype(dtype, op);
  }
}

}  // namespace fp8train::ops::cpu
