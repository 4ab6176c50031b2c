// Router and balance-loss entry points (see router.h).
#include "ops/router.h"

#include "ops/checks.h"

namespace fp8train::ops {

namespace {
RouterProblem problem(const char* op, const Tensor& scores_like, const RouterConfig& c) {
  check::matrix(op, "logits/scores", scores_like);
  check::float_dtype(op, "logits/scores", scores_like);
  FP8T_CHECK(scores_like.is_contiguous(), "{}: logits/scores must be contiguous, got {}", op, scores_like.str());
  RouterProblem p;
  p.dtype = scores_like.dtype();
  p.tokens = scores_like.size(0);
  p.n_experts = scores_like.size(1);
  p.top_k = c.top_k;
  p.n_group = c.n_group;
  p.topk_group = c.topk_group;
  p.routed_scaling_factor = c.routed_scaling_factor;
  FP8T_CHECK(c.n_group >= 1 && p.n_experts % c.n_group == 0, "{}: {} experts do not split into {} groups", op,
             p.n_experts, c.n_group);
  FP8T_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, "{}: topk_group {} must be in [1, n_group = {}]", op,
             c.topk_group, c.n_group);
  FP8T_CHECK(c.top_k >= 1 && c.top_k <= c.topk_group * (p.n_experts / c.n_group),
             "{}: top_k {} exceeds the {} experts of the {} kept groups", op, c.top_k,
             c.topk_group * (p.n_experts / c.n_group), c.topk_group);
  return p;
}
}  // namespace

RouterOutputs router_forward(const ExecCtx& ctx, const Tensor& logits, const Tensor& bias, const RouterConfig& config,
                             MemCategory category) {
  const char* op = "router_forward";
  const RouterProblem p = problem(op, logits, config);
  check::vector(op, "bias", bias, p.n_experts);
  check::dtype(op, "bias", bias, DType::F32);
  check::on_device(op, ctx, {&logits, &bias});
  RouterOutputs out;
  out.scores = Tensor::empty({p.tokens, p.n_experts}, p.dtype, category, ctx.device);
  out.selected = Tensor::empty({p.tokens, p.top_k}, DType::I32, category, ctx.device);
  out.gates = Tensor::empty({p.tokens, p.top_k}, p.dtype, category, ctx.device);
  out.expert_counts = Tensor::empty({p.n_experts}, DType::I32, MemCategory::Workspace, ctx.device);
  launcher(ctx, &OpTable::router_forward, "router_forward")(ctx, p, logits.raw(), bias.data<float>(), out.scores.raw(),
                                                            out.selected.data<int32_t>(), out.gates.raw(),
                                                            out.expert_counts.data<int32_t>());
  return out;
}

void router_backward(const ExecCtx& ctx, const Tensor& scores, const Tensor& selected, const Tensor& dgates,
                     const Tensor& dscores_extra, const RouterConfig& config, const Tensor& dlogits) {
  const char* op = "router_backward";
  const RouterProblem p = problem(op, scores, config);
  check::vector(op, "selected", selected, p.tokens * p.top_k);
  check::dtype(op, "selected", selected, DType::I32);
  check::vector(op, "dgates", dgates, p.tokens * p.top_k);
  if (dscores_extra.defined()) check::vector(op, "dscores_extra", dscores_extra, p.tokens * p.n_experts);
  check::vector(op, "dlogits", dlogits, p.tokens * p.n_experts);
  check::same_dtype(op, {&scores, &dgates, &dscores_extra, &dlogits});
  check::on_device(op, ctx, {&scores, &selected, &dgates, &dscores_extra, &dlogits});
  launcher(ctx, &OpTable::router_backward, "router_backward")(
      ctx, p, scores.raw(), selected.data<int32_t>(), dgates.raw(),
      dscores_extra.defined() ? dscores_extra.raw() : nullptr, dlogits.raw());
}

namespace {
BalanceLossProblem balance_problem(const char* op, const Tensor& scores, const Tensor& selected, int64_t batch,
                                   double alpha) {
  check::matrix(op, "scores", scores);
  check::float_dtype(op, "scores", scores);
  FP8T_CHECK(scores.is_contiguous(), "{}: scores must be contiguous, got {}", op, scores.str());
  check::matrix(op, "selected", selected, scores.size(0));
  check::dtype(op, "selected", selected, DType::I32);
  FP8T_CHECK(selected.is_contiguous(), "{}: selected must be contiguous", op);
  FP8T_CHECK(batch > 0 && scores.size(0) % batch == 0, "{}: {} tokens are not {} whole sequences", op,
             scores.size(0), batch);
  BalanceLossProblem p;
  p.dtype = scores.dtype();
  p.batch = batch;
  p.seq = scores.size(0) / batch;
  p.n_experts = scores.size(1);
  p.top_k = selected.size(1);
  p.alpha = alpha;
  return p;
}
}  // namespace

double seq_balance_loss(const ExecCtx& ctx, const Tensor& scores, const Tensor& selected, int64_t batch, double alpha) {
  const BalanceLossProblem p = balance_problem("seq_balance_loss", scores, selected, batch, alpha);
  check::on_device("seq_balance_loss", ctx, {&scores, &selected});
  return launcher(ctx, &OpTable::balance_loss_forward, "balance_loss_forward")(ctx, p, scores.raw(),
                                                                               selected.data<int32_t>());
}

void seq_balance_loss_backward(const ExecCtx& ctx, const Tensor& scores, const Tensor& selected, int64_t batch,
                               double alpha, double dloss, const Tensor& dscores) {
  const char* op = "seq_balance_loss_backward";
  const BalanceLossProblem p = balance_problem(op, scores, selected, batch, alpha);
  check::vector(op, "dscores", dscores, scores.numel());
  check::same_dtype(op, {&scores, &dscores});
  check::on_device(op, ctx, {&scores, &selected, &dscores});
  launcher(ctx, &OpTable::balance_loss_backward, "balance_loss_backward")(
      ctx, p, scores.raw(), selected.data<int32_t>(), dloss, dscores.raw());
}

}  // namespace fp8train::ops
