// TrainableModel: what the trainer needs from a model, and nothing more. The DeepSeek-V3 model is adapted
// to it in model_adapter.cpp; tests drive the trainer with small models of their own through it.
//   inputs, targets: [batch, seq_len] tokens, row-major (targets = inputs shifted by one)
//   parameters():    FP32 master weights and FP32 gradients in flat arenas with named views (optim/param.h)
//   state():         named non-trainable FP32 tensors saved with a checkpoint (router biases)
// Everything is a Tensor on the model's device; the trainer and checkpoints copy through Tensors, never through
// host pointers.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "dist/communicator.h"
#include "dist/dualpipe.h"
#include "dist/pipeline_executor.h"
#include "optim/param.h"
#include "tensor/tensor.h"
#include "train/tokenizer.h"

namespace fp8train::train {

// A non-trainable tensor the model keeps across steps (e.g. a MoE layer's router bias): F32, contiguous.
struct NamedTensor {
  std::string name;
  Tensor value;
};

struct LossBreakdown {
  double total = 0.0;    // main + mtp + balance: what the gradient is of
  double main = 0.0;     // next-token cross-entropy (nats per token)
  double mtp = 0.0;      // λ/D · Σ_k MTP cross-entropy
  double balance = 0.0;  // α · sequence-wise balance loss
  double distill = 0.0;  // w · KL to a teacher's top-k distribution (0 without a teacher); included in total
  double distill_kl = 0.0;  // that KL, unweighted (nats per target token)
};

// A teacher's next-token distribution at every position of a micro-batch: its k most likely tokens and their
// probabilities renormalised over those k; [batch·seq_len, k] row-major each.
struct TopKTargets {
  int64_t k = 0;
  std::vector<int32_t> ids;
  std::vector<float> probs;
};

struct MicroBatchResult {
  LossBreakdown loss;
  // Tokens routed to each expert in this micro-batch, per MoE layer: [moe_layers][n_routed_experts].
  std::vector<std::vector<double>> expert_tokens;
  dist::PipeTiming pipe;  // pipeline_step only: where this rank's step spent its time
};

// One micro-batch of a pipeline step: [rows, seq_len] tokens and the share of the step's batch it is (its
// gradients are those of scale·loss).
struct PipelineMicroBatch {
  std::vector<Token> inputs, targets;
  int64_t rows = 0;
  double scale = 0.0;
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  // The trainable parameters; the same arenas for the model's whole life.
  virtual const optim::ParamArenas& parameters() = 0;
  virtual std::vector<NamedTensor> state() = 0;
  // The precision recipe's own state that a resume needs to continue bit for bit (fp8-tensorwise's delayed-scaling
  // amax histories), as live tensors a checkpoint load copies into; empty when the recipe has none.
  virtual std::vector<NamedTensor> recipe_state() { return {}; }
  virtual int64_t vocab_size() const = 0;

  // Forward + backward of one micro-batch. Gradients ACCUMULATE into the parameters' grad buffers, as the
  // gradient of grad_scale · loss.total (the trainer passes the micro-batch's share of the step's tokens).
  virtual MicroBatchResult forward_backward(const Token* inputs, const Token* targets, int64_t batch,
                                            int64_t seq_len, double grad_scale) = 0;

  // Gradient readiness (dist::Zero1's reduction overlapped with the backward): a trainable parameter's ready group
  // (by its arena view's name; 0 is final first), and a hook forward_backward's backward calls with each group's
  // number, in increasing order, once that group's gradients are final (set: every later call until reset with
  // null). The defaults: one group, and no calls (the reduction then starts after the backward).
  virtual int grad_ready_group(const std::string& name) const {
    (void)name;
    return 0;
  }
  virtual void set_grad_ready_hook(std::function<void(int)> hook) { (void)hook; }

  // The scheduled values of the step about to run (train.mtp_lambda_schedule, train.bias_update_speed_schedule):
  // the MTP loss weight λ its forward uses and the router-bias update speed γ of its after_step. The trainer
  // calls it at the start of every step, so a resumed run recomputes them from the step. The default ignores them
  // (a model without MTP or router biases).
  virtual void set_scheduled_values(double mtp_lambda, double bias_update_speed) {
    (void)mtp_lambda;
    (void)bias_update_speed;
  }

