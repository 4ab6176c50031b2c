// CUDA launchers of the router, the sequence balance loss and the MoE plan / permute / unpermute (ops/op_table.h);
// kernels in moe_router.cu and moe_dispatch.cu (moe_launch.h). Forms served:
//   router forward / backward, balance loss   F32 (the router is FP32 in every recipe; the entry points accept
//                                             F32 or F64 only), n_experts <= 1024, top_k <= 32, any grouping
//   plan                                      n_experts <= 1024, any align; all on the device, no host sync
//   permute                                   any element size (F32, BF16, F64 rows, U8 codes, F32 scales)
//   permute backward, unpermute (+ backward)  F32 and BF16 rows with F32 gates
// F64 forms (the CPU-only gradient-check models) are refused with "not implemented on cuda".
// balance_loss_forward returns a host double: it waits for the stream (one 8-byte copy back).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "common/error.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/moe_launch.h"
#include "ops/moe_dispatch.h"
#include "ops/router.h"
#include "tensor/cuda/cuda_check.h"

namespace fp8train::ops::cuda {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

void require_f32(const char* op, DType dtype) {
  if (dtype == DType::F64) throw_not_implemented(op, "f64");
  FP8T_CHECK(dtype == DType::F32, "{}: unexpected dtype {}", op, dtype_name(dtype));
}

void router_forward(const ExecCtx& ctx, const RouterProblem& p, const void* logits, const float* bias, void* scores,
                    int32_t* selected, void* gates, int32_t* expert_counts) {
  require_f32("router_forward", p.dtype);
  if (p.n_experts > moe::kMaxExperts) throw_not_implemented("router_forward", "more than 1024 experts");
  if (p.top_k > moe::kMaxTopK) throw_not_implemented("router_forward", "top_k above 32");
  moe::RouterArgs a;
  a.logits = static_cast<const float*>(logits);
  a.bias = bias;
  a.scores = static_cast<float*>(scores);
  a.selected = selected;
  a.gates = static_cast<float*>(gates);
  a.counts = expert_counts;
  a.tokens = p.tokens;
  a.n_experts = static_cast<int>(p.n_experts);
  a.top_k = static_cast<int>(p.top_k);
  a.n_group = static_cast<int>(p.n_group);
  a.topk_group = static_cast<int>(p.topk_group);
  a.scale = static_cast<float>(p.routed_scaling_factor);
  FP8T_CUDA_CHECK(moe::launch_router_forward(a, stream_of(ctx)));
  FP8T_CHECK_LAUNCH("router_forward", stream_of(ctx));
}

void router_backward(const ExecCtx& ctx, const RouterProblem& p, const void* scores, const int32_t* selected,
                     const void* dgates, const void* dscores_extra, void* dlogits) {
  require_f32("router_backward", p.dtype);
  if (p.top_k > moe::kMaxTopK) throw_not_implemented("router_backward", "top_k above 32");
  moe::RouterBackwardArgs a;
  a.scores = static_cast<const float*>(scores);
  a.selected = selected;
  a.dgates = static_cast<const float*>(dgates);
  a.dscores_extra = static_cast<const float*>(dscores_extra);
  a.dlogits = static_cast<float*>(dlogits);
  a.tokens = p.tokens;
  a.n_experts = static_cast<int>(p.n_experts);
  a.top_k = static_cast<int>(p.top_k);
  a.scale = static_cast<float>(p.routed_scaling_factor);
  FP8T_CUDA_CHECK(moe::launch_router_backward(a, stream_of(ctx)));
  FP8T_CHECK_LAUNCH("router_backward", stream_of(ctx));
}

moe::BalanceArgs balance_args(const BalanceLossProblem& p, const void* scores, const int32_t* selected,
                              int32_t* counts) {
  moe::BalanceArgs a;
  a.scores = static_cast<const float*>(scores);
  a.selected = selected;
  a.counts = counts;
  a.batch = p.batch;
  a.seq = p.seq;
  a.n_experts = static_cast<int>(p.n_experts);
  a.top_k = static_cast<int>(p.top_k);
  return a;
}

double balance_loss_forward(const ExecCtx& ctx, const BalanceLossProblem& p, const void* scores,
                            const int32_t* selected) {
  require_f32("balance_loss_forward", p.dtype);
  const Tensor counts = ctx.scratch({p.batch, p.n_experts}, DType::I32);
  const Tensor per_token = ctx.scratch({std::max<int64_t>(p.batch * p.seq, 1)}, DType::F64);
  const Tensor loss = ctx.scratch({1}, DType::F64);
  const moe::BalanceArgs a = balance_args(p, scores, selected, counts.data<int32_t>());
  FP8T_CUDA_CHECK(
      moe::launch_balance_forward(a, p.alpha, per_token.data<double>(), loss.data<double>(), stream_of(ctx)));
  FP8T_CHECK_LAUNCH("balance_loss_forward", stream_of(ctx));
  double host = 0;  // the loss is a host value: this waits for the stream
  FP8T_CUDA_CHECK(cudaMemcpyAsync(&host, loss.data<double>(), sizeof(double), cudaMemcpyDeviceToHost, stream_of(ctx)));
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  return host;
}

void balance_loss_backward(const ExecCtx& ctx, const BalanceLossProblem& p, const void* scores, const int32_t* selected,
                           double dloss, void* dscores) {
  require_f32("balance_loss_backward", p.dtype);
  const Tensor counts = ctx.scratch({p.batch, p.n_experts}, DType::I32);
  const moe::BalanceArgs a = balance_args(p, scores, selected, counts.data<int32_t>());
  const double c = dloss * p.alpha / static_cast<double>(p.batch * p.seq);
  FP8T_CUDA_CHECK(moe::launch_balance_backward(a, c, static_cast<float*>(dscores), stream_of(ctx)));
  FP8T_CHECK_LAUNCH("balance_loss_backward", stream_of(ctx));
}

void moe_build_plan(const ExecCtx& ctx, const MoePlanProblem& p, const int32_t* selected, int32_t* expert_offsets,
                    int32_t* slot_token, int32_t* choice_slot) {
  if (p.n_experts > moe::kPlanMaxExperts) throw_not_implemented("moe_build_plan", "more than 1024 experts");
  FP8T_CHECK(p.align <= INT32_MAX, "moe_build_plan: align {} overflows the int32 plan", p.align);
  const int64_t pairs = p.tokens * p.top_k;
  const Tensor tile_base = ctx.scratch({moe::plan_tiles(pairs), p.n_experts}, DType::I32);
  moe::PlanArgs a;
  a.selected = selected;
  a.pairs = pairs;
  a.top_k = static_cast<int>(p.top_k);
  a.n_experts = static_cast<int>(p.n_experts);
  a.align = static_cast<int>(p.align);
  a.rows = p.rows;
  a.offsets = expert_offsets;
  a.slot_token = slot_token;
  a.choice_slot = choice_slot;
  a.tile_base = tile_base.data<int32_t>();
  FP8T_CUDA_CHECK(moe::launch_moe_plan(a, stream_of(ctx)));
  FP8T_CHECK_LAUNCH("moe_build_plan", stream_of(ctx));
}

void moe_permute(const ExecCtx& ctx, const MoePermuteProblem& p, const void* x, const int32_t* slot_token, void* xp) {
  FP8T_CUDA_CHECK(moe::launch_moe_permute(x, slot_token, xp, p.rows, p.dim, p.ld_x, p.ld_xp,
                                          static_cast<int>(dtype_size(p.dtype)), stream_of(ctx)));
  FP8T_CHECK_LAUNCH("moe_permute", stream_of(ctx));
}

moe::RowsArgs rows_args(const char* op, const MoePermuteProblem& p) {
  if (p.dtype == DType::F64) throw_not_implemented(op, "f64");
  FP8T_CHECK(p.dtype == DType::F32 || p.dtype == DType::BF16, "{}: unexpected dtype {}", op, dtype_name(p.dtype));
  moe::RowsArgs a;
  a.type = p.dtype == DType::F32 ? moe::RowType::F32 : moe::RowType::BF16;
  a.tokens = p.tokens;
  a.top_k = p.top_k;
  a.dim = p.dim;
  a.ld_x = p.ld_x;
  a.ld_xp = p.ld_xp;
  a.accumulate = p.accumulate;
  return a;
}

void moe_permute_backward(const ExecCtx& ctx, const MoePermuteProblem& p, const void* dxp, const int32_t* choice_slot,
                          void* dx) {
  const moe::RowsArgs a = rows_args("moe_permute_backward", p);
  FP8T_CUDA_CHECK(moe::launch_moe_permute_backward(a, dxp, choice_slot, dx, stream_of(ctx)));
  FP8T_CHECK_LAUNCH("moe_permute_backward", stream_of(ctx));
}

void moe_unpermute(const ExecCtx& ctx, const MoePermuteProblem& p, const void* yp, const int32_t* choice_slot,
                   const void* gates, void* y) {
  const moe::RowsArgs a = rows_args("moe_unpermute", p);
  FP8T_CUDA_CHECK(moe::launch_moe_unpermute(a, yp, choice_slot, static_cast<const float*>(gates), y, stream_of(ctx)));
  FP8T_CHECK_LAUNCH("moe_unpermute", stream_of(ctx));
}

void moe_unpermute_backward(const ExecCtx& ctx, const MoePermuteProblem& p, const void* dy, const void* yp,
                            const int32_t* choice_slot, const void* gates, void* dyp, void* dgates) {
  const moe::RowsArgs a = rows_args("moe_unpermute_backward", p);
  FP8T_CUDA_CHECK(moe::launch_moe_unpermute_backward(a, dy, yp, choice_slot, static_cast<const float*>(gates), dyp,
                                                     static_cast<float*>(dgates), stream_of(ctx)));
  FP8T_CHECK_LAUNCH("moe_unpermute_backward", stream_of(ctx));
}

}  // namespace

void install_moe_ops(OpTable& t) {
  t.router_forward = router_forward;
  t.router_backward = router_backward;
  t.balance_loss_forward = balance_loss_forward;
  t.balance_loss_backward = balance_loss_backward;
  t.moe_build_plan = moe_build_plan;
  t.moe_permute = moe_permute;
  t.moe_permute_backward = moe_permute_backward;
  t.moe_unpermute = moe_unpermute;
  t.moe_unpermute_backward = moe_unpermute_backward;
}

}  // namespace fp8train::ops::cuda
