// MoE permute/unpermute entry points (see moe_dispatch.h).
#include "ops/moe_dispatch.h"

#include "ops/checks.h"

namespace fp8train::ops {

int64_t moe_plan_rows(int64_t tokens, int64_t top_k, int64_t n_experts, int64_t align) {
  const int64_t bound = tokens * top_k + n_experts * (align - 1);
  return (bound + align - 1) / align * align;
}

MoePlan moe_build_plan(const ExecCtx& ctx, const Tensor& selected, int64_t n_experts, int64_t align,
                       MemCategory category) {
  const char* op = "moe_build_plan";
  check::matrix(op, "selected", selected);
  check::dtype(op, "selected", selected, DType::I32);
  FP8T_CHECK(selected.is_contiguous(), "{}: selected must be contiguous, got {}", op, selected.str());
  FP8T_CHECK(n_experts > 0, "{}: n_experts must be positive", op);
  FP8T_CHECK(align >= 1, "{}: align must be at least 1, got {}", op, align);
  MoePlan plan;
  plan.tokens = selected.size(0);
  plan.top_k = selected.size(1);
  plan.n_experts = n_experts;
  plan.align = align;
  plan.rows = moe_plan_rows(plan.tokens, plan.top_k, n_experts, align);
  FP8T_CHECK(plan.rows <= INT32_MAX, "{}: {} expert-ordered rows overflow the int32 plan", op, plan.rows);
  check::on_device(op, ctx, {&selected});
  plan.expert_offsets = Tensor::empty({n_experts + 1}, DType::I32, category, ctx.device);
  plan.slot_token = Tensor::empty({plan.rows}, DType::I32, category, ctx.device);
  plan.choice_slot = Tensor::empty({plan.tokens, plan.top_k}, DType::I32, category, ctx.device);
  MoePlanProblem p{plan.tokens, plan.top_k, n_experts, align, plan.rows};
  launcher(ctx, &OpTable::moe_build_plan, "moe_build_plan")(
      ctx, p, selected.data<int32_t>(), plan.expert_offsets.data<int32_t>(), plan.slot_token.data<int32_t>(),
      plan.choice_slot.data<int32_t>());
  if (ctx.device.is_cpu()) {  // the offsets are host memory: no spare capacity needed
    plan.rows = plan.expert_offsets.data<int32_t>()[n_experts];
    plan.slot_token = plan.slot_token.narrow(0, 0, plan.rows);
  }
  return plan;
}

namespace {
MoePermuteProblem problem(const ExecCtx& ctx, const char* op, const Tensor& token_rows, const Tensor& expert_rows,
                          const MoePlan& plan, bool accumulate) {
  check::matrix(op, "token-ordered matrix", token_rows, plan.tokens);
  check::matrix(op, "expert-ordered matrix", expert_rows, plan.rows, token_rows.size(1));
  check::storage_dtype(op, "token-ordered matrix", token_rows);
  check::same_dtype(op, {&token_rows, &expert_rows});
  check::on_device(op, ctx, {&token_rows, &expert_rows, &plan.slot_token});
  MoePermuteProblem p;
  p.dtype = token_rows.dtype();
  p.tokens = plan.tokens;
  p.top_k = plan.top_k;
  p.rows = plan.rows;
  p.dim = token_rows.size(1);
  p.ld_x = token_rows.size(0) > 1 ? token_rows.ld() : p.dim;
  p.ld_xp = expert_rows.size(0) > 1 ? expert_rows.ld() : p.dim;
  p.accumulate = accumulate;
  return p;
}
void check_gates(const char* op, const Tensor& gates, const MoePlan& plan, const Tensor& like) {
  check::vector(op, "gates", gates, plan.tokens * plan.top_k);
  check::compute_dtype_of(op, "gates", gates, like.dtype());
}
}  // namespace

void moe_permute(const ExecCtx& ctx, const Tensor& x, const MoePlan& plan, const Tensor& xp) {
  const MoePermuteProblem p = problem(ctx, "moe_permute", x, xp, plan, false);
  launcher(ctx, &OpTable::moe_permute, "moe_permute")(ctx, p, x.raw(), plan.slot_token.data<int32_t>(), xp.raw());
}

quant::QTensor moe_permute(const ExecCtx& ctx, const quant::QTensor& xq, const MoePlan& plan, MemCategory category) {
  const char* op = "moe_permute (quantized)";
  FP8T_CHECK(xq.rowwise.defined() && xq.rows == plan.tokens && xq.groups == 1,
             "{}: expected the row-wise quantized tokens [{}, dim], got [{}, {}] in {} groups", op, plan.tokens,
             xq.rows, xq.cols, xq.groups);
  const quant::Granularity& g = xq.spec.granularity;
  FP8T_CHECK(!g.per_tensor && g.block_rows == 1 && xq.rowwise.layout == quant::ScaleLayout::RowMajor &&
                 xq.spec.format != quant::Format::E5M6,
             "{}: tokens move with per-row tiles (1xG) and row-major scales, not {} {} {}", op,
             quant::format_name(xq.spec.format), g.name(), quant::scale_layout_name(xq.rowwise.layout));
  check::on_device(op, ctx, {&xq.rowwise.codes, &xq.rowwise.scales, &plan.slot_token});
  quant::QTensor out = xq.rowwise_only();
  out.rows = plan.rows;
  // (explicit widths: a rank may receive no tokens at all under expert parallelism)
  const Tensor codes = xq.rowwise.codes.view({xq.rows, xq.cols});
  const Tensor scales = xq.rowwise.scales.view({xq.rows, xq.scale_cols()});
  out.rowwise.codes = Tensor::empty({plan.rows, codes.size(1)}, codes.dtype(), category, ctx.device);
  out.rowwise.scales = Tensor::empty({plan.rows, scales.size(1)}, scales.dtype(), category, ctx.device);
  for (const auto& [src, dst] : {std::pair{codes, out.rowwise.codes}, std::pair{scales, out.rowwise.scales}}) {
    MoePermuteProblem p;
    p.dtype = src.dtype();
    p.tokens = plan.tokens;
    p.top_k = plan.top_k;
    p.rows = plan.rows;
    p.dim = src.size(1);
    p.ld_x = p.ld_xp = p.dim;
    launcher(ctx, &OpTable::moe_permute, "moe_permute")(ctx, p, src.raw(), plan.slot_token.data<int32_t>(), dst.raw());
  }
  return out;
}

void moe_permute_backward(const ExecCtx& ctx, const Tensor& dxp, const MoePlan& plan, const Tensor& dx,
                          bool accumulate) {
  const MoePermuteProblem p = problem(ctx, "moe_permute_backward", dx, dxp, plan, accumulate);
  launcher(ctx, &OpTable::moe_permute_backward, "moe_permute_backward")(ctx, p, dxp.raw(),
                                                                        plan.choice_slot.data<int32_t>(), dx.raw());
}

void moe_unpermute(const ExecCtx& ctx, const Tensor& yp, const MoePlan& plan, const Tensor& gates, const Tensor& y,
                   bool accumulate) {
  const MoePermuteProblem p = problem(ctx, "moe_unpermute", y, yp, plan, accumulate);
  check_gates("moe_unpermute", gates, plan, y);
  launcher(ctx, &OpTable::moe_unpermute, "moe_unpermute")(ctx, p, yp.raw(), plan.choice_slot.data<int32_t>(),
                                                          gates.raw(), y.raw());
}

void moe_unpermute_backward(const ExecCtx& ctx, const Tensor& dy, const Tensor& yp, const MoePlan& plan,
                            const Tensor& gates, const Tensor& dyp, const Tensor& dgates) {
  const char* op = "moe_unpermute_backward";
  const MoePermuteProblem p = problem(ctx, op, dy, yp, plan, false);
  FP8T_CHECK(dyp.defined() && dyp.is_matrix() && dyp.size(0) == yp.size(0) && dyp.size(1) == yp.size(1) &&
                 (dyp.size(0) <= 1 || dyp.ld() == p.ld_xp),
             "{}: dyp must match yp's shape and row stride, got {} vs {}", op, dyp.str(), yp.str());
  check_gates(op, gates, plan, dy);
  check_gates(op, dgates, plan, dy);
  launcher(ctx, &OpTable::moe_unpermute_backward, "moe_unpermute_backward")(
      ctx, p, dy.raw(), yp.raw(), plan.choice_slot.data<int32_t>(), gates.raw(), dyp.raw(), dgates.raw());
}

}  // namespace fp8train::ops
