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
// their row blocks as written above. Every GEMM with a weight is a role-aware Linear (model/linear.h); the norms, RoPE
// and the attention core are ops (high precision: BF16 inputs, FP32 softmax statistics). Buffers: q [tokens, n_h,
// d_nope + d_rope]; kva [tokens, kv_lora_rank + d_rope] (c_KV | k^R); kv [tokens, n_h, d_nope + d_v] (k^C_i | v_i); k
// [tokens, n_h, d_nope + d_rope]; o [tokens, n_h, d_v]; lse [batch, n_h, seq].
//
// Incremental decoding (decode(): inference only) keeps per token and layer only the latent row [c_KV; k^R]
// (kv_lora_rank + d_rope values) and absorbs the up-projections, as DeepSeek-V3's inference does:
//   q^C_i·k^C_i(s) = q^C_i·W_UK_i·c_KV(s) = (W_UK_iᵀ·q^C_i)·c_KV(s)     (W_UK into the query side)
//   o_i = Σ_s p_s·W_UV_i·c_KV(s) = W_UV_i·(Σ_s p_s·c_KV(s))          (W_UV into the output side)
// so every head attends with the query [W_UK_iᵀ·q^C_i; q^R_i] to the same cached rows [c_KV; k^R] (keys) and c_KV
// (values): multi-query attention over the cache (ops/attention_cached.h), never materializing k^C or v. The
// absorbed products read the FP32 masters of W_UK and W_UV (the training path reads the recipe's compute copy of
// wkv_b: identical under the fp32 recipe); every other GEMM is the same Linear call as in forward().
#pragma once
#include "model/config.h"
#include "model/layers.h"

namespace fp8train::model {

class MLA {
 public:
  struct State {
    RMSNorm::State q_norm, kv_norm;
    LinearInput h_in;              // h as W_DQ and [W_DKV; W_KR] keep it (one shared input; undefined: recomputed)
    LinearInput cq_in, ckv_in;     // c_Q and c_KV (norm outputs) as W_UQ|W_QR and W_UK|W_UV keep them
    LinearInput o_in;              // the attention output as W_O keeps it (E5M6 in fp8-deepseek)
    SavedTensor q, kv, k;          // up-projections (recomputable from c_Q, c_KV and k^R)
    SavedTensor k_rope;            // k^R after RoPE: [tokens, d_rope] (a column block of kva)
    SavedTensor o, lse;            // attention output (when W_O keeps no plain or E5M6 copy) and its log-sum-exp
  };

  MLA() = default;
  MLA(ParameterSet& params, const std::string& name, const ModelConfig& config, DType dtype, int layer);

  // keep_input: the caller keeps h (the attention norm's output) — the Linears reading it keep their inputs.
  Tensor forward(const StepContext& ctx, const Tensor& h, State* state, bool keep_input) const;
  // dh (+)= ∂L/∂h from dy = ∂L/∂u; parameter gradients accumulate. h: the forward input when it was not kept.
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& h, const Tensor& dh,
                bool accumulate) const;
  void collect_linears(std::vector<const Linear*>& out) const;

  // h: [m, d] (the attention norm's output) for m new tokens at positions pos..pos+m−1 of one sequence; cache:
  // [capacity, cache_width()] in the compute dtype, rows 0..pos−1 filled by earlier calls. Writes the new tokens'
  // latent rows pos..pos+m−1 and returns u [m, d], equal (to rounding) to forward() on the whole sequence.
  Tensor decode(const StepContext& ctx, const Tensor& h, const Tensor& cache, int64_t pos) const;
  int64_t cache_width() const { return kv_rank_ + rope_; }

 private:
  Tensor up_project_q(const StepContext& ctx, const LinearInput& c_q) const;  // q = [W_UQ; W_QR]·c_Q, RoPE on q^R
  Tensor attention_output(const StepContext& ctx, const State& st) const;     // o as backward reads it
  Tensor assemble_k(const StepContext& ctx, const Tensor& kv, const Tensor& k_rope) const;  // k_i = [k^C_i; k^R]
  Tensor value_view(const Tensor& kv) const;                                    // v_i inside kv

  std::string name_;
  int64_t heads_ = 0, nope_ = 0, rope_ = 0, vdim_ = 0, q_rank_ = 0, kv_rank_ = 0;
  double scale_ = 1.0, theta_ = 10000.0;
  Linear wq_a_, wq_b_, wkv_a_, wkv_b_, wo_;
  RMSNorm q_norm_, kv_norm_;
};

}  // namespace fp8train::model
