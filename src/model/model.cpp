// DeepSeekV3Model: forward, backward, fused head loss, MTP and router-bias updates (see model.h).
#include "model/model.h"

#include <algorithm>
#include <cmath>

#include "ops/cross_entropy.h"
#include "ops/distill.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"

namespace fp8train::model {

double ExpertLoad::max_over_mean() const {
  int64_t total = 0, mx = 0;
  for (int64_t l : load) {
    total += l;
    mx = std::max(mx, l);
  }
  return total > 0 ? static_cast<double>(mx) * static_cast<double>(load.size()) / static_cast<double>(total) : 0.0;
}

// MTP module k: h'^k = M_k·[RMSNorm(h^{k−1}); RMSNorm(Emb(t_{i+k}))], h^k = Block_k(h'^k), then its own RMSNorm
// before the shared head.
struct DeepSeekV3Model::Mtp {
  std::string prefix;
  RMSNorm hnorm, enorm, norm;
  Linear eh_proj;  // M_k: [d, 2d]
  std::unique_ptr<Block> block;
  struct State {
    RMSNorm::State hnorm, enorm, norm;
    LinearInput cat;  // [RMSNorm(h); RMSNorm(emb)]: [tokens, 2d], the input of M_k as M_k keeps it
    Block::State block;
    Tensor ids;    // Emb's tokens t_{i+k}
    Tensor dnorm;  // ∂L/∂(norm output), produced by the fused head loss during forward
  };
};

DeepSeekV3Model::DeepSeekV3Model(const ModelConfig& config, const ModelOptions& options)
    : config_(config), dtype_(options.dtype), recipe_(recipe::parse_recipe(options.recipe)) {
  config_.validate();
  FP8T_CHECK(is_floating(dtype_), "the model's master weights are f32 or f64, not {}", dtype_name(dtype_));
  FP8T_CHECK(dtype_ == DType::F32 || recipe_.kind == recipe::RecipeKind::Fp32,
             "an f64 model (gradient checks) runs the fp32 recipe only, not '{}'", recipe_.spec);
  compute_dtype_ = dtype_ == DType::F64 ? DType::F64 : recipe_.compute_dtype();
  store_ = std::make_unique<ActivationStore>(recipe_);
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  Parameter& emb = params_.add("embed.weight", {c.vocab_size, d}, dtype_, Init::Normal);
  embed_ = emb.value;
  embed_grad_ = emb.grad;
  for (int64_t i = 0; i < c.n_layers; ++i)
    layers_.push_back(std::make_unique<Block>(params_, "layers." + std::to_string(i), c, dtype_, static_cast<int>(i),
                                              c.is_moe_layer(i), options.ep, options.ep_rank));
  norm_ = RMSNorm(params_, "norm", d, c.rms_norm_eps, dtype_);
  if (c.tie_embeddings) {
    head_ = embed_;
    head_grad_ = embed_grad_;
  } else {
    Parameter& head = params_.add("head.weight", {c.vocab_size, d}, dtype_, Init::Normal);
    head_ = head.value;
    head_grad_ = head.grad;
  }
  const bool mtp_moe = c.n_dense_layers < c.n_layers;  // MTP blocks use MoE when the model has MoE layers
  for (int64_t k = 0; k < c.mtp_depth; ++k) {
    auto m = std::make_unique<Mtp>();
    m->prefix = "mtp." + std::to_string(k);
    const int layer = static_cast<int>(c.n_layers + k);
    m->enorm = RMSNorm(params_, m->prefix + ".enorm", d, c.rms_norm_eps, dtype_);
    m->hnorm = RMSNorm(params_, m->prefix + ".hnorm", d, c.rms_norm_eps, dtype_);
    m->eh_proj = Linear(params_, m->prefix + ".eh_proj", 2 * d, d, recipe::LinearRole::MtpProj, dtype_, layer);
    m->block =
        std::make_unique<Block>(params_, m->prefix + ".block", c, dtype_, layer, mtp_moe, options.ep, options.ep_rank);
    m->norm = RMSNorm(params_, m->prefix + ".norm", d, c.rms_norm_eps, dtype_);
    mtp_.push_back(std::move(m));
  }
  params_.initialize(options.seed, c.init_std);
  for (const auto& b : layers_) b->collect_linears(linears_);
  for (const auto& m : mtp_) {
    linears_.push_back(&m->eh_proj);
    m->block->collect_linears(linears_);
  }
}

DeepSeekV3Model::~DeepSeekV3Model() = default;

void DeepSeekV3Model::begin_step(int64_t step, bool sample_health) {
  step_ = step;
  sample_health_ = sample_health;
}

int64_t DeepSeekV3Model::compute_weight_bytes() const {
  int64_t total = head_compute_.defined() ? static_cast<int64_t>(head_compute_.nbytes()) : 0;
  for (const Linear* l : linears_) total += l->compute_weight_bytes();
  return total;
}

std::vector<std::pair<std::string, Tensor>> DeepSeekV3Model::recipe_state() {
  std::vector<std::pair<std::string, Tensor>> out;
  if (!recipe_.per_tensor()) return out;
  const StepContext ctx = make_context(params_.trainable().front()->value.device(), 1, 1, true, 1.0);
  for (const Linear* l : linears_) l->delayed_scaling_state(ctx, out);
  return out;
}

StepContext DeepSeekV3Model::make_context(Device device, int64_t batch, int64_t seq, bool training, double grad_scale) {
  StepContext ctx;
  ctx.exec = ExecCtx::on(device);
  ctx.exec.profile = profile_;
  ctx.batch = batch;
  ctx.seq = seq;
  ctx.training = training;
  ctx.recipe = &recipe_;
  ctx.store = store_.get();
  ctx.health = training && sample_health_ ? &health_ : nullptr;
  ctx.step = step_;
  ctx.grad_scale = grad_scale;
  ctx.dtype = compute_dtype_;
  return ctx;
}

const Tensor& DeepSeekV3Model::head_compute(const StepContext& ctx) {
  if (ctx.dtype == head_.dtype()) return head_;
  if (head_version_ != params_.version()) {
    head_compute_ = Tensor::empty(head_.shape(), ctx.dtype, MemCategory::ComputeWeights, ctx.exec.device);
    ops::copy(ctx.exec, head_, head_compute_);
    head_version_ = params_.version();
  }
  return head_compute_;
}
void DeepSeekV3Model::set_mtp_lambda(double lambda) {
  FP8T_CHECK(lambda >= 0, "mtp_lambda must be >= 0, got {}", lambda);
  config_.mtp_lambda = lambda;
}
void DeepSeekV3Model::set_bias_update_speed(double gamma) {
  FP8T_CHECK(gamma >= 0, "bias_update_speed must be >= 0, got {}", gamma);
  config_.bias_update_speed = gamma;
}
void DeepSeekV3Model::set_seq_aux_loss_alpha(double alpha) {
  FP8T_CHECK(alpha >= 0, "seq_aux_loss_alpha must be >= 0, got {}", alpha);
  config_.seq_aux_loss_alpha = alpha;
  for (MoE* m : moe_layers()) m->set_seq_aux_loss_alpha(alpha);
}

std::vector<MoE*> DeepSeekV3Model::moe_layers() {
  std::vector<MoE*> out;
  for (auto& b : layers_)
    if (b->is_moe()) out.push_back(b->moe());
  for (auto& m : mtp_)
    if (m->block->is_moe()) out.push_back(m->block->moe());
  return out;
}

std::vector<ExpertLoad> DeepSeekV3Model::expert_loads() const {
  std::vector<ExpertLoad> out;
  auto add = [&](const Block& b) {
    if (b.is_moe()) out.push_back({b.moe()->name(), b.moe()->pending_load()});
  };
  for (const auto& b : layers_) add(*b);
  for (const auto& m : mtp_) add(*m->block);
  return out;
}

std::vector<ExpertLoad> DeepSeekV3Model::last_expert_loads() const {
  std::vector<ExpertLoad> out;
  auto add = [&](const Block& b) {
    if (b.is_moe()) out.push_back({b.moe()->name(), b.moe()->last_load()});
  };
  for (const auto& b : layers_) add(*b);
  for (const auto& m : mtp_) add(*m->block);
  return out;
}

void DeepSeekV3Model::update_router_biases() {
  for (MoE* m : moe_layers()) m->update_bias(config_.bias_update_speed);
}

void DeepSeekV3Model::set_expert_loads(const std::vector<std::vector<int64_t>>& loads) {
  const std::vector<MoE*> layers = moe_layers();
  FP8T_CHECK(loads.size() == layers.size(), "expert loads given for {} MoE layers, the model has {}", loads.size(),
             layers.size());
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->set_pending_load(loads[i]);
}

void DeepSeekV3Model::clear_expert_loads() {
  for (MoE* m : moe_layers()) m->clear_load();
}

std::pair<double, int64_t> DeepSeekV3Model::head_loss(const StepContext& ctx, const Tensor& h, const Tensor& targets,
                                                      double scale, const Tensor& dh, const DistillTargets* distill,
                                                      double* kl_sum) {
  const int64_t n = h.size(0), vocab = config_.vocab_size;
  // Rows per chunk: at most ~4M FP32 logits live at once on the CPU, ~64M (256 MiB) on a GPU, whose GEMMs want
  // many rows per call; whatever the vocabulary, the whole batch's logits are never materialized.
  const int64_t budget = ctx.exec.device.is_cpu() ? (int64_t{1} << 22) : (int64_t{1} << 26);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, budget / vocab));
  double loss = 0;
  int64_t count = 0;
  const Tensor& head = head_compute(ctx);
  // With a narrower compute dtype (BF16), ∂L/∂logits is an activation gradient like any other: rounded once to the
  // compute dtype, so the head's Dgrad and Wgrad are compute-dtype GEMMs (the loss itself is computed from the
  // FP32 logits).
  const bool narrow_grad = dh.defined() && ctx.dtype != fp8train::compute_dtype(ctx.dtype);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const Tensor hc = h.rows(r0, r1);
    // [rows, vocab] FP32 logits (the head and the loss stay high precision)
    const Tensor logits =
        ops::matmul(ctx.exec, hc, false, head, true, MemCategory::Workspace, {}, fp8train::compute_dtype(ctx.dtype));
    if (distill) {
      const ops::DistillResult dr =
          ops::cross_entropy_distill(ctx.exec, logits, targets.narrow(0, r0, r1 - r0), distill->ids.rows(r0, r1),
                                     distill->probs.rows(r0, r1), distill->weight, dh.defined(), scale);
      loss += dr.ce_sum;
      count += dr.count;
      if (kl_sum) *kl_sum += dr.kl_sum;
    } else {
      const ops::CrossEntropyResult ce =
          ops::cross_entropy_fused(ctx.exec, logits, targets.narrow(0, r0, r1 - r0), dh.defined(), scale);
      loss += ce.loss_sum;
      count += ce.count;
    }
    if (dh.defined()) {  // logits now hold ∂(scale·CE)/∂logits
      Tensor dlogits = logits;
      if (narrow_grad) {
        dlogits = Tensor::empty(logits.shape(), ctx.dtype, MemCategory::Workspace, ctx.exec.device);
        ops::copy(ctx.exec, logits, dlogits);
      }
      ops::gemm(ctx.exec, dlogits, false, head, false, dh.rows(r0, r1));
      ops::gemm(ctx.exec, dlogits, true, hc, false, head_grad_, {.beta = 1.0});
    }
  }
  return {loss, count};
}

