// Role-aware Linear layers (see linear.h).
#include "model/linear.h"

#include <cstring>

#include "common/error.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/scaled_gemm.h"
#include "recipe/health.h"

namespace fp8train::model {

using recipe::GemmKind;
using recipe::WgradInput;

namespace {

uint64_t mix64(uint64_t x) {  // SplitMix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t hash_name(const std::string& s) {  // FNV-1a: stable across runs and platforms
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// The scale layout the GEMMs of a device read fastest: the CPU reference's row-major grid, the GPU kernels'
// native layout.
quant::ScaleLayout layout_for(const ExecCtx& ctx) {
  return ctx.device.is_cpu() ? quant::ScaleLayout::RowMajor : quant::ScaleLayout::GemmNative;
}

bool same_spec(const quant::QuantSpec& a, const quant::QuantSpec& b) {
  return a.format == b.format && a.granularity == b.granularity && a.scale_mode == b.scale_mode &&
         a.rounding == b.rounding;
}

// A [rows, cols] FP32 tensor on ctx's device (the FP32 reference products of sampled steps).
Tensor f32_matrix(const StepContext& ctx, int64_t rows, int64_t cols) {
  return Tensor::empty({rows, cols}, DType::F32, MemCategory::Workspace, ctx.exec.device);
}

// A 128×128-block quantization of dy re-expressed with one scale per row per 128 columns (each row of a block
// repeats the block's scale): the same values in the 1×128 · 128×128 pairing the scaled GEMMs accept. Only the
// dgrad_block ablation (DeepSeek-V3 report, App. B.2) uses it, on any device. Blocks never straddle two experts:
// the MoE pads each expert's rows to 128 in the quantized recipes (moe.cpp), so a grouped Dgrad reads the same
// scales.
quant::QTensor blocks_as_row_tiles(const StepContext& ctx, const quant::QTensor& q) {
  FP8T_CHECK(q.groups == 1 && !q.spec.granularity.per_tensor && q.rowwise.defined(),
             "the dgrad_block ablation expects one block-quantized dy matrix");
  return ops::block_scales_as_row_tiles(ctx.exec, q);
}

// A per-tensor quantized stack of `groups` weights with its one scale repeated per group: the grouped GEMMs read
// one scale per group (quant/qtensor.h). The codes are shared.
quant::QTensor per_group(const StepContext& ctx, const quant::QTensor& q, int64_t groups) {
  FP8T_CHECK(q.spec.granularity.per_tensor && q.groups == 1 && q.rows % groups == 0,
             "per_group: expected one per-tensor quantized stack of {} weights", groups);
  quant::QTensor g = q.rowwise_only();
  g.groups = groups;
  const std::vector<float> scale = q.rowwise.scales.to_vector<float>();  // once per weight refresh
  const Tensor host = Tensor::from_vector(std::vector<float>(static_cast<size_t>(groups), scale.at(0)), {groups, 1},
                                          MemCategory::ComputeWeights, Device::cpu());
  g.rowwise.scales = host.to(ctx.exec.device, MemCategory::ComputeWeights);
  return g;
}

}  // namespace

// A pass that does not train (evaluation, generation) reads a delayed-scaling history without pushing into it:
// it quantizes against a copy, so how often a run evaluates never changes its training.
namespace {
ops::AmaxHistoryState scratch_copy(const ops::AmaxHistoryState& h) {
  ops::AmaxHistoryState c = h;
  c.entries = h.entries.clone();
  c.meta = h.meta.clone();
  return c;
}
}  // namespace

// ---- per-Linear state -----------------------------------------------------------------------------------------
struct Linear::State {
  const recipe::RecipeConfig* recipe = nullptr;  // the recipe this state was built for
  recipe::LinearRecipe plan;
  // The compute copy of the weight and the parameter version it was made from.
  uint64_t weight_version = ~uint64_t{0};
  Tensor weight_plain;      // bf16: the BF16 copy (fp32: the master itself)
  quant::QTensor weight_q;  // quantized recipes: W (row-wise) and Wᵀ (column-wise)
  // fp8-tensorwise delayed scaling, one history per operand (TE keeps one per tensor; the weight's gets one
  // entry per refresh, i.e. per optimizer step).
  std::unique_ptr<ops::AmaxHistoryState> history_x, history_w, history_dy;
  // Stochastic rounding: a stream per (step, call) of this Linear.
  uint64_t name_hash = 0;
  int64_t seed_step = -1;
  uint64_t seed_calls = 0;

