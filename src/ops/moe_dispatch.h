// Permute tokens to experts and back (DeepSeekMoE dispatch/combine; no token is ever dropped: every (token,
// choice) pair gets a row). The plan sorts the N·K pairs by expert, then token:
//   expert rows of e = [offsets[e], offsets[e+1]) of the expert-ordered matrix xp: [N·K, dim]
//   permute:   xp[j] = x[slot_token[j]]
//   unpermute: y[t] (+)= Σ_k gates[t,k]·yp[choice_slot[t,k]]      (the weighted combine)
// and their backwards. Token-ordered matrices are [N, dim] matrix views; expert-ordered ones [N·K, dim].
#pragma once
#include <vector>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

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

struct MoePlan {
  int64_t tokens = 0, top_k = 0, n_experts = 0;
  std::vector<int64_t> offsets;  // host copy of the expert offsets, [n_experts + 1] (to slice per-expert GEMMs)
  Tensor expert_offsets;         // i32 [n_experts + 1] on the device
  Tensor slot_token;             // i32 [N·K]
  Tensor choice_slot;            // i32 [N, K]
  int64_t expert_rows(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};

MoePlan moe_build_plan(const ExecCtx& ctx, const Tensor& selected, int64_t n_experts,
                       MemCategory category = MemCategory::Workspace);
void moe_permute(const ExecCtx& ctx, const Tensor& x, const MoePlan& plan, const Tensor& xp);
void moe_permute_backward(const ExecCtx& ctx, const Tensor& dxp, const MoePlan& plan, const Tensor& dx,
                          bool accumulate);
void moe_unpermute(const ExecCtx& ctx, const Tensor& yp, const MoePlan& plan, const Tensor& gates, const Tensor& y,
                   bool accumulate);
// dyp = gates·dy per row (overwritten); dgates[t,k] = <dy[t], yp[choice_slot[t,k]]> (overwritten).
void moe_unpermute_backward(const ExecCtx& ctx, const Tensor& dy, const Tensor& yp, const MoePlan& plan,
                            const Tensor& gates, const Tensor& dyp, const Tensor& dgates);

}  // namespace fp8train::ops