// What the tail (final norm, fused head loss, MTP) keeps between its forward and its backward.
struct DeepSeekV3Model::Tail {
  RMSNorm::State final_norm;
  Tensor dhn;  // ∂L/∂(final norm output), written by the fused head loss during forward
  std::vector<Mtp::State> mtp;
};

void DeepSeekV3Model::check_batch(const Tensor& inputs, const Tensor& targets, int64_t batch) const {
  FP8T_CHECK(inputs.defined() && inputs.dtype() == DType::I32 && inputs.dim() == 1 && inputs.is_contiguous(),
             "model inputs must be a contiguous i32 [batch·seq] tensor, got {}", inputs.str());
  FP8T_CHECK(targets.defined() && targets.dtype() == DType::I32 && targets.numel() == inputs.numel() &&
                 targets.is_contiguous(),
             "model targets must be a contiguous i32 tensor like the inputs ({}), got {}", inputs.str(), targets.str());
  FP8T_CHECK(batch > 0 && inputs.numel() % batch == 0 && inputs.numel() > 0, "{} tokens are not {} whole sequences",
             inputs.numel(), batch);
}

LossBreakdown DeepSeekV3Model::run(const Tensor& inputs, const Tensor& targets, int64_t batch, bool training,
                                   bool include_mtp, double grad_scale) {
  check_batch(inputs, targets, batch);
  const int64_t n = inputs.numel(), seq = n / batch, d = config_.hidden_size;
  const Device dev = inputs.device();
  const StepContext ctx = make_context(dev, batch, seq, training, grad_scale);

  LossBreakdown out;
  double balance = 0;
  // embedding and the main blocks
  Tensor x = Tensor::empty({n, d}, ctx.dtype, MemCategory::Workspace, dev);
  ops::embedding_forward(ctx.exec, inputs, embed_, x);
  std::vector<Block::State> states(training ? layers_.size() : 0);
  for (size_t i = 0; i < layers_.size(); ++i)
    x = layers_[i]->forward(ctx, x, training ? &states[i] : nullptr, &balance);
  Tail tail;
  tail_forward(ctx, x, inputs, targets, batch, include_mtp, tail, out, balance);
  out.balance = balance;
  out.total = out.main + out.distill + out.mtp + out.balance;
  if (!training) return out;

  // backward: the tail (MTP modules in reverse, the final norm), then the blocks and the embedding. What each part
  // kept is released as soon as its backward is done, so the step's memory peak is the first block's backward
  // with a full activation cache, not a later block's larger workspace on top of every block's cache.
  const Tensor dx = tail_backward(ctx, tail, n);
  tail = Tail();
  const int n_layers = static_cast<int>(layers_.size());
  if (grad_ready_) grad_ready_(0);
  for (size_t i = layers_.size(); i-- > 0;) {
    layers_[i]->backward(ctx, states[i], dx);
    states[i] = Block::State();
    if (grad_ready_) grad_ready_(n_layers - static_cast<int>(i));
  }
  ops::embedding_backward(ctx.exec, inputs, dx, embed_grad_);
  if (grad_ready_) grad_ready_(n_layers + 1);
  return out;
}

