// DeepSeekTrainable (see model_adapter.h).
#include "train/model_adapter.h"

#include <cmath>

#include "common/error.h"
#include "model/model.h"
#include "recipe/health.h"
#include "recipe/recipe.h"
#include "train/pipeline_model.h"

namespace fp8train::train {
namespace {

Tensor token_tensor(const Token* tokens, int64_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(tokens[i]);
  return Tensor::from_vector(v, {count});
}

std::vector<std::vector<int64_t>> pending_loads(const model::DeepSeekV3Model& m) {
  std::vector<std::vector<int64_t>> out;
  for (const model::ExpertLoad& l : m.expert_loads()) out.push_back(l.load);
  return out;
}

// Tokens each routed expert of each MoE layer received between two pending_loads() snapshots.
std::vector<std::vector<double>> routed_since(const std::vector<std::vector<int64_t>>& before,
                                              const std::vector<std::vector<int64_t>>& after) {
  std::vector<std::vector<double>> out;
  for (size_t layer = 0; layer < after.size(); ++layer) {
    std::vector<double> tokens(after[layer].size());
    for (size_t e = 0; e < tokens.size(); ++e)
      tokens[e] = static_cast<double>(after[layer][e] - (layer < before.size() ? before[layer][e] : 0));
    out.push_back(std::move(tokens));
  }
  return out;
}

}  // namespace

DeepSeekTrainable::DeepSeekTrainable(const model::ModelConfig& config, uint64_t seed, const std::string& recipe, int ep,
                                     int ep_rank) {
  model::ModelOptions options;
  options.seed = seed;
  options.recipe = recipe;
  options.ep = ep;
  options.ep_rank = ep_rank;
  model_ = std::make_unique<model::DeepSeekV3Model>(config, options);
  // Parameters and gradients into their arenas before anything looks at them.
  model::ParameterSet& ps = model_->parameters();
  ps.finalize();
  params_ = {ps.value_arena(), ps.grad_arena(), ps.decay_range(), ps.no_decay_range(), ps.expert_range(), ep};
  params_.validate();
}

DeepSeekTrainable::~DeepSeekTrainable() = default;

std::vector<NamedTensor> DeepSeekTrainable::state() {
  std::vector<NamedTensor> out;
  for (model::Parameter* p : model_->parameters().buffers()) out.push_back({p->name, p->value});
  return out;
}

std::vector<NamedTensor> DeepSeekTrainable::recipe_state() {
  std::vector<NamedTensor> out;
  for (auto& [name, t] : model_->recipe_state()) out.push_back({name, t});
  return out;
}

int64_t DeepSeekTrainable::vocab_size() const { return model_->config().vocab_size; }

int64_t DeepSeekTrainable::parameter_count() const { return params_.model_elements(); }

MicroBatchResult DeepSeekTrainable::forward_backward(const Token* inputs, const Token* targets, int64_t batch,
                                                     int64_t seq_len, double grad_scale) {
  const int64_t n = batch * seq_len;
  const auto before = pending_loads(*model_);
  const model::LossBreakdown l =
      model_->forward_backward(token_tensor(inputs, n), token_tensor(targets, n), batch, grad_scale);
  const auto after = pending_loads(*model_);
  MicroBatchResult r;
  r.loss = {l.total, l.main, l.mtp, l.balance, l.distill, l.distill_kl};
  r.expert_tokens = routed_since(before, after);
  return r;
}

void DeepSeekTrainable::begin_step(int64_t step, bool sample_health) { model_->begin_step(step, sample_health); }

// Per-GEMM numerics health since begin_step: one object per (Linear, GEMM) with the counters of both operands
// (quantized recipes only) and the GEMM's accuracy against its FP32 reference (every recipe; recipe/health.h):
// err_sq = Σ (Y − R)², ref_sq = Σ R² over the calls, rel_error = sqrt(err_sq / ref_sq), row_rel_error = the mean
// over the `rows` output rows of ‖Y_r − R_r‖ / ‖R_r‖.
nlohmann::json DeepSeekTrainable::take_health() {
  const std::vector<recipe::GemmHealth> records = model_->take_health();
  if (records.empty()) return nullptr;
  auto operand = [](const recipe::OperandHealth& h) {
    return nlohmann::json{{"elements", h.elements},   {"nonzero", h.nonzero},     {"saturated", h.saturated},
                          {"underflow", h.underflow}, {"scale_min", h.scale_min}, {"scale_max", h.scale_max}};
  };
  nlohmann::json out = nlohmann::json::array();
  for (const recipe::GemmHealth& g : records) {
    const double r = g.accuracy.relative_error();
    const nlohmann::json rel = std::isfinite(r) ? nlohmann::json(r) : nlohmann::json(nullptr);
    nlohmann::json j{{"linear", g.linear},
                     {"gemm", recipe::gemm_kind_name(g.kind)},
                     {"calls", g.calls},
                     {"rel_error", rel},
                     {"err_sq", g.accuracy.error_sq},
                     {"ref_sq", g.accuracy.reference_sq},
                     {"row_rel_error", g.accuracy.row_relative_error()},
                     {"rows", g.accuracy.rows}};
    if (g.quantized) {
      j["a"] = operand(g.a);
      j["b"] = operand(g.b);
    }
    out.push_back(std::move(j));
  }
  return out;
}

int64_t DeepSeekTrainable::compute_weight_bytes() { return model_->compute_weight_bytes(); }

std::vector<std::string> DeepSeekTrainable::moe_layer_names() {
  std::vector<std::string> names;
  for (const model::ExpertLoad& l : model_->expert_loads()) names.push_back(l.layer);
  return names;
}

void DeepSeekTrainable::set_scheduled_values(double mtp_lambda, double bias_update_speed) {
  model_->set_mtp_lambda(mtp_lambda);
  model_->set_bias_update_speed(bias_update_speed);
}

void DeepSeekTrainable::after_step() {
  model_->update_router_biases();
  model_->mark_parameters_updated();  // the GEMMs' compute copies of the weights refresh at the next forward
}

void DeepSeekTrainable::parameters_changed() { model_->mark_parameters_updated(); }

void DeepSeekTrainable::discard_step() { model_->clear_expert_loads(); }

void DeepSeekTrainable::set_step_expert_tokens(const std::vector<std::vector<double>>& tokens) {
  std::vector<std::vector<int64_t>> loads;
  for (const std::vector<double>& layer : tokens) {
    std::vector<int64_t> l;
    for (double x : layer) l.push_back(static_cast<int64_t>(std::llround(x)));  // counts: exact in a double
    loads.push_back(std::move(l));
  }
  model_->set_expert_loads(loads);
}

void DeepSeekTrainable::set_expert_parallel(dist::Communicator* ep) {
  for (model::MoE* m : model_->moe_layers()) m->set_expert_parallel(ep);
}

MicroBatchResult DeepSeekTrainable::pipeline_step(const dist::PipeSchedule& schedule, dist::Communicator& pp,
                                                  const std::vector<PipelineMicroBatch>& micro_batches,
                                                  int64_t seq_len) {
  FP8T_CHECK(static_cast<size_t>(schedule.micro_batches) == micro_batches.size() && schedule.ranks == pp.size(),
             "a pipeline schedule for {} ranks and {} micro-batches cannot run {} micro-batches on {} ranks",
             schedule.ranks, schedule.micro_batches, micro_batches.size(), pp.size());
  std::vector<ModelStages::MicroBatch> batches;
  for (const PipelineMicroBatch& b : micro_batches) {
    const int64_t n = b.rows * seq_len;
    batches.push_back({token_tensor(b.inputs.data(), n), token_tensor(b.targets.data(), n), b.rows, b.scale});
  }
  const auto before = pending_loads(*model_);
  ModelStages stages(*model_, pp.rank(), pp.size(), std::move(batches), 1.0);
  const dist::PipeTiming timing = dist::run_pipeline(schedule, pp, stages, ExecCtx::on(parameters().values.device()));
  const auto after = pending_loads(*model_);
  MicroBatchResult r;
  r.pipe = timing;
  for (size_t mb = 0; mb < micro_batches.size(); ++mb) {
    const model::LossBreakdown& l = stages.losses()[mb];
    const double s = micro_batches[mb].scale;
    r.loss.total += s * l.total;
    r.loss.main += s * l.main;
    r.loss.mtp += s * l.mtp;
    r.loss.balance += s * l.balance;
  }
  r.expert_tokens = routed_since(before, after);
  return r;
}

double DeepSeekTrainable::eval_loss_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len) {
  const int64_t n = batch * seq_len;
  const model::LossBreakdown l = model_->forward(token_tensor(inputs, n), token_tensor(targets, n), batch, false);
  return l.main * static_cast<double>(l.main_tokens);
}

