// Multi-head Latent Attention (DeepSeek-V3 report §2.1.1), for one block, with explicit backward.
// Input h: [tokens, d] (the attention RMSNorm's output). Per token, with n_h heads:
//   c_Q  = RMSNorm(W_DQ·h)                      wq_a: [q_lora_rank, d],  q_norm
//   q^C  = W_UQ·c_Q,  q^R = RoPE(W_QR·c_Q)      wq_b: [n_h·(d_nope + d_rope), q_lora_rank] = per head [W_UQ_i; W_QR_i]
//   c_KV = RMSNorm(W_DKV·h),  k^R = RoPE(W_KR·h) wkv_a: [kv_lora_rank + d_rope, d] = [W_DKV; W_KR], kv_norm on c_KV
//   k^C  = W_UK·c_KV, v = W_UV·c_KV             wkv_b: [n_h·(d_nope + d_v), kv_lora_rank] = per head [W_UK_i; W_UV_i]
//   q_i = [q^C_i; q^R_i],  k_i = [k^C_i; k^R]   (k^R shared by all heads)
//   o_i = causal softmax(q_i·k_iᵀ / sqrt(d_nope + d_rope))·v_i
//   u   = W_O·[o_1; ...; o_nh]                   wo: [d, n_h·d_v]
// Fused weights follow the released DeepSeek-V3 checkpoints (wq_b, wkv_a, wkv_b); the report's matrices are
// their row blocks as written above. Every GEMM with a weight goes through LinearCompute; the norms, RoPE and
// the attention core are ops (high precision).
// Buffers: q [tokens, n_h, d_nope + d_rope]; kva [tokens, kv_lora_rank + d_rope] (c_KV | k^R); kv [tokens, n_h,
// d_nope + d_v] (k^C_i | v_i); k [tokens, n_h, d_nope + d_rope]; o [tokens, n_h, d_v]; lse [batch, n_h, seq].
#pragma once
#include "model/config.h"
#include "model/layers.h"

namespace fp8train::model {

class MLA {
 public:
  struct State {
    RMSNorm::State q_norm, kv_norm;
    SavedTensor q, kv, k;          // up-projections (recomputable from c_Q, c_KV and k^R)
    SavedTensor k_rope;            // k^R after RoPE: [tokens, d_rope] (a column block of kva)
    SavedTensor o, lse;            // attention output (input of wo) and its log-sum-exp
  };

  MLA() = default;
  MLA(ParameterSet& params, const std::string& name, const ModelConfig& config, DType dtype, int layer);

  Tensor forward(const StepContext& ctx, const Tensor& h, State* state) const;
  // dh (+)= ∂L/∂h from dy = ∂L/∂u; parameter gradients accumulate. h is the forward input.
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& h, const Tensor& dh,
                bool accumulate) const;

 private:
  Tensor up_project_q(const StepContext& ctx, const Tensor& c_q_normed) const;  // q = [W_UQ; W_QR]·c_Q, RoPE on q^R
  Tensor assemble_k(const StepContext& ctx, const Tensor& kv, const Tensor& k_rope) const;  // k_i = [k^C_i; k^R]
  Tensor value_view(const Tensor& kv) const;                                    // v_i inside kv

  std::string name_;
  int64_t heads_ = 0, nope_ = 0, rope_ = 0, vdim_ = 0, q_rank_ = 0, kv_rank_ = 0;
  double scale_ = 1.0, theta_ = 10000.0;
  Linear wq_a_, wq_b_, wkv_a_, wkv_b_, wo_;
  RMSNorm q_norm_, kv_norm_;
};

}  // namespace fp8train::model