int DeepSeekV3Model::grad_ready_group(std::string_view name) const {
  const int n_layers = static_cast<int>(layers_.size());
  // "layers.<i>.…": block i; the embedding (which the MTP modules' backward also adds to) last; the rest (head,
  // final norm, MTP modules) is final after the tail's backward.
  const std::string_view prefix = "layers.";
  if (name.starts_with(prefix)) {
    const size_t dot = name.find('.', prefix.size());
    const std::string index(name.substr(prefix.size(), dot - prefix.size()));
    FP8T_CHECK(!index.empty() && index.find_first_not_of("0123456789") == std::string::npos,
               "grad_ready_group: cannot read the block index of parameter '{}'", name);
    const int i = std::stoi(index);
    FP8T_CHECK(i < n_layers, "grad_ready_group: parameter '{}' names block {} of {}", name, i, n_layers);
    return n_layers - i;
  }
  if (name.starts_with("embed.")) return n_layers + 1;
  return 0;
}

void DeepSeekV3Model::tail_forward(const StepContext& ctx, const Tensor& h_main, const Tensor& inputs,
                                   const Tensor& targets, int64_t batch, bool include_mtp, Tail& tail,
                                   LossBreakdown& out, double& balance) {
  const ModelConfig& c = config_;
  const int64_t n = inputs.numel(), seq = n / batch, d = c.hidden_size;
  const Device dev = inputs.device();
  const DType dt = ctx.dtype;
  const bool training = ctx.training;
  const double grad_scale = ctx.grad_scale;
  // h_main is h^0 for MTP: the last block's output, before the final norm
  const Tensor hn = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
  norm_.forward(ctx, h_main, hn, training ? &tail.final_norm : nullptr, false);
  // main loss: mean next-token cross-entropy, fused with the head
  const std::vector<int32_t> tg = targets.to_vector<int32_t>();
  const int64_t main_count = std::count_if(tg.begin(), tg.end(), [](int32_t t) { return t >= 0; });
  tail.dhn = training ? Tensor::empty({n, d}, dt, MemCategory::Workspace, dev) : Tensor();
  double kl_sum = 0;
  if (distill_)
    FP8T_CHECK(distill_->ids.dim() == 2 && distill_->ids.size(0) == n,
               "distillation targets are for {} positions, the batch has {}", distill_->ids.size(0), n);
  const auto [main_sum, counted] =
      head_loss(ctx, hn, targets, grad_scale / std::max<int64_t>(main_count, 1), tail.dhn, distill_, &kl_sum);
  out.main = counted > 0 ? main_sum / static_cast<double>(counted) : 0.0;
  out.main_tokens = counted;
  if (distill_ && counted > 0) {
    out.distill_kl = kl_sum / static_cast<double>(counted);
    out.distill = distill_->weight * out.distill_kl;
  }

  // MTP: module k predicts t_{i+k+1} from h^{k−1}_i and Emb(t_{i+k})
  tail.mtp.assign(include_mtp ? mtp_.size() : 0, Mtp::State{});
  if (include_mtp && !mtp_.empty()) {
    const std::vector<int32_t> in = inputs.to_vector<int32_t>();
    const double weight = c.mtp_lambda / static_cast<double>(mtp_.size());  // λ/D
    Tensor h_prev = h_main;
    for (size_t k = 0; k < mtp_.size(); ++k) {
      Mtp& m = *mtp_[k];
      Mtp::State& st = tail.mtp[k];
      const int64_t depth = static_cast<int64_t>(k) + 1;
      std::vector<int32_t> ids(static_cast<size_t>(n)), tk(static_cast<size_t>(n));
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < seq; ++i) {
          const bool inside = i + depth < seq;  // t_{i+k} is an input of this window
          ids[b * seq + i] = inside ? in[b * seq + i + depth] : 0;
          tk[b * seq + i] = inside ? tg[b * seq + i + depth] : -1;
        }
      st.ids = Tensor::from_vector(ids, {n}, MemCategory::Workspace, dev);
      const Tensor targets_k = Tensor::from_vector(tk, {n}, MemCategory::Workspace, dev);
      const Tensor emb = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
      ops::embedding_forward(ctx.exec, st.ids, embed_, emb);
      const Tensor cat = Tensor::empty({n, 2 * d}, dt, MemCategory::Workspace, dev);
      m.hnorm.forward(ctx, h_prev, cat.cols(0, d), training ? &st.hnorm : nullptr, false);
      m.enorm.forward(ctx, emb, cat.cols(d, 2 * d), training ? &st.enorm : nullptr, false);
      // h'^k = M_k·[RMSNorm(h); RMSNorm(emb)]
      const Tensor h_proj = m.eh_proj.forward(ctx, cat, training ? &st.cat : nullptr);
      const Tensor hk = m.block->forward(ctx, h_proj, training ? &st.block : nullptr, &balance);
      const Tensor on = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
      m.norm.forward(ctx, hk, on, training ? &st.norm : nullptr, false);
      const int64_t count_k = std::count_if(tk.begin(), tk.end(), [](int32_t t) { return t >= 0; });
      if (training) st.dnorm = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
      const auto [sum_k, counted_k] =
          head_loss(ctx, on, targets_k, grad_scale * weight / std::max<int64_t>(count_k, 1), st.dnorm);
      const double lk = counted_k > 0 ? sum_k / static_cast<double>(counted_k) : 0.0;  // L^k
      out.mtp_per_depth.push_back(lk);
      out.mtp += weight * lk;  // L_MTP = λ/D·Σ_k L^k
      h_prev = hk;
    }
  }
}

