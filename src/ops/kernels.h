// The op interface every backend implements: problem descriptors (shapes, strides, dtype, options) and
// `Kernels`, the per-device table of launchers on raw pointers (the middle of DESIGN.md's three tiers).
//   tier 1 kernel    — ops/cpu/*.cpp (OpenMP loops, OpenBLAS) and, later, ops/cuda/*.cu
//   tier 2 launcher  — a Kernels virtual below: raw device pointers + a problem descriptor, no checks
//   tier 3 entry     — ops/<op>.h functions on Tensors: check dtype, shape, strides and device, then call
//                      kernels_for(device).<op>(...)
// A backend that lacks an op inherits the default, which throws "op X is not implemented on device Y", so a
// CUDA backend can be filled in one op at a time (register_kernels at start-up, next to register_backend).
// Layout conventions: row-major; "ld" = row stride in elements (>= columns); float data is F32 or F64 (the
// `dtype` field; F64 exists for gradient checks); ids, expert indices and offsets are int32.
// Determinism: every CPU reduction has a fixed order that does not depend on the thread count.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace fp8train::ops {

// C[m,n] = alpha·op(A)·op(B) + beta·C. op(A) is [m,k] (A stored [m,k], or [k,m] when trans_a); op(B) is [k,n]
// (B stored [k,n], or [n,k] when trans_b). round_inputs_bf16 rounds every A and B element to BF16 (nearest even)
// before multiplying — the exact BF16-input product with FP32 accumulation (F32 only).
struct GemmProblem {
  DType dtype = DType::F32;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  double alpha = 1.0, beta = 0.0;
  bool round_inputs_bf16 = false;
};

// out[r,c] = alpha·a[r,c] + beta·b[r,c] over a rows×cols matrix (b may be null: out = alpha·a); out may alias a or b.
struct AxpbyProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t ld_a = 0, ld_b = 0, ld_out = 0;
  double alpha = 1.0, beta = 0.0;
};

// out[t,:] = table[ids[t],:]; backward: dtable[ids[t],:] += dout[t,:].
struct EmbeddingProblem {
  DType dtype = DType::F32;
  int64_t tokens = 0, vocab = 0, dim = 0;
  int64_t ld_out = 0;  // row stride of out / dout
};

// RMSNorm over the last dimension: y = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps) (one per row).
struct RmsNormProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, dim = 0;
  int64_t ld_x = 0, ld_y = 0, ld_dx = 0, ld_dy = 0;
  double eps = 1e-6;
  bool accumulate_dx = false;  // backward: dx += ... instead of dx = ...
};

// Rotary position embedding on interleaved pairs (x[2i], x[2i+1]) of the last `rope_dim` elements of each head:
// angle = pos·θ_i with θ_i = theta^(−2i/rope_dim), pos = row % seq_len (rows are [batch, seq] flattened).
// In place; `inverse` rotates by −angle, which is the backward (the rotation is orthogonal).
struct RopeProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, heads = 0, rope_dim = 0;
  int64_t ld = 0, head_stride = 0;
  int64_t seq_len = 0;
  double theta = 10000.0;
  bool inverse = false;
};

// Where head h of row r starts: base + r·row_stride + h·head_stride (elements within a head are contiguous).
struct HeadsLayout {
  int64_t row_stride = 0, head_stride = 0;
};

// Causal softmax attention per (sequence, head): o = softmax(scale·q·kᵀ + causal mask)·v, and the row
// log-sum-exp lse[b,h,t] (contiguous [batch, heads, seq]) that the backward uses to recompute the
// probabilities block by block (flash-style: no seq×seq tensor is kept between forward and backward).
struct AttentionProblem {
  DType dtype = DType::F32;
  int64_t batch = 0, seq = 0, heads = 0, qk_dim = 0, v_dim = 0;
  double scale = 1.0;
  HeadsLayout q, k, v, o;         // forward tensors
  HeadsLayout dout, dq, dk, dv;   // backward tensors (dq, dk, dv are overwritten)
};

// SwiGLU on a fused [rows, 2F] input (gate = columns [0,F), up = [F,2F)): out = silu(gate) ∘ up.
struct SwigluProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, ffn_dim = 0;
  int64_t ld_in = 0, ld_out = 0;  // also the row strides of din and dout
};

// DeepSeekMoE sigmoid router (see ops/router.h for the formulas): scores s = sigmoid(logits); selection by
// top-k of s + bias, group-limited when n_group > 1; gates = s_sel / Σ s_sel × routed_scaling_factor.
struct RouterProblem {
  DType dtype = DType::F32;  // logits, scores, gates; the bias is always F32 (non-trainable state)
  int64_t tokens = 0, n_experts = 0, top_k = 0;
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
};

