// Internal: the kernel-launch functions of the MoE family's .cu files (moe_router.cu: router and sequence balance
// loss; moe_dispatch.cu: plan, permute, unpermute), called by moe_ops.cpp after the entry points validated the
// arguments. Plain pointers and structs only (nvcc cannot compile fmt): errors come back as cudaError_t.
// Layouts as in ops/router.h and ops/moe_dispatch.h: row-major, token-ordered [tokens, ·], expert-ordered
// [rows, dim] with row strides in elements.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::moe {

// Storage type of the rows the permute family moves (their gates and gate gradients are always F32).
enum class RowType { F32, BF16 };

// ---- router (F32 logits, scores, gates) ---------------------------------------------------------------------
constexpr int kMaxExperts = 1024;  // one warp per token keeps each lane's experts in a 32-bit mask
constexpr int kMaxTopK = 32;       // one lane per selected expert

struct RouterArgs {
  const float* logits;
  const float* bias;
  float* scores;
  int32_t* selected;
  float* gates;
  int32_t* counts;  // may be null
  int64_t tokens;
  int n_experts, top_k, n_group, topk_group;
  float scale;  // routed_scaling_factor rounded to float, as the CPU kernel does
};
cudaError_t launch_router_forward(const RouterArgs& a, cudaStream_t stream);

struct RouterBackwardArgs {
  const float* scores;
  const int32_t* selected;
  const float* dgates;
  const float* dscores_extra;  // may be null
  float* dlogits;
  int64_t tokens;
  int n_experts, top_k;
  float scale;
};
cudaError_t launch_router_backward(const RouterBackwardArgs& a, cudaStream_t stream);

// ---- sequence balance loss (F32 scores, FP64 arithmetic) -------------------------------------------------------
struct BalanceArgs {
  const float* scores;      // [batch·seq, E]
  const int32_t* selected;  // [batch·seq, K]
  int32_t* counts;          // scratch [batch, E]: selections per sequence and expert
  int64_t batch, seq;
  int n_experts, top_k;
};
// loss (one device double) = alpha/(batch·seq)·Σ_t Σ_e f_{b(t),e}·s_{t,e}/S_t; per_token: scratch [batch·seq].
cudaError_t launch_balance_forward(const BalanceArgs& a, double alpha, double* per_token, double* loss,
                                   cudaStream_t stream);
// dscores += c·(f_e/S_t − Σ_j f_j·s_j/S_t²) with c = dloss·alpha/(batch·seq).
cudaError_t launch_balance_backward(const BalanceArgs& a, double c, float* dscores, cudaStream_t stream);

// ---- plan ---------------------------------------------------------------------------------------------------
constexpr int kPlanWarps = 8;
constexpr int kPlanPairsPerWarp = 512;
constexpr int64_t kPlanTile = kPlanWarps * kPlanPairsPerWarp;  // (token, choice) pairs per CTA
constexpr int kPlanMaxExperts = 1024;                          // per-warp counters in shared memory
inline int64_t plan_tiles(int64_t pairs) { return pairs == 0 ? 1 : (pairs + kPlanTile - 1) / kPlanTile; }

struct PlanArgs {
  const int32_t* selected;  // [tokens·top_k]
  int64_t pairs;            // tokens·top_k
  int top_k, n_experts, align;
  int64_t rows;  // capacity of slot_token
  int32_t* offsets;
  int32_t* slot_token;
  int32_t* choice_slot;
  int32_t* tile_base;  // scratch [plan_tiles(pairs), n_experts]
};
cudaError_t launch_moe_plan(const PlanArgs& a, cudaStream_t stream);

// ---- permute / unpermute ---------------------------------------------------------------------------------------
// xp[j] = x[slot_token[j]] (zero bytes where slot_token[j] < 0), rows of `elem_size`-byte elements.
cudaError_t launch_moe_permute(const void* x, const int32_t* slot_token, void* xp, int64_t rows, int64_t dim,
                               int64_t ld_x, int64_t ld_xp, int elem_size, cudaStream_t stream);

struct RowsArgs {
  RowType type;
  int64_t tokens, top_k, dim, ld_x, ld_xp;
  bool accumulate;
};
// dx[t] (+)= Σ_k dxp[choice_slot[t,k]]
cudaError_t launch_moe_permute_backward(const RowsArgs& a, const void* dxp, const int32_t* choice_slot, void* dx,
                                        cudaStream_t stream);
// y[t] (+)= Σ_k g[t,k]·yp[choice_slot[t,k]]
cudaError_t launch_moe_unpermute(const RowsArgs& a, const void* yp, const int32_t* choice_slot, const float* gates,
                                 void* y, cudaStream_t stream);
// dyp[choice_slot[t,k]] = g[t,k]·dy[t];  dgates[t,k] = <dy[t], yp[choice_slot[t,k]]>
cudaError_t launch_moe_unpermute_backward(const RowsArgs& a, const void* dy, const void* yp, const int32_t* choice_slot,
                                          const float* gates, void* dyp, float* dgates, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::moe