Tensor DeepSeekV3Model::tail_backward(const StepContext& ctx, const Tail& tail, int64_t n) {
  const int64_t d = config_.hidden_size;
  const Device dev = ctx.exec.device;
  const DType dt = ctx.dtype;
  // MTP modules in reverse, then the final norm
  Tensor dh_next;  // ∂L/∂h^k from module k+1's hnorm
  for (size_t kk = tail.mtp.size(); kk-- > 0;) {
    Mtp& m = *mtp_[kk];
    const Mtp::State& st = tail.mtp[kk];
    const Tensor dhk = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
    m.norm.backward(ctx, st.norm, st.dnorm, dhk, false);
    if (dh_next.defined()) ops::axpy(ctx.exec, 1.0, dh_next, dhk);
    m.block->backward(ctx, st.block, dhk);  // now ∂L/∂h'^k
    const Tensor dcat = Tensor::empty({n, 2 * d}, dt, MemCategory::Workspace, dev);
    m.eh_proj.backward(ctx, dhk, st.cat, dcat, false);
    const Tensor demb = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
    m.enorm.backward(ctx, st.enorm, dcat.cols(d, 2 * d), demb, false);
    ops::embedding_backward(ctx.exec, st.ids, demb, embed_grad_);
    const Tensor dprev = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
    m.hnorm.backward(ctx, st.hnorm, dcat.cols(0, d), dprev, false);
    dh_next = dprev;
  }
  const Tensor dx = Tensor::empty({n, d}, dt, MemCategory::Workspace, dev);
  norm_.backward(ctx, tail.final_norm, tail.dhn, dx, false);
  if (dh_next.defined()) ops::axpy(ctx.exec, 1.0, dh_next, dx);
  return dx;
}