// Sequence-wise balance loss α·Σ_i f_i·P_i per sequence, averaged over sequences (ops/router.h).
struct BalanceLossProblem {
  DType dtype = DType::F32;
  int64_t batch = 0, seq = 0, n_experts = 0, top_k = 0;
  double alpha = 0.0;
};

// Token ↔ expert-slot bookkeeping: the N·K (token, choice) pairs sorted by expert, then by token.
struct MoePlanProblem {
  int64_t tokens = 0, top_k = 0, n_experts = 0;
};
struct MoePermuteProblem {
  DType dtype = DType::F32;
  int64_t tokens = 0, top_k = 0, dim = 0;
  int64_t ld_x = 0, ld_xp = 0;  // row strides of the token-ordered and the expert-ordered matrices
  bool accumulate = false;      // token-ordered output: += instead of =
};

// Cross-entropy fused with the softmax of the head: per row, loss = logsumexp(logits) − logits[target];
// with compute_grad the logits are overwritten by grad_scale·(softmax − onehot(target)). target −1 = ignored
// row (zero loss, zero gradient).
struct CrossEntropyProblem {
  DType dtype = DType::F32;
  int64_t rows = 0, vocab = 0, ld = 0;
  double grad_scale = 1.0;
  bool compute_grad = false;
};

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual std::string name() const = 0;

  virtual void gemm(const GemmProblem& p, const void* a, const void* b, void* c);
  virtual void axpby(const AxpbyProblem& p, const void* a, const void* b, void* out);
  virtual void fill(const AxpbyProblem& p, double value, void* out);  // uses rows, cols, ld_out
  virtual void embedding_forward(const EmbeddingProblem& p, const int32_t* ids, const void* table, void* out);
  virtual void embedding_backward(const EmbeddingProblem& p, const int32_t* ids, const void* dout, void* dtable);
  virtual void rmsnorm_forward(const RmsNormProblem& p, const void* x, const void* w, void* y, void* rstd);
  virtual void rmsnorm_backward(const RmsNormProblem& p, const void* x, const void* w, const void* rstd,
                                const void* dy, void* dx, void* dw);
  virtual void rope(const RopeProblem& p, void* x);
  virtual void attention_forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* o,
                                 void* lse);
  virtual void attention_backward(const AttentionProblem& p, const void* q, const void* k, const void* v,
                                  const void* o, const void* lse, const void* dout, void* dq, void* dk, void* dv);
  virtual void swiglu_forward(const SwigluProblem& p, const void* in, void* out);
  virtual void swiglu_backward(const SwigluProblem& p, const void* in, const void* dout, void* din);
  virtual void router_forward(const RouterProblem& p, const void* logits, const float* bias, void* scores,
                              int32_t* selected, void* gates, int32_t* expert_counts);
  virtual void router_backward(const RouterProblem& p, const void* scores, const int32_t* selected,
                               const void* dgates, const void* dscores_extra, void* dlogits);
  virtual double balance_loss_forward(const BalanceLossProblem& p, const void* scores, const int32_t* selected);
  virtual void balance_loss_backward(const BalanceLossProblem& p, const void* scores, const int32_t* selected,
                                     double dloss, void* dscores);
  virtual void moe_build_plan(const MoePlanProblem& p, const int32_t* selected, int32_t* expert_offsets,
                              int32_t* slot_token, int32_t* choice_slot);
  virtual void moe_permute(const MoePermuteProblem& p, const void* x, const int32_t* slot_token, void* xp);
  virtual void moe_permute_backward(const MoePermuteProblem& p, const void* dxp, const int32_t* choice_slot,
                                    void* dx);
  virtual void moe_unpermute(const MoePermuteProblem& p, const void* yp, const int32_t* choice_slot,
                             const void* gates, void* y);
  virtual void moe_unpermute_backward(const MoePermuteProblem& p, const void* dy, const void* yp,
                                      const int32_t* choice_slot, const void* gates, void* dyp, void* dgates);
  virtual void cross_entropy(const CrossEntropyProblem& p, void* logits, const int32_t* targets, double* row_loss);

 protected:
  [[noreturn]] void unimplemented(const char* op) const;
};

// The kernels for a device type (the CPU ones are built in).
Kernels& kernels_for(Device device);
void register_kernels(DeviceType type, std::unique_ptr<Kernels> kernels);

// CPU threading: OpenMP threads used by the CPU kernels (OpenBLAS itself is kept single-threaded and every
// GEMM is split across the OpenMP threads, which keeps the result independent of scheduling).
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace fp8train::ops
