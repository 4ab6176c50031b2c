// DeepSeekMoE router (the MoE gate; high precision in every recipe) and the sequence-wise balance loss.
//   logits: [tokens, n_experts] = u·Eᵀ (the gate GEMM is done by the caller);  bias: f32 [n_experts]
//   scores  s_{i,t} = sigmoid(logit_{i,t})                                    [tokens, n_experts]
//   selection: top-K over s_{i,t} + b_i — the bias steers selection only, never the gate values; with
//     n_group > 1: experts in n_group equal groups, group key = sum of the group's top-2 (s + b), keep the
//     topk_group best groups, take the top-K experts inside them (node-limited routing)
//                                                                             selected: i32 [tokens, K]
//   gates   g_{i,t} = s_{i,t} / Σ_{j selected} s_{j,t} × routed_scaling_factor     [tokens, K]
//   expert_counts: i32 [n_experts], how many tokens chose each expert (the per-expert load)
// Sequence-wise balance loss, per sequence of T tokens, averaged over the batch's sequences:
//   L_bal = α·Σ_i f_i·P_i,  f_i = N_r/(K_r·T)·Σ_t 1(i ∈ selected_t),  P_i = (1/T)·Σ_t s_{i,t}/Σ_j s_{j,t}
// (f_i counts selections and carries no gradient).
#pragma once
#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

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

struct RouterConfig {
  int64_t top_k = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
};

struct RouterOutputs {
  Tensor scores;         // [tokens, n_experts], dtype of logits
  Tensor selected;       // i32 [tokens, top_k], by descending s + b
  Tensor gates;          // [tokens, top_k]
  Tensor expert_counts;  // i32 [n_experts]
};

RouterOutputs router_forward(const ExecCtx& ctx, const Tensor& logits, const Tensor& bias, const RouterConfig& config,
                             MemCategory category = MemCategory::Workspace);
// dlogits = ∂L/∂logits from ∂L/∂gates plus an optional extra ∂L/∂scores (e.g. the balance loss; may be undefined).
void router_backward(const ExecCtx& ctx, const Tensor& scores, const Tensor& selected, const Tensor& dgates,
                     const Tensor& dscores_extra, const RouterConfig& config, const Tensor& dlogits);

double seq_balance_loss(const ExecCtx& ctx, const Tensor& scores, const Tensor& selected, int64_t batch, double alpha);
// dscores += dloss · ∂L_bal/∂scores.
void seq_balance_loss_backward(const ExecCtx& ctx, const Tensor& scores, const Tensor& selected, int64_t batch,
                               double alpha, double dloss, const Tensor& dscores);

}  // namespace fp8train::ops
