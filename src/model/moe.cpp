// DeepSeekMoE forward/backward and the auxiliary-loss-free bias update (formulas in moe.h).
#include "model/moe.h"

#include <algorithm>

#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/quantize.h"
#include "ops/swiglu.h"

namespace fp8train::model {
namespace {
// A grouped Linear takes the experts' offsets; the Linear of a single local expert (E/ep = 1) is a plain one over
// all its rows (padding rows are zero in and out).
Tensor offsets_for(const ops::MoePlan& plan) { return plan.n_experts > 1 ? plan.expert_offsets : Tensor{}; }
}  // namespace

MoE::MoE(ParameterSet& params, const std::string& name, const ModelConfig& c, DType dtype, int layer, int ep,
         int ep_rank)
    : name_(name),
      n_experts_(c.n_routed_experts),
      ffn_(c.moe_intermediate_size),
      hidden_(c.hidden_size),
      router_{c.num_experts_per_tok, c.n_group, c.topk_group, c.routed_scaling_factor},
      alpha_(c.seq_aux_loss_alpha),
      load_(static_cast<size_t>(c.n_routed_experts), 0),
      last_load_(static_cast<size_t>(c.n_routed_experts), 0) {
  const int64_t E = n_experts_, F = ffn_, d = hidden_;
  Parameter& gate = params.add(name + ".gate.weight", {E, d}, dtype, Init::Normal);
  gate_weight_ = gate.value;
  gate_grad_ = gate.grad;
  bias_ = params.add_buffer(name + ".gate.bias", Tensor::zeros({E}, DType::F32, MemCategory::Weights)).value;
  if (c.n_shared_experts > 0) {
    has_shared_ = true;
    shared_ = SwigluFFN(params, name + ".shared_experts", d, c.n_shared_experts * F, dtype, layer,
                        recipe::LinearRole::SharedExpertUp, recipe::LinearRole::SharedExpertDown);
  }
  // The experts held: all of them, or this shard's (their names keep the global expert index, so a shard's
  // parameters are initialized as the whole model's and checkpoints hold every expert under one name).
  held_ = dist::expert_shard(E, ep, ep_rank, name);
  const int64_t H = held_.local(), first = held_.first();
  const bool sharded = held_.ep > 1;
  const Tensor w13 = Tensor::zeros({H * 2 * F, d}, dtype, MemCategory::Weights);
  const Tensor g13 = Tensor::zeros({H * 2 * F, d}, dtype, MemCategory::Gradients);
  const Tensor w2 = Tensor::zeros({H * d, F}, dtype, MemCategory::Weights);
  const Tensor g2 = Tensor::zeros({H * d, F}, dtype, MemCategory::Gradients);
  for (int64_t h = 0; h < H; ++h) {
    const std::string en = name + ".experts." + std::to_string(first + h);
    const int64_t r = h * 2 * F;
    params.add_view(en + ".w1.weight", w13.rows(r, r + F), g13.rows(r, r + F), Init::Normal, sharded);
    params.add_view(en + ".w2.weight", w2.rows(h * d, (h + 1) * d), g2.rows(h * d, (h + 1) * d), Init::Normal, sharded);
    params.add_view(en + ".w3.weight", w13.rows(r + F, r + 2 * F), g13.rows(r + F, r + 2 * F), Init::Normal, sharded);
  }
  params_ = &params;
  layer_ = layer;
  w13_all_ = w13;
  g13_all_ = g13;
  w2_all_ = w2;
  g2_all_ = g2;
  shard_ = held_;  // computes what it holds until set_expert_parallel says otherwise
  build_expert_linears();
}

void MoE::build_expert_linears() {
  const int64_t F = ffn_, d = hidden_, first = shard_.first() - held_.first(), L = shard_.local();
  const int64_t r13 = first * 2 * F, r2 = first * d;
  w13_ = Linear(*params_, w13_all_.rows(r13, r13 + L * 2 * F), g13_all_.rows(r13, r13 + L * 2 * F),
                name_ + ".experts.w13", recipe::LinearRole::ExpertUp, layer_, L);
  w2_ = Linear(*params_, w2_all_.rows(r2, r2 + L * d), g2_all_.rows(r2, r2 + L * d), name_ + ".experts.w2",
               recipe::LinearRole::ExpertDown, layer_, L);
}

void MoE::set_expert_parallel(dist::Communicator* ep) {
  const int size = ep ? ep->size() : 1;
  const dist::ExpertShard shard = dist::expert_shard(n_experts_, size, ep ? ep->rank() : 0, name_);
  FP8T_CHECK(held_.ep == 1 || (shard.ep == held_.ep && shard.rank == held_.rank),
             "{}: built with expert shard {} of {}, but set to expert parallelism as rank {} of {} (the experts it "
             "holds are not the ones it would compute)",
             name_, held_.rank, held_.ep, shard.rank, shard.ep);
  shard_ = shard;
  ep_ = size > 1 ? ep : nullptr;
  build_expert_linears();
}

void MoE::collect_linears(std::vector<const Linear*>& out) const {
  if (has_shared_) shared_.collect_linears(out);
  out.push_back(&w13_);
  out.push_back(&w2_);
}

Tensor MoE::forward(const StepContext& ctx, const Tensor& u, State* st, double* balance_loss, bool keep_input) {
  FP8T_CHECK(held_.ep == 1 || ep_ != nullptr,
             "{}: holds expert shard {} of {} but runs without expert parallelism (set_expert_parallel first)", name_,
             held_.rank, held_.ep);
  const int64_t n = u.size(0), F = ffn_;
  const DType dt = ctx.dtype;
  const Device dev = ctx.exec.device;
  const bool keep = ctx.training && st;
  // router (FP32: the MoE gate stays high precision): s_i = sigmoid(u·e_i); top-K of s_i + b_i (group-limited);
  // g_i = s_i/Σ s_sel × routed_scaling_factor
  const Tensor logits =
      ops::matmul(ctx.exec, u, false, gate_weight_, true, MemCategory::Workspace, {}, compute_dtype(dt));
  const ops::RouterOutputs r = ops::router_forward(ctx.exec, logits, bias_, router_);
  if (balance_loss && alpha_ > 0)
    *balance_loss += ops::seq_balance_loss(ctx.exec, r.scores, r.selected, ctx.batch, alpha_);
  // dispatch: every (token, choice) pair to its expert's rows — no token dropped — in the grouped GEMMs' layout
  // (padded to the grouped FP8 GEMM's 128-row blocks in the quantized recipes)
  const bool quantized = ctx.recipe->quantized_gemms();
  const int64_t align = quantized ? 128 : 1;
  // Without EP the plan is the experts' layout itself; with EP it is this rank's unpadded send order and the
  // exchange's local plan is the experts' layout (dist/expert_parallel.h).
  ops::MoePlan plan = ops::moe_build_plan(ctx.exec, r.selected, n_experts_, ep_ ? 1 : align);
  dist::ExpertExchange xc;
  if (ep_) xc = dist::ExpertExchange(*ep_, shard_, r.expert_counts, align, ctx.exec);
  const ops::MoePlan& eplan = ep_ ? xc.local_plan() : plan;
  if (ctx.training) {
    const std::vector<int64_t> counts = ep_ ? xc.global_load() : [&] {
      const std::vector<int32_t> c = r.expert_counts.to_vector<int32_t>();
      return std::vector<int64_t>(c.begin(), c.end());
    }();
    for (int64_t e = 0; e < n_experts_; ++e) {
      last_load_[e] = counts[e];
      load_[e] += counts[e];
    }
  }
  const recipe::LinearRecipe up = recipe::linear_recipe(*ctx.recipe, recipe::LinearRole::ExpertUp);
  // the token-ordered u in the plan's order, moved to the experts' ranks under EP
  auto permuted = [&](const Tensor& x) {
    const Tensor xp = Tensor::empty({plan.rows, hidden_}, dt, MemCategory::Workspace, dev);
    ops::moe_permute(ctx.exec, x, plan, xp);
    return xp;
  };
  auto to_experts = [&](const Tensor& x) { return ep_ ? xc.dispatch(ctx.exec, permuted(x)) : permuted(x); };
  // The shared experts: with EP they run while the routed tokens travel (the dispatch on its side queue); they
  // read only u, and the routed outputs are added into theirs below either way, so the numbers are the same.
  Tensor y;
  const auto shared_forward = [&] {
    y = has_shared_ ? shared_.forward(ctx, u, keep ? &st->shared : nullptr, keep_input)
                    : Tensor::zeros({n, hidden_}, dt, MemCategory::Workspace, dev);
  };
  LinearInput x13;
  if (up.dispatched_input) {
    // DeepSeek-V3 quantizes tokens to FP8 (power-of-two 1×128 tiles) before the dispatch moves them
    const quant::QTensor uq =
        ops::quantize(ctx.exec, u, up.fprop.a, ops::QuantizeOutputs::Rowwise, quant::ScaleLayout::RowMajor);
    quant::QTensor xq = ops::moe_permute(ctx.exec, uq, plan);
    if (ep_) {
      dist::ExpertExchange::Pending sent = xc.start_dispatch(ctx.exec, xq);
      shared_forward();
      xq = xc.finish_qdispatch(ctx.exec, sent);
    }
    Tensor plain;  // the same tokens unquantized, for a sampled step's health records
    if (ctx.health) plain = to_experts(u);
    x13 = w13_.dispatched(ctx, xq, plain, keep);
  } else if (ep_) {
    dist::ExpertExchange::Pending sent = xc.start_dispatch(ctx.exec, permuted(u));
    shared_forward();
    x13 = w13_.prepare(ctx, xc.finish_dispatch(ctx.exec, sent), keep);
  } else {
    x13 = w13_.prepare(ctx, to_experts(u), keep);
  }
  // routed experts: FFN_i(x) = W2_i·(silu(W1_i·x) ∘ (W3_i·x)) on each expert's rows, one grouped GEMM each
  const Tensor gate_up = Tensor::empty({eplan.rows, 2 * F}, dt, MemCategory::Workspace, dev);
  w13_.forward(ctx, x13, gate_up, offsets_for(eplan));
  const bool keep_act = keep && ctx.store->keeps(CacheKind::SwigluOutput);
  SwigluForward sw = swiglu_ffn_forward(ctx, gate_up, w2_, keep, keep_act);
  const LinearInput& x2 = sw.x2;
  const Tensor ye = Tensor::empty({eplan.rows, hidden_}, dt, MemCategory::Workspace, dev);
  w2_.forward(ctx, x2, ye, offsets_for(eplan));
  // the expert outputs back to their tokens' ranks in the compute dtype (EP), in the plan's order
  const Tensor yp = ep_ ? xc.combine(ctx.exec, ye) : ye;
  // combine (in the compute dtype): h' = Σ shared FFN(u) + Σ_selected g_i·FFN_i(u)
  if (!y.defined()) shared_forward();
  ops::moe_unpermute(ctx.exec, yp, plan, r.gates, y, true);
  if (keep) {
    st->scores = ctx.store->save(ctx.exec, r.scores, CacheKind::RouterState);
    st->selected = ctx.store->save(ctx.exec, r.selected, CacheKind::RouterState);
    st->gates = ctx.store->save(ctx.exec, r.gates, CacheKind::RouterState);
    for (const Tensor* t : {&plan.expert_offsets, &plan.slot_token, &plan.choice_slot})
      t->storage().set_category(MemCategory::ActivationCache);
    st->plan = std::move(plan);
    if (ep_) {
      xc.set_category(MemCategory::ActivationCache);
      st->ep = std::move(xc);
    }
    st->x13 = w13_.kept(ctx, x13);
    st->gate_up = std::move(sw.gate_up);
    if (keep_act) st->x2 = w2_.kept(ctx, x2);
    st->yp = ctx.store->save(ctx.exec, yp, CacheKind::ExpertIO);
  }
  return y;
}

void MoE::backward(const StepContext& ctx, const State& st, const Tensor& dy, const Tensor& u, const Tensor& du,
                   bool accumulate) const {
  const int64_t n = u.size(0);
  const DType dt = ctx.dtype;
  const Device dev = ctx.exec.device;
  const ops::MoePlan& plan = st.plan;
  const bool ep = st.ep.local_plan().expert_offsets.defined();
  const ops::MoePlan& eplan = ep ? st.ep.local_plan() : plan;
  const Tensor scores = ctx.store->load(ctx.exec, st.scores), selected = ctx.store->load(ctx.exec, st.selected);
  const Tensor gates = ctx.store->load(ctx.exec, st.gates);
  const Tensor yp = ctx.store->load(ctx.exec, st.yp);
  // shared experts (with EP: while dy travels to the experts' ranks; du gets the shared part first either way)
  const auto shared_backward = [&] {
    if (has_shared_) {
      shared_.backward(ctx, st.shared, dy, u, du, accumulate);
    } else if (!accumulate) {
      ops::fill(ctx.exec, du, 0.0);
    }
  };
  if (!ep) shared_backward();
  // combine: dyp = g·dy per (token, choice) row, zeros in the padding rows; dg = <dy, FFN_i(u)>
  Tensor dyp = Tensor::zeros({plan.rows, hidden_}, dt, MemCategory::Workspace, dev);
  const Tensor dgates = Tensor::empty({n, router_.top_k}, compute_dtype(dt), MemCategory::Workspace, dev);
  ops::moe_unpermute_backward(ctx.exec, dy, yp, plan, gates, dyp, dgates);
  // EP: dy per (token, choice) to the experts' ranks — as FP8 with power-of-two 1×128 scales where the recipe
  // dispatches the gradient (W2's Dgrad quantizes it so anyway: re-quantizing the exchanged values gives the same
  // values, the scales being powers of two), else in the compute dtype
  // Handed over to the experts' backward, which frees it after W2's: W1|W3's, the largest, runs without it.
  Tensor dye = dyp;
  if (ep) {
    const recipe::LinearRecipe down = recipe::linear_recipe(*ctx.recipe, recipe::LinearRole::ExpertDown);
    if (down.dispatched_grad) {
      const quant::QTensor q =
          ops::quantize(ctx.exec, dyp, down.dgrad.a, ops::QuantizeOutputs::Rowwise, quant::ScaleLayout::RowMajor);
      dist::ExpertExchange::Pending sent = st.ep.start_dispatch(ctx.exec, q);
      shared_backward();
      dye = ops::dequantize(ctx.exec, st.ep.finish_qdispatch(ctx.exec, sent), dt);
    } else {
      dist::ExpertExchange::Pending sent = st.ep.start_dispatch(ctx.exec, dyp);
      shared_backward();
      dye = st.ep.finish_dispatch(ctx.exec, sent);
    }
  }
  dyp = Tensor();
  // routed experts
  const Tensor dxe = Tensor::empty({eplan.rows, hidden_}, dt, MemCategory::Workspace, dev);
  swiglu_ffn_backward(
      ctx, st.gate_up, st.x2, w2_, w13_, std::move(dye), [&] { return st.x13; }, dxe, false, offsets_for(eplan));
  // dx back to the tokens' ranks in the compute dtype (EP), summed over each token's choices
  ops::moe_permute_backward(ctx.exec, ep ? st.ep.combine(ctx.exec, dxe) : dxe, plan, du, true);
  // router: gates and (through the balance loss) scores depend on the logits u·e_i (FP32)
  Tensor dscores;
  if (alpha_ > 0) {
    dscores = Tensor::zeros({n, n_experts_}, compute_dtype(dt), MemCategory::Workspace, dev);
    ops::seq_balance_loss_backward(ctx.exec, scores, selected, ctx.batch, alpha_, ctx.grad_scale, dscores);
  }
  const Tensor dlogits = Tensor::empty({n, n_experts_}, compute_dtype(dt), MemCategory::Workspace, dev);
  ops::router_backward(ctx.exec, scores, selected, dgates, dscores, router_, dlogits);
  ops::gemm(ctx.exec, dlogits, true, u, false, gate_grad_, {.beta = 1.0});
  ops::gemm(ctx.exec, dlogits, false, gate_weight_, false, du, {.beta = 1.0});
}

void MoE::set_pending_load(const std::vector<int64_t>& load) {
  FP8T_CHECK(static_cast<int64_t>(load.size()) == n_experts_, "{}: {} expert loads given for {} routed experts", name(),
             load.size(), n_experts_);
  load_ = load;
}

void MoE::update_bias(double gamma) {
  int64_t total = 0;
  for (int64_t l : load_) total += l;
  if (gamma > 0 && total > 0) {
    // b_i += γ·sign(mean_load − load_i): overloaded experts become less attractive, underloaded more
    const double mean = static_cast<double>(total) / static_cast<double>(n_experts_);
    std::vector<float> b = bias_.to_vector<float>();
    for (int64_t e = 0; e < n_experts_; ++e) {
      const double diff = mean - static_cast<double>(load_[e]);
      const double sign = diff > 0 ? 1.0 : (diff < 0 ? -1.0 : 0.0);
      b[e] = static_cast<float>(static_cast<double>(b[e]) + gamma * sign);
    }
    bias_.copy_from(Tensor::from_vector(b, {n_experts_}, MemCategory::Workspace, bias_.device()));
  }
  clear_load();
}

}  // namespace fp8train::model