  uint64_t next_seed(const StepContext& ctx) {
    if (seed_step != ctx.step) {
      seed_step = ctx.step;
      seed_calls = 0;
    }
    return mix64(mix64(mix64(recipe->seed) ^ static_cast<uint64_t>(ctx.step)) ^ name_hash) ^ mix64(seed_calls++);
  }
};

Linear::Linear(ParameterSet& params, const std::string& name, int64_t in, int64_t out, recipe::LinearRole role,
               DType dtype, int layer)
    : params_(&params), site_(name), role_(role), layer_(layer) {
  Parameter& p = params.add(name + ".weight", {out, in}, dtype, Init::Normal);
  weight_ = p.value;
  grad_ = p.grad;
}

Linear::Linear(const ParameterSet& params, const Tensor& weight, const Tensor& grad, const std::string& site,
               recipe::LinearRole role, int layer, int64_t groups)
    : params_(&params), weight_(weight), grad_(grad), site_(site), role_(role), layer_(layer), groups_(groups) {
  FP8T_CHECK(groups >= 1 && weight.dim() == 2 && weight.size(0) % groups == 0,
             "linear {}: weight {} is not {} stacked matrices", site, weight.str(), groups);
}

Linear::Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;
Linear::~Linear() = default;

Linear::State& Linear::created_state(const StepContext& ctx) const {
  FP8T_CHECK(ctx.recipe != nullptr, "linear {}: no recipe in the step context", site_);
  auto& self = const_cast<Linear&>(*this);
  if (!self.state_ || self.state_->recipe != ctx.recipe) {
    auto s = std::make_unique<State>();
    s->recipe = ctx.recipe;
    s->plan = recipe::linear_recipe(*ctx.recipe, role_);
    s->name_hash = hash_name(site_);
    if (ctx.recipe->per_tensor()) {
      const int len = ctx.recipe->amax_history;
      const quant::AmaxAlgorithm algo = ctx.recipe->amax_algorithm;
      s->history_x = std::make_unique<ops::AmaxHistoryState>(
          ops::AmaxHistoryState::make(ctx.exec, len, algo, 0, MemCategory::ComputeWeights));
      s->history_w = std::make_unique<ops::AmaxHistoryState>(
          ops::AmaxHistoryState::make(ctx.exec, len, algo, 0, MemCategory::ComputeWeights));
      s->history_dy = std::make_unique<ops::AmaxHistoryState>(
          ops::AmaxHistoryState::make(ctx.exec, len, algo, 0, MemCategory::ComputeWeights));
    }
    self.state_ = std::move(s);
  }
  return *self.state_;
}

Linear::State& Linear::state(const StepContext& ctx) const {
  State& s = created_state(ctx);
  // The compute copy of the weight, once per parameter update.
  const uint64_t version = params_ ? params_->version() : 0;
  if (s.weight_version != version) {
    const quant::ScaleLayout layout = layout_for(ctx.exec);
    if (s.plan.quantized) {
      const quant::QuantSpec& spec = s.plan.fprop.b;
      if (ctx.recipe->per_tensor()) {
        // One delayed scale for the weight tensor; stacked expert weights take it for every expert. A pass that
        // does not train quantizes against a copy of the history and leaves the copy stale, so the next training
        // forward still makes it and pushes the weight's amax once.
        ops::AmaxHistoryState scratch;
        if (!ctx.training) scratch = scratch_copy(*s.history_w);
        s.weight_q = ops::quantize_delayed(ctx.exec, weight_, spec, ctx.training ? *s.history_w : scratch,
                                           groups_ > 1 ? ops::QuantizeOutputs::Rowwise : ops::QuantizeOutputs::Both,
                                           layout, MemCategory::ComputeWeights);
        if (groups_ > 1)
          s.weight_q = ops::with_colwise(ctx.exec, per_group(ctx, s.weight_q, groups_), MemCategory::ComputeWeights);
      } else {
        s.weight_q = ops::quantize(ctx.exec, weight_, spec, ops::QuantizeOutputs::Both, layout, groups_,
                                   MemCategory::ComputeWeights);
      }
    } else if (ctx.dtype != weight_.dtype()) {
      s.weight_plain = Tensor::empty(weight_.shape(), ctx.dtype, MemCategory::ComputeWeights, ctx.exec.device);
      ops::copy(ctx.exec, weight_, s.weight_plain);
    } else {
      s.weight_plain = weight_;
    }
    if (ctx.training || !ctx.recipe->per_tensor()) s.weight_version = version;
  }
  return s;
}

void Linear::check_offsets(const Tensor& offsets) const {
  FP8T_CHECK((groups_ > 1) == offsets.defined(), "linear {}: {} weights {} expert offsets", site_, groups_,
             offsets.defined() ? "take no" : "need");
  if (offsets.defined())
    FP8T_CHECK(offsets.numel() == groups_ + 1, "linear {}: {} experts need {} offsets, got {}", site_, groups_,
               groups_ + 1, offsets.str());
}

void Linear::delayed_scaling_state(const StepContext& ctx, std::vector<std::pair<std::string, Tensor>>& out) const {
  // created_state, not state: the compute copy (and the weight history's push) stays with the next forward.
  State& s = created_state(ctx);
  const std::pair<const char*, const ops::AmaxHistoryState*> histories[] = {
      {"x", s.history_x.get()}, {"w", s.history_w.get()}, {"dy", s.history_dy.get()}};
  for (const auto& [operand, h] : histories) {
    if (h == nullptr) continue;
    out.emplace_back(site_ + ".amax_history." + operand + ".entries", h->entries);
    out.emplace_back(site_ + ".amax_history." + operand + ".meta", h->meta);
  }
}

int64_t Linear::compute_weight_bytes() const {
  if (!state_) return 0;
  if (state_->weight_q.defined()) return static_cast<int64_t>(state_->weight_q.bytes());
  return state_->weight_plain.defined() ? static_cast<int64_t>(state_->weight_plain.nbytes()) : 0;
}

// ---- forward ----------------------------------------------------------------------------------------------------
LinearInput Linear::quantize_input(const StepContext& ctx, const Tensor& x, bool keep, bool delayed,
                                   bool wgrad_only) const {
  State& s = state(ctx);
  const quant::ScaleLayout layout = layout_for(ctx.exec);
  const recipe::LinearRecipe& plan = s.plan;
  FP8T_CHECK(same_spec(plan.fprop.a, plan.wgrad.b),
             "linear {}: the recipe quantizes x differently for Fprop and Wgrad, which one quantizer call cannot do",
             site_);
  LinearInput in;
  in.x = x;
  const bool colwise = keep && plan.wgrad_input == WgradInput::Colwise && !plan.has_input_storage;
  // (wgrad_only: the input of a backward, which reads only the column-wise copy)
  const ops::QuantizeOutputs outputs = colwise
                                           ? (wgrad_only ? ops::QuantizeOutputs::Colwise : ops::QuantizeOutputs::Both)
                                           : ops::QuantizeOutputs::Rowwise;
  if (delayed) {
    ops::AmaxHistoryState scratch;
    if (!ctx.training) scratch = scratch_copy(*s.history_x);
    in.q = ops::quantize_delayed(ctx.exec, x, plan.fprop.a, ctx.training ? *s.history_x : scratch, outputs, layout);
  } else {
    in.q = ops::quantize(ctx.exec, x, plan.fprop.a, outputs, layout);
  }
  if (keep && plan.has_input_storage)
    in.stored = ops::quantize(ctx.exec, x, plan.input_storage, ops::QuantizeOutputs::Rowwise, layout);
  return in;
}

LinearInput Linear::prepare(const StepContext& ctx, const Tensor& x, bool keep) const {
  FP8T_CHECK(x.defined() && x.dim() == 2 && x.size(1) == in_features(), "linear {}: x must be [tokens, {}], got {}",
             site_, in_features(), x.defined() ? x.str() : std::string("undefined"));
  FP8T_CHECK(x.dtype() == ctx.dtype, "linear {}: x is {} but the model computes in {}", site_, x.str(),
             dtype_name(ctx.dtype));
  State& s = state(ctx);
  if (!s.plan.quantized) {
    LinearInput in;
    in.x = x;
    return in;
  }
  FP8T_CHECK(!s.plan.dispatched_input, "linear {}: the routed experts' input arrives dispatched", site_);
  return quantize_input(ctx, x, keep, ctx.recipe->per_tensor());
}

LinearInput Linear::dispatched(const StepContext& ctx, const quant::QTensor& xq, const Tensor& plain, bool keep) const {
  State& s = state(ctx);
  FP8T_CHECK(s.plan.dispatched_input, "linear {}: this recipe does not dispatch its input quantized", site_);
  FP8T_CHECK(xq.cols == in_features() && xq.rowwise.defined(),
             "linear {}: the dispatched input is [{}, {}], not "
             "[tokens, {}]",
             site_, xq.rows, xq.cols, in_features());
  LinearInput in;
  in.x = plain;
  // Wgrad reads the dispatched values themselves, re-tiled into 128×1 tiles (exact: power-of-two scales), their
  // scales in the device's GEMM layout (the dispatched rows' own stay row-major: they travel with the rows).
  in.q = keep && s.plan.wgrad_input == WgradInput::Colwise
             ? ops::with_colwise(ctx.exec, xq, MemCategory::Workspace, layout_for(ctx.exec))
             : xq;
  return in;
}

LinearInput Linear::recomputed(const StepContext& ctx, const Tensor& x) const {
  State& s = state(ctx);
  if (!s.plan.quantized) return kept(ctx, prepare(ctx, x, true));
  // A recomputed input never enters the delayed-scaling history a second time: its Wgrad operand takes the
  // tensor's own scale (per tensor) or its tiles' (block recipes), as forward's column-wise copy would. Only
  // Wgrad reads it, so only its column-wise copy is written (re-tiling and stored forms keep theirs).
  return kept(ctx, quantize_input(ctx, x, true, false, /*wgrad_only=*/true));
}

std::optional<Linear::QuantForm> Linear::input_form(const StepContext& ctx) const {
  const State& s = state(ctx);
  const recipe::LinearRecipe& plan = s.plan;
  if (!plan.quantized || ctx.health || ctx.recipe->per_tensor() || plan.dispatched_input) return std::nullopt;
  return QuantForm{plan.fprop.a, ops::QuantizeOutputs::Rowwise, layout_for(ctx.exec)};
}

LinearInput Linear::prepared(const StepContext& ctx, const quant::QTensor& xq) const {
  const std::optional<QuantForm> form = input_form(ctx);
  FP8T_CHECK(form.has_value(), "linear {}: this recipe prepares its input from the plain tensor", site_);
  FP8T_CHECK(xq.cols == in_features() && xq.rowwise.defined() && same_spec(xq.spec, form->spec) && xq.groups == 1,
             "linear {}: a prepared input must be [tokens, {}] with its row-wise payload under the recipe's Fprop spec",
             site_, in_features());
  LinearInput in;
  in.q = xq;
  return in;
}

std::optional<Linear::QuantForm> Linear::recompute_form(const StepContext& ctx) const {
  const State& s = state(ctx);
  const recipe::LinearRecipe& plan = s.plan;
  if (!plan.quantized || ctx.health || plan.has_input_storage || plan.wgrad_input != WgradInput::Colwise ||
      !same_spec(plan.fprop.a, plan.wgrad.b))
    return std::nullopt;
  return QuantForm{plan.fprop.a, ops::QuantizeOutputs::Colwise, layout_for(ctx.exec)};
}

LinearInput Linear::recomputed(const StepContext& ctx, const quant::QTensor& xq) const {
  const std::optional<QuantForm> form = recompute_form(ctx);
  FP8T_CHECK(form.has_value(), "linear {}: this recipe recomputes its input from the plain tensor", site_);
  FP8T_CHECK(xq.cols == in_features() && xq.has_colwise() && same_spec(xq.spec, form->spec) && xq.groups == 1,
             "linear {}: a recomputed input must be [tokens, {}] with its column-wise payload under the recipe's spec",
             site_, in_features());
  LinearInput in;
  in.q = xq;
  return kept(ctx, in);
}

LinearInput Linear::kept(const StepContext& ctx, const LinearInput& in) const {
  const State& s = state(ctx);
  LinearInput k;
  if (!s.plan.quantized || ctx.health) k.x = in.x;
  if (s.plan.quantized) {
    if (in.stored.defined()) {
      k.stored = in.stored;
    } else if (in.q.has_colwise()) {
      k.qt = in.q.transposed().rowwise_only();
    } else {
      k.q = in.q.rowwise_only();  // Retile: Fprop's operand
    }
  }
  if (k.x.defined() && !s.plan.quantized) k.x.storage().set_category(MemCategory::ActivationCache);
  for (const quant::QTensor* q : {&k.q, &k.qt, &k.stored})
    if (q->defined()) q->set_category(MemCategory::ActivationCache);
  return k;
}

void Linear::forward(const StepContext& ctx, const LinearInput& x, const Tensor& y, const Tensor& offsets) const {
  check_offsets(offsets);
  State& s = state(ctx);
  FP8T_CHECK(y.defined() && y.dim() == 2 && y.size(1) == out_features() && y.dtype() == ctx.dtype,
             "linear {}: y must be a {} [tokens, {}] matrix, got {}", site_, dtype_name(ctx.dtype), out_features(),
             y.defined() ? y.str() : std::string("undefined"));
  if (!s.plan.quantized) {
    FP8T_CHECK(x.x.defined(), "linear {}: forward without an input", site_);
    if (groups_ > 1) {
      ops::gemm_grouped(ctx.exec, ops::GroupedGemmKind::M, x.x, s.weight_plain, true, y, offsets);
    } else {
      ops::gemm(ctx.exec, x.x, false, s.weight_plain, true, y);
    }
  } else {
    FP8T_CHECK(x.q.rowwise.defined(), "linear {}: forward needs the quantized row-wise operand (prepare())", site_);
    const ops::ScaledGemmOptions o{s.plan.fprop.gemm, false};
    if (groups_ > 1) {
      ops::scaled_gemm_grouped(ctx.exec, x.q, s.weight_q, offsets, y, o);
    } else {
      ops::scaled_gemm(ctx.exec, x.q, s.weight_q, y, o);
    }
  }
  if (ctx.health) observe_fprop(ctx, x, y, offsets);
}

Tensor Linear::new_output(const StepContext& ctx, int64_t tokens) const {
  return Tensor::empty({tokens, out_features()}, ctx.dtype, MemCategory::Workspace, ctx.exec.device);
}

Tensor Linear::forward(const StepContext& ctx, const Tensor& x, LinearInput* keep, const Tensor& offsets) const {
  const bool keeping = keep && ctx.training;
  const LinearInput in = prepare(ctx, x, keeping);
  Tensor y = new_output(ctx, x.size(0));
  forward(ctx, in, y, offsets);
  if (keeping) *keep = kept(ctx, in);
  return y;
}

// ---- backward ---------------------------------------------------------------------------------------------------
void Linear::backward(const StepContext& ctx, const Tensor& dy, const LinearInput& x, const Tensor& dx, bool accumulate,
                      const Tensor& offsets) const {
  check_offsets(offsets);
  State& s = state(ctx);
  const recipe::LinearRecipe& plan = s.plan;
  FP8T_CHECK(dy.defined() && dy.dim() == 2 && dy.size(1) == out_features() && dy.dtype() == ctx.dtype,
             "linear {}: dy must be a {} [tokens, {}] matrix, got {}", site_, dtype_name(ctx.dtype), out_features(),
             dy.defined() ? dy.str() : std::string("undefined"));
  FP8T_CHECK(x.defined(), "linear {}: backward without the kept input", site_);
  const ops::GemmOptions acc_dx{.alpha = 1.0, .beta = accumulate ? 1.0 : 0.0};
  if (!plan.quantized) {
    FP8T_CHECK(x.x.defined(), "linear {}: backward needs x", site_);
    if (dx.defined()) {
      if (groups_ > 1) {
        ops::gemm_grouped(ctx.exec, ops::GroupedGemmKind::M, dy, s.weight_plain, false, dx, offsets, acc_dx);
      } else {
        ops::gemm(ctx.exec, dy, false, s.weight_plain, false, dx, acc_dx);
      }
    }
    if (ctx.wgrad_queue != nullptr) {
      // Queued, the plain operands are copied: the caller may write into dy (or x) before the W step runs.
      auto own = [&](const Tensor& t) {
        const Tensor c = Tensor::empty(t.shape(), t.dtype(), MemCategory::Workspace, t.device());
        ops::copy(ctx.exec, t, c);
        return c;
      };
      ctx.wgrad_queue->push_back(
          [this, exec = ctx.exec, dyw = own(dy), xw = own(x.x), offsets] { plain_wgrad(exec, dyw, xw, offsets); });
    } else {
      plain_wgrad(ctx.exec, dy, x.x, offsets);
    }
    if (ctx.health) observe_backward(ctx, dy, nullptr, nullptr, x, nullptr, offsets);
    return;
  }

  // dy: one quantization for both GEMMs where their operands agree.
  const quant::ScaleLayout layout = layout_for(ctx.exec);
  quant::QuantSpec dgrad_spec = plan.dgrad.a, wgrad_spec = plan.wgrad.a;
  if (dgrad_spec.rounding == quant::Rounding::Stochastic || wgrad_spec.rounding == quant::Rounding::Stochastic) {
    dgrad_spec.seed = wgrad_spec.seed = s.next_seed(ctx);
  }
  quant::QTensor dyq, dyt;
  if (ctx.recipe->per_tensor()) {
    dyq = ops::quantize_delayed(ctx.exec, dy, dgrad_spec, *s.history_dy, ops::QuantizeOutputs::Both, layout);
    dyt = dyq.transposed().rowwise_only();
  } else if (plan.dispatched_grad) {
    // The expert received dy as FP8 with power-of-two 1×128 tiles: Dgrad reads them, Wgrad re-tiles them.
    dyq = ops::quantize(ctx.exec, dy, dgrad_spec, ops::QuantizeOutputs::Rowwise, layout);
    dyt = ops::with_colwise(ctx.exec, dyq, MemCategory::Workspace, layout).transposed().rowwise_only();
  } else if (same_spec(dgrad_spec, wgrad_spec)) {
    dyq = ops::quantize(ctx.exec, dy, dgrad_spec, ops::QuantizeOutputs::Both, layout);
    dyt = dyq.transposed().rowwise_only();
  } else {
    dyq = ops::quantize(ctx.exec, dy, dgrad_spec, ops::QuantizeOutputs::Rowwise, layout);
    dyt = ops::quantize(ctx.exec, dy, wgrad_spec, ops::QuantizeOutputs::Colwise, layout).transposed();
  }
  backward_quantized(ctx, dy, dyq, dyt, x, dx, accumulate, offsets);
}

std::optional<Linear::QuantForm> Linear::dy_form(const StepContext& ctx) const {
  const State& s = state(ctx);
  const recipe::LinearRecipe& plan = s.plan;
  if (!plan.quantized || ctx.health || ctx.recipe->per_tensor() || plan.dispatched_grad ||
      !same_spec(plan.dgrad.a, plan.wgrad.a) || plan.dgrad.a.rounding == quant::Rounding::Stochastic)
    return std::nullopt;
  return QuantForm{plan.dgrad.a, ops::QuantizeOutputs::Both, layout_for(ctx.exec)};
}

void Linear::backward(const StepContext& ctx, const quant::QTensor& dyq, const LinearInput& x, const Tensor& dx,
                      bool accumulate, const Tensor& offsets) const {
  check_offsets(offsets);
  const std::optional<QuantForm> form = dy_form(ctx);
  FP8T_CHECK(form.has_value(), "linear {}: this recipe quantizes dy itself (backward from the plain dy)", site_);
  FP8T_CHECK(dyq.cols == out_features() && dyq.groups == 1 && dyq.rowwise.defined() && dyq.has_colwise() &&
                 same_spec(dyq.spec, form->spec),
             "linear {}: a quantized dy must be [tokens, {}] with both payloads under the recipe's Dgrad spec", site_,
             out_features());
  FP8T_CHECK(x.defined(), "linear {}: backward without the kept input", site_);
  backward_quantized(ctx, Tensor(), dyq, dyq.transposed().rowwise_only(), x, dx, accumulate, offsets);
}

void Linear::backward_quantized(const StepContext& ctx, const Tensor& dy, const quant::QTensor& dyq,
                                const quant::QTensor& dyt, const LinearInput& x, const Tensor& dx, bool accumulate,
                                const Tensor& offsets) const {
  State& s = state(ctx);
  const recipe::LinearRecipe& plan = s.plan;
  const quant::ScaleLayout layout = layout_for(ctx.exec);
  const quant::QTensor dy_operand =
      dyq.spec.granularity.block_rows > 1 && !dyq.spec.granularity.per_tensor ? blocks_as_row_tiles(ctx, dyq) : dyq;

  if (dx.defined()) {
    const ops::ScaledGemmOptions o{plan.dgrad.gemm, accumulate};
    const quant::QTensor wt = s.weight_q.transposed();
    if (groups_ > 1) {
      ops::scaled_gemm_grouped(ctx.exec, dy_operand, wt, offsets, dx, o);
    } else {
      ops::scaled_gemm(ctx.exec, dy_operand, wt, dx, o);
    }
  }

  // Wgrad's x operand: xᵀ in 1×128 tiles (128×1 tiles of x along tokens).
  quant::QTensor xt;
  if (x.qt.defined()) {
    xt = x.qt;
  } else if (x.stored.defined()) {
    // With power-of-two scales every stored value is exact in BF16 (8 significant bits: E5M6 has 7, E4M3 4, INT8 7;
    // FP32's exponent range): the same values in half the bytes of FP32.
    const bool bf16_exact = x.stored.spec.scale_mode == quant::ScaleMode::PowerOfTwo;
    const Tensor values = ops::dequantize(ctx.exec, x.stored, bf16_exact ? DType::BF16 : DType::F32);
    xt = ops::quantize(ctx.exec, values, plan.wgrad.b, ops::QuantizeOutputs::Colwise, layout).transposed();
  } else if (x.q.defined()) {
    xt = ops::with_colwise(ctx.exec, x.q, MemCategory::Workspace, layout).transposed().rowwise_only();
  } else {
    FP8T_FAIL("linear {}: backward got a plain x; a quantized recipe keeps what prepare()/recomputed() made", site_);
  }
  if (ctx.wgrad_queue != nullptr) {
    // dyt and xt are this call's own payloads (or the kept input's, never rewritten): queued by reference count.
    ctx.wgrad_queue->push_back([this, exec = ctx.exec, dyt, xt, offsets, gemm = plan.wgrad.gemm] {
      scaled_wgrad(exec, dyt, xt, offsets, gemm);
    });
  } else {
    scaled_wgrad(ctx.exec, dyt, xt, offsets, plan.wgrad.gemm);
  }
  if (ctx.health) observe_backward(ctx, dy, &dyq, &dyt, x, &xt, offsets);
}

void Linear::plain_wgrad(const ExecCtx& exec, const Tensor& dy, const Tensor& x, const Tensor& offsets) const {
  const ops::GemmOptions acc{.alpha = 1.0, .beta = 1.0};
  if (groups_ > 1) {
    ops::gemm_grouped(exec, ops::GroupedGemmKind::K, dy, x, false, grad_, offsets, acc);
  } else {
    ops::gemm(exec, dy, true, x, false, grad_, acc);
  }
}

void Linear::scaled_wgrad(const ExecCtx& exec, const quant::QTensor& dyt, const quant::QTensor& xt,
                          const Tensor& offsets, const quant::GemmConfig& gemm) const {
  const ops::ScaledGemmOptions o{gemm, true};
  if (groups_ > 1) {
    ops::scaled_gemm_grouped_k(exec, dyt, xt, offsets, grad_.view({groups_, out_features(), in_features()}), o);
  } else {
    ops::scaled_gemm(exec, dyt, xt, grad_, o);
  }
}

// ---- numerics health (sampled steps) ------------------------------------------------------------------------------
void Linear::observe_fprop(const StepContext& ctx, const LinearInput& x, const Tensor& y, const Tensor& offsets) const {
  const State& s = *state_;
  FP8T_CHECK(x.x.defined(), "linear {}: a sampled step needs the unquantized input", site_);
  const int64_t tokens = x.x.size(0);
  const Tensor ref = f32_matrix(ctx, tokens, out_features());
  if (groups_ > 1) {
    ops::gemm_grouped(ctx.exec, ops::GroupedGemmKind::M, x.x, weight_, true, ref, offsets);
  } else {
    ops::gemm(ctx.exec, x.x, false, weight_, true, ref);
  }
  const recipe::GemmAccuracy acc = recipe::measure_accuracy(ctx.exec, y, ref);
  if (!s.plan.quantized) {
    ctx.health->record(site_, GemmKind::Fprop, acc);
    return;
  }
  ctx.health->record(site_, GemmKind::Fprop, recipe::measure_health(ctx.exec, x.x, x.q),
                     recipe::measure_health(ctx.exec, weight_, s.weight_q), acc);
}

void Linear::observe_backward(const StepContext& ctx, const Tensor& dy, const quant::QTensor* dyq,
                              const quant::QTensor* dyt, const LinearInput& x, const quant::QTensor* xt,
                              const Tensor& offsets) const {
  const State& s = *state_;
  const int64_t tokens = dy.size(0), in = in_features(), out = out_features();
  const bool grouped = groups_ > 1;
  // Dgrad: the recipe's FP32 product (before any accumulation or rounding into dx) against dy·W in FP32.
  {
    const Tensor y = Tensor::zeros({tokens, in}, DType::F32, MemCategory::Workspace, ctx.exec.device);
    const Tensor ref = Tensor::zeros({tokens, in}, DType::F32, MemCategory::Workspace, ctx.exec.device);
    if (grouped) {
      ops::gemm_grouped(ctx.exec, ops::GroupedGemmKind::M, dy, weight_, false, ref, offsets);
    } else {
      ops::gemm(ctx.exec, dy, false, weight_, false, ref);
    }
    if (!s.plan.quantized) {
      if (grouped) {
        ops::gemm_grouped(ctx.exec, ops::GroupedGemmKind::M, dy, s.weight_plain, false, y, offsets);
      } else {
        ops::gemm(ctx.exec, dy, false, s.weight_plain, false, y);
      }
      ctx.health->record(site_, GemmKind::Dgrad, recipe::measure_accuracy(ctx.exec, y, ref));
    } else {
      const quant::QTensor a = dyq->spec.granularity.block_rows > 1 && !dyq->spec.granularity.per_tensor
                                   ? blocks_as_row_tiles(ctx, *dyq)
                                   : *dyq;
      const ops::ScaledGemmOptions o{s.plan.dgrad.gemm, false};
      if (grouped) {
        ops::scaled_gemm_grouped(ctx.exec, a, s.weight_q.transposed(), offsets, y, o);
      } else {
        ops::scaled_gemm(ctx.exec, a, s.weight_q.transposed(), y, o);
      }
      ctx.health->record(site_, GemmKind::Dgrad, recipe::measure_health(ctx.exec, dy, *dyq),
                         recipe::measure_health(ctx.exec, weight_, s.weight_q),
                         recipe::measure_accuracy(ctx.exec, y, ref));
    }
  }
  // Wgrad: dyᵀ·x with x as backward holds it (the unquantized x: a sampled step keeps it).
  {
    FP8T_CHECK(x.x.defined(), "linear {}: a sampled step keeps the unquantized input", site_);
    const Tensor y = Tensor::zeros({groups_ * out, in}, DType::F32, MemCategory::Workspace, ctx.exec.device);
    const Tensor ref = Tensor::zeros({groups_ * out, in}, DType::F32, MemCategory::Workspace, ctx.exec.device);
    if (grouped) {
      ops::gemm_grouped(ctx.exec, ops::GroupedGemmKind::K, dy, x.x, false, ref, offsets);
    } else {
      ops::gemm(ctx.exec, dy, true, x.x, false, ref);
    }
    if (!s.plan.quantized) {
      ctx.health->record(site_, GemmKind::Wgrad, recipe::measure_accuracy(ctx.exec, ref, ref));  // the same product
    } else {
      const ops::ScaledGemmOptions o{s.plan.wgrad.gemm, false};
      if (grouped) {
        ops::scaled_gemm_grouped_k(ctx.exec, *dyt, *xt, offsets, y.view({groups_, out, in}), o);
      } else {
        ops::scaled_gemm(ctx.exec, *dyt, *xt, y, o);
      }
      ctx.health->record(site_, GemmKind::Wgrad, recipe::measure_health(ctx.exec, dy, *dyt, true),
                         recipe::measure_health(ctx.exec, x.x, *xt, true), recipe::measure_accuracy(ctx.exec, y, ref));
    }
  }
}

}  // namespace fp8train::model