struct DeepSeekV3Model::StageRun::Impl {
  int stage = 0, stages = 1;
  StepContext ctx;
  Tensor inputs;                     // stage 0: the embedding's backward reads the tokens
  std::vector<Block::State> states;  // the stage's blocks
  Tail tail;                         // the last stage
  int64_t rows = 0;
};

DeepSeekV3Model::StageRun::StageRun() = default;
DeepSeekV3Model::StageRun::~StageRun() = default;
DeepSeekV3Model::StageRun::StageRun(StageRun&&) noexcept = default;
DeepSeekV3Model::StageRun& DeepSeekV3Model::StageRun::operator=(StageRun&&) noexcept = default;

std::pair<int, int> DeepSeekV3Model::stage_blocks(int stage, int stages) const {
  const int layers = static_cast<int>(layers_.size());
  FP8T_CHECK(stages >= 1 && stages <= layers,
             "the model's {} blocks cannot be cut into {} pipeline stages (each stage needs at least one block)",
             layers, stages);
  FP8T_CHECK(stage >= 0 && stage < stages, "pipeline stage {} of {} does not exist", stage, stages);
  const int base = layers / stages, extra = layers % stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

Tensor DeepSeekV3Model::stage_forward(int stage, int stages, const Tensor& inputs, const Tensor& targets, int64_t batch,
                                      const Tensor& x, double grad_scale, StageRun& run) {
  const auto [first, last] = stage_blocks(stage, stages);
  check_batch(inputs, targets, batch);
  const int64_t n = inputs.numel(), seq = n / batch, d = config_.hidden_size;
  const Device dev = inputs.device();
  run.impl_ = std::make_unique<StageRun::Impl>();
  StageRun::Impl& r = *run.impl_;
  r.stage = stage;
  r.stages = stages;
  r.rows = n;
  r.ctx = make_context(dev, batch, seq, true, grad_scale);
  run.loss = {};
  Tensor h;
  if (stage == 0) {
    r.inputs = inputs;
    h = Tensor::empty({n, d}, r.ctx.dtype, MemCategory::Workspace, dev);
    ops::embedding_forward(r.ctx.exec, inputs, embed_, h);
  } else {
    FP8T_CHECK(x.defined() && x.dim() == 2 && x.size(0) == n && x.size(1) == d && x.dtype() == r.ctx.dtype,
               "pipeline stage {} expects its input as {}[{}, {}], got {}", stage, dtype_name(r.ctx.dtype), n, d,
               x.defined() ? x.str() : std::string("nothing"));
    h = x;
  }
  double balance = 0;
  r.states.resize(static_cast<size_t>(last - first));
  for (int i = first; i < last; ++i)
    h = layers_[static_cast<size_t>(i)]->forward(r.ctx, h, &r.states[static_cast<size_t>(i - first)], &balance);
  if (stage == stages - 1) tail_forward(r.ctx, h, inputs, targets, batch, true, r.tail, run.loss, balance);
  run.loss.balance = balance;
  run.loss.total = run.loss.main + run.loss.distill + run.loss.mtp + run.loss.balance;
  return stage == stages - 1 ? Tensor() : h;
}

Tensor DeepSeekV3Model::stage_backward(const Tensor& dy, StageRun& run, WgradQueue* wgrad_queue) {
  FP8T_CHECK(run.impl_ != nullptr, "stage_backward without a stage_forward (or called twice)");
  StageRun::Impl& r = *run.impl_;
  r.ctx.wgrad_queue = wgrad_queue;
  const auto [first, last] = stage_blocks(r.stage, r.stages);
  Tensor dx;
  if (r.stage == r.stages - 1) {
    dx = tail_backward(r.ctx, r.tail, r.rows);
  } else {
    FP8T_CHECK(dy.defined() && dy.dim() == 2 && dy.size(0) == r.rows && dy.size(1) == config_.hidden_size &&
                   dy.dtype() == r.ctx.dtype,
               "pipeline stage {} expects the gradient of its output as {}[{}, {}], got {}", r.stage,
               dtype_name(r.ctx.dtype), r.rows, config_.hidden_size, dy.defined() ? dy.str() : std::string("nothing"));
    dx = dy;
  }
  for (int i = last; i-- > first;) {
    layers_[static_cast<size_t>(i)]->backward(r.ctx, r.states[static_cast<size_t>(i - first)], dx);
    r.states[static_cast<size_t>(i - first)] = Block::State();  // its cache released (forward_backward says why)
  }
  if (r.stage == 0) {
    ops::embedding_backward(r.ctx.exec, r.inputs, dx, embed_grad_);
    dx = Tensor();
  }
  run.impl_.reset();
  return dx;
}

LossBreakdown DeepSeekV3Model::forward_backward(const Tensor& inputs, const Tensor& targets, int64_t batch,
                                                double grad_scale) {
  return run(inputs, targets, batch, true, true, grad_scale);
}

LossBreakdown DeepSeekV3Model::forward(const Tensor& inputs, const Tensor& targets, int64_t batch, bool include_mtp) {
  return run(inputs, targets, batch, false, include_mtp, 1.0);
}

Tensor DeepSeekV3Model::blocks_forward(const StepContext& ctx, const Tensor& inputs) {
  Tensor x = Tensor::empty({inputs.numel(), config_.hidden_size}, ctx.dtype, MemCategory::Workspace, inputs.device());
  ops::embedding_forward(ctx.exec, inputs, embed_, x);
  for (auto& layer : layers_) x = layer->forward(ctx, x, nullptr, nullptr);
  return x;
}

Tensor DeepSeekV3Model::last_logits(const Tensor& inputs, int64_t batch) {
  FP8T_CHECK(
      inputs.defined() && inputs.dtype() == DType::I32 && inputs.dim() == 1 && batch > 0 && inputs.numel() % batch == 0,
      "last_logits: inputs must be i32 [batch·seq], got {} for batch {}", inputs.str(), batch);
  const int64_t n = inputs.numel(), seq = n / batch, d = config_.hidden_size;
  const Device dev = inputs.device();
  const StepContext ctx = make_context(dev, batch, seq, false, 1.0);
  const DType dt = ctx.dtype;
  const Tensor x = blocks_forward(ctx, inputs);
  const Tensor last = Tensor::empty({batch, d}, dt, MemCategory::Workspace, dev);
  for (int64_t b = 0; b < batch; ++b)
    ops::copy(ctx.exec, x.rows((b + 1) * seq - 1, (b + 1) * seq), last.rows(b, b + 1));
  const Tensor hn = norm_.forward(ctx, last, nullptr);
  return ops::matmul(ctx.exec, hn, false, head_compute(ctx), true, MemCategory::Workspace, {},
                     fp8train::compute_dtype(dt));
}

TopK DeepSeekV3Model::top_k(const Tensor& inputs, int64_t batch, int64_t k) {
  FP8T_CHECK(
      inputs.defined() && inputs.dtype() == DType::I32 && inputs.dim() == 1 && batch > 0 && inputs.numel() % batch == 0,
      "top_k: inputs must be i32 [batch·seq], got {} for batch {}", inputs.str(), batch);
  const int64_t vocab = config_.vocab_size;
  FP8T_CHECK(k >= 1 && k <= vocab, "top_k: k = {} must be in [1, {}] (the vocabulary)", k, vocab);
  const int64_t n = inputs.numel(), seq = n / batch;
  const Device dev = inputs.device();
  const StepContext ctx = make_context(dev, batch, seq, false, 1.0);
  const DType dt = ctx.dtype;
  const Tensor x = blocks_forward(ctx, inputs);
  const Tensor hn = norm_.forward(ctx, x, nullptr);
  TopK out;
  out.k = k;
  out.ids.resize(static_cast<size_t>(n * k));
  out.probs.resize(static_cast<size_t>(n * k));
  // Logits in row chunks (as head_loss), each copied to the host where the top k are picked.
  const int64_t budget = dev.is_cpu() ? (int64_t{1} << 22) : (int64_t{1} << 26);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, budget / vocab));
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t r1 = std::min(n, r0 + chunk);
    const Tensor logits = ops::matmul(ctx.exec, hn.rows(r0, r1), false, head_compute(ctx), true, MemCategory::Workspace,
                                      {}, fp8train::compute_dtype(dt));
    FP8T_CHECK(logits.dtype() == DType::F32, "top_k needs FP32 logits (a model of FP32 or BF16 compute dtype)");
    const std::vector<float> z = logits.to_vector<float>();
    for (int64_t r = r0; r < r1; ++r) {
      const float* zr = z.data() + (r - r0) * vocab;
      for (int64_t c = 0; c < vocab; ++c) order[static_cast<size_t>(c)] = static_cast<int32_t>(c);
      // Ties go to the lower token id, so the pick does not depend on the sort's implementation.
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return zr[a] > zr[b] || (zr[a] == zr[b] && a < b); });
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(zr[order[j]]) - zr[order[0]]);
      for (int64_t j = 0; j < k; ++j) {
        out.ids[static_cast<size_t>(r * k + j)] = order[static_cast<size_t>(j)];
        out.probs[static_cast<size_t>(r * k + j)] =
            static_cast<float>(std::exp(static_cast<double>(zr[order[j]]) - zr[order[0]]) / sum);
      }
    }
  }
  return out;
}