  // Called once per applied optimizer step, after the update: e.g. the auxiliary-loss-free router bias
  // update from the loads of the step just taken.
  virtual void after_step() = 0;

  // The parameter values changed outside an optimizer step (a checkpoint was loaded into them).
  virtual void parameters_changed() {}

  // Data parallelism: the step's expert loads summed over every rank ([moe_layers][n_routed_experts], the shape of
  // MicroBatchResult::expert_tokens), replacing this rank's own before after_step, so every rank updates its
  // router biases alike. The default ignores them (a model without router biases).
  virtual void set_step_expert_tokens(const std::vector<std::vector<double>>& tokens) { (void)tokens; }

  // Expert parallelism (dist/expert_parallel.h): shard the routed experts of every MoE layer over the EP group
  // (collective use: every EP rank runs the same forwards and backwards). The default refuses a group of more
  // than one rank (a model without routed experts).
  virtual void set_expert_parallel(dist::Communicator* ep) {
    if (ep && ep->size() > 1) throw Error("this model has no routed experts to shard over expert-parallel ranks");
  }

  // Pipeline parallelism (DualPipeV, dist/pipeline_executor.h): runs this rank's stages of `schedule` over the PP
  // group `pp` on the step's micro-batches (every rank of the pipeline passes the same ones), accumulating the
  // gradients of the parameters its stages use (the others' stay as they are). Returns this rank's part of the
  // step's losses (Σ scale·loss over its stages' parts; summed over the pipeline's ranks they are the step's) and
  // the expert loads of the MoE layers it ran (zeros for the others). The default refuses.
  virtual MicroBatchResult pipeline_step(const dist::PipeSchedule& schedule, dist::Communicator& pp,
                                         const std::vector<PipelineMicroBatch>& micro_batches, int64_t seq_len) {
    (void)schedule, (void)pp, (void)micro_batches, (void)seq_len;
    throw Error("this model cannot be cut into pipeline stages");
  }

  // Called instead of after_step when a step is skipped (non-finite): discard per-step accumulations.
  virtual void discard_step() = 0;

  // Forward only, no MTP: Σ over all [batch, seq_len] targets of the main cross-entropy, in nats.
  virtual double eval_loss_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len) = 0;

  // Knowledge distillation (train.teacher). top_k: forward only, the model as a teacher (nothing kept, no gradient).
  // set_distill_targets: until called again with null, forward_backward adds weight·KL(targets ‖ model) over the
  // main loss's target positions to the loss (LossBreakdown::distill). eval_distill_kl_sum: forward only, Σ of that
  // KL over the targeted positions. The defaults refuse: the model does not support distillation.
  virtual TopKTargets top_k(const Token* inputs, int64_t batch, int64_t seq_len, int64_t k) {
    (void)inputs, (void)batch, (void)seq_len, (void)k;
    throw Error("this model cannot serve as a distillation teacher");
  }
  virtual void set_distill_targets(const TopKTargets* targets, double weight) {
    (void)weight;
    if (targets) throw Error("this model cannot be trained by distillation");
  }
  virtual double eval_distill_kl_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len,
                                     const TopKTargets& teacher) {
    (void)inputs, (void)targets, (void)batch, (void)seq_len, (void)teacher;
    throw Error("this model cannot be trained by distillation");
  }

  // Forward only: logits of the next token after each sequence's last position, [batch, vocab_size].
  virtual std::vector<float> next_token_logits(const Token* inputs, int64_t batch, int64_t seq_len) = 0;

  // Precision-recipe hooks; the defaults do nothing. begin_step: called before a step's first
  // forward (the step seeds stochastic rounding; sample_health asks for numerics-health counters).
  // take_health: the counters collected since begin_step (a JSON array, or null). compute_weight_bytes: bytes
  // of the weights in the GEMMs' input format (FP8 codes + scales, BF16, or FP32) as of the last forward.
  virtual void begin_step(int64_t step, bool sample_health) {
    (void)step;
    (void)sample_health;
  }
  virtual nlohmann::json take_health() { return nullptr; }
  // Names of the MoE layers, in the order of MicroBatchResult::expert_tokens (e.g. "layers.1.moe").
  virtual std::vector<std::string> moe_layer_names() { return {}; }
  virtual int64_t compute_weight_bytes() { return 0; }
};

}  // namespace fp8train::train
