// Permute tokens to experts and back (DeepSeekMoE dispatch/combine; no token is ever dropped: every (token,
// choice) pair gets a row). The plan sorts the N·K pairs by expert, then token, into the layout the grouped GEMMs
// read: expert e owns rows [offsets[e], offsets[e+1]) of the expert-ordered matrix xp: [rows, dim], its count_e
// tokens first, then zero rows up to a multiple of `align` (the grouped FP8 GEMM's 128-row block; 1 = no
// padding). rows = N·K + E·(align − 1) rounded up to align — an upper bound known without reading the counts,
// so the plan needs no host synchronization on a GPU; rows past offsets[E] are zero too.
//   permute:   xp[j] = x[slot_token[j]], or zeros where slot_token[j] = −1
//   unpermute: y[t] (+)= Σ_k gates[t,k]·yp[choice_slot[t,k]]      (the weighted combine)
// and their backwards. Token-ordered matrices are [N, dim] matrix views; expert-ordered ones [rows, dim]; the
// rows in storage dtype (f32, bf16, f64), gates in its compute dtype.
#pragma once
#include <vector>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// Token ↔ expert-slot bookkeeping: the N·K (token, choice) pairs sorted by expert, then by token.
struct MoePlanProblem {
  int64_t tokens = 0, top_k = 0, n_experts = 0;
  int64_t align = 1, rows = 0;  // rows: the expert-ordered capacity (see the top of this file)
};
struct MoePermuteProblem {
  DType dtype = DType::F32;
  int64_t tokens = 0, top_k = 0, dim = 0;
  int64_t rows = 0;             // expert-ordered rows (the plan's capacity)
  int64_t ld_x = 0, ld_xp = 0;  // row strides of the token-ordered and the expert-ordered matrices
  bool accumulate = false;      // token-ordered output: += instead of =
};

struct MoePlan {
  int64_t tokens = 0, top_k = 0, n_experts = 0;
  int64_t align = 1;
  int64_t rows = 0;       // expert-ordered rows: N·K + E·(align − 1) rounded up to align
  Tensor expert_offsets;  // i32 [n_experts + 1] on the device, multiples of align
  Tensor slot_token;      // i32 [rows]: the token of each expert-ordered row, −1 for padding
  Tensor choice_slot;     // i32 [N, K]: the expert-ordered row of each (token, choice)
};

// The expert-ordered capacity of a plan (see the top of this file).
int64_t moe_plan_rows(int64_t tokens, int64_t top_k, int64_t n_experts, int64_t align);
MoePlan moe_build_plan(const ExecCtx& ctx, const Tensor& selected, int64_t n_experts, int64_t align = 1,
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