Tensor DeepSeekV3Model::head_logits(const StepContext& ctx, const RMSNorm& norm, const Tensor& h) {
  const Tensor hn = norm.forward(ctx, h, nullptr);
  return ops::matmul(ctx.exec, hn, false, head_compute(ctx), true, MemCategory::Workspace, {},
                     fp8train::compute_dtype(ctx.dtype));
}

DeepSeekV3Model::DecodeCache DeepSeekV3Model::new_decode_cache(int64_t capacity) {
  FP8T_CHECK(capacity > 0, "a decode cache needs a positive capacity, got {}", capacity);
  const Device dev = embed_.device();
  DecodeCache c;
  c.capacity = capacity;
  auto make = [&](const Block& b) {
    return Tensor::empty({capacity, b.cache_width()}, compute_dtype_, MemCategory::ActivationCache, dev);
  };
  for (const auto& b : layers_) c.layers.push_back(make(*b));
  for (const auto& m : mtp_) c.mtp.push_back(make(*m->block));
  return c;
}

int64_t DeepSeekV3Model::latent_cache_bytes_per_token() const {
  const ModelConfig& c = config_;
  return c.n_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * static_cast<int64_t>(dtype_size(compute_dtype_));
}

int64_t DeepSeekV3Model::mha_cache_bytes_per_token() const {
  const ModelConfig& c = config_;
  return c.n_layers * c.n_heads * (c.qk_head_dim() + c.v_head_dim) * static_cast<int64_t>(dtype_size(compute_dtype_));
}