std::vector<float> DeepSeekTrainable::next_token_logits(const Token* inputs, int64_t batch, int64_t seq_len) {
  return model_->last_logits(token_tensor(inputs, batch * seq_len), batch).to_vector<float>();
}

TopKTargets DeepSeekTrainable::top_k(const Token* inputs, int64_t batch, int64_t seq_len, int64_t k) {
  model::TopK t = model_->top_k(token_tensor(inputs, batch * seq_len), batch, k);
  return {t.k, std::move(t.ids), std::move(t.probs)};
}

void DeepSeekTrainable::set_distill_targets(const TopKTargets* targets, double weight) {
  if (!targets) {
    model_->set_distill_targets(nullptr);
    distill_ = {};
    return;
  }
  const int64_t rows = targets->k > 0 ? static_cast<int64_t>(targets->ids.size()) / targets->k : 0;
  FP8T_CHECK(targets->k > 0 && targets->ids.size() == static_cast<size_t>(rows * targets->k) &&
                 targets->probs.size() == targets->ids.size(),
             "distillation targets: {} ids and {} probabilities do not form rows of k = {}", targets->ids.size(),
             targets->probs.size(), targets->k);
  distill_.ids = Tensor::from_vector(targets->ids, {rows, targets->k});
  distill_.probs = Tensor::from_vector(targets->probs, {rows, targets->k});
  distill_.weight = weight;
  model_->set_distill_targets(&distill_);
}

double DeepSeekTrainable::eval_distill_kl_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len,
                                              const TopKTargets& teacher) {
  set_distill_targets(&teacher, 0.0);
  const int64_t n = batch * seq_len;
  model::LossBreakdown l;
  try {
    l = model_->forward(token_tensor(inputs, n), token_tensor(targets, n), batch, false);
  } catch (...) {
    set_distill_targets(nullptr, 0.0);
    throw;
  }
  set_distill_targets(nullptr, 0.0);
  return l.distill_kl * static_cast<double>(l.main_tokens);
}

}  // namespace fp8train::train