Tensor DeepSeekV3Model::decode(const Tensor& tokens, int64_t pos, DecodeCache& cache, Tensor* hidden) {
  FP8T_CHECK(tokens.defined() && tokens.dtype() == DType::I32 && tokens.dim() == 1 && tokens.numel() > 0,
             "decode: tokens must be a non-empty i32 [m] tensor, got {}", tokens.defined() ? tokens.str() : "none");
  FP8T_CHECK(cache.layers.size() == layers_.size(), "decode: the cache was made for another model ({} layers, not {})",
             cache.layers.size(), layers_.size());
  const int64_t m = tokens.numel(), d = config_.hidden_size;
  const StepContext ctx = make_context(tokens.device(), 1, m, false, 1.0);
  Tensor x = Tensor::empty({m, d}, ctx.dtype, MemCategory::Workspace, ctx.exec.device);
  ops::embedding_forward(ctx.exec, tokens, embed_, x);
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->decode(ctx, x, cache.layers[i], pos);
  if (hidden) *hidden = x;
  return head_logits(ctx, norm_, x);
}

Tensor DeepSeekV3Model::mtp_decode(int64_t k, const Tensor& h_prev, const Tensor& tokens, int64_t pos,
                                   DecodeCache& cache, Tensor* hidden) {
  FP8T_CHECK(k >= 0 && k < static_cast<int64_t>(mtp_.size()), "mtp_decode: the model has {} MTP modules, not {}",
             mtp_.size(), k + 1);
  FP8T_CHECK(cache.mtp.size() == mtp_.size(), "mtp_decode: the cache was made for another model");
  const int64_t m = tokens.numel(), d = config_.hidden_size;
  FP8T_CHECK(tokens.dtype() == DType::I32 && tokens.dim() == 1 && m > 0 && h_prev.dim() == 2 && h_prev.size(0) == m &&
                 h_prev.size(1) == d,
             "mtp_decode: tokens must be i32 [m] and h_prev [m, {}], got {} and {}", d, tokens.str(), h_prev.str());
  Mtp& mod = *mtp_[static_cast<size_t>(k)];
  const StepContext ctx = make_context(tokens.device(), 1, m, false, 1.0);
  const Device dev = ctx.exec.device;
  // h'^k = M_k·[RMSNorm(h^{k−1}); RMSNorm(Emb(t))] as in training
  const Tensor emb = Tensor::empty({m, d}, ctx.dtype, MemCategory::Workspace, dev);
  ops::embedding_forward(ctx.exec, tokens, embed_, emb);
  const Tensor cat = Tensor::empty({m, 2 * d}, ctx.dtype, MemCategory::Workspace, dev);
  mod.hnorm.forward(ctx, h_prev, cat.cols(0, d), nullptr, false);
  mod.enorm.forward(ctx, emb, cat.cols(d, 2 * d), nullptr, false);
  const Tensor h_proj = mod.eh_proj.forward(ctx, cat, nullptr);
  const Tensor hk = mod.block->decode(ctx, h_proj, cache.mtp[static_cast<size_t>(k)], pos);
  if (hidden) *hidden = hk;
  return head_logits(ctx, mod.norm, hk);
}

}  // namespace fp8train::model
