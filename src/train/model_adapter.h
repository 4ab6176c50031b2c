// DeepSeekTrainable: the DeepSeek-V3 model of the model layer (model/model.h) behind the trainer's
// TrainableModel interface, built with the precision recipe (src/recipe: fp32, bf16, fp8-deepseek,
// fp8-tensorwise, int8-blockwise, plus ":key=value" overrides). Master weights, gradients and the optimizer stay
// FP32 (moments FP32/BF16) whatever the recipe.
// The model's trainable parameters are moved into flat arenas (ParameterSet::finalize) when it is built; the
// router biases stay the model's own buffers.
#pragma once
#include <memory>
#include <string>

#include "model/config.h"
#include "model/model.h"
#include "train/trainable.h"

namespace fp8train::model {
class DeepSeekV3Model;
}

namespace fp8train::train {

class DeepSeekTrainable : public TrainableModel {
 public:
  // ep / ep_rank: hold only that shard of the routed experts (model::ModelOptions); the trainer then sets expert
  // parallelism over a group of that size (set_expert_parallel).
  DeepSeekTrainable(const model::ModelConfig& config, uint64_t seed, const std::string& recipe, int ep = 1,
                    int ep_rank = 0);
  ~DeepSeekTrainable() override;

  const optim::ParamArenas& parameters() override { return params_; }
  std::vector<NamedTensor> state() override;
  std::vector<NamedTensor> recipe_state() override;
  int64_t vocab_size() const override;
  MicroBatchResult forward_backward(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len,
                                    double grad_scale) override;
  void set_scheduled_values(double mtp_lambda, double bias_update_speed) override;
  int grad_ready_group(const std::string& name) const override { return model_->grad_ready_group(name); }
  void set_grad_ready_hook(std::function<void(int)> hook) override { model_->set_grad_ready_hook(std::move(hook)); }
  void after_step() override;
  void parameters_changed() override;
  void discard_step() override;
  void set_step_expert_tokens(const std::vector<std::vector<double>>& tokens) override;
  void set_expert_parallel(dist::Communicator* ep) override;
  MicroBatchResult pipeline_step(const dist::PipeSchedule& schedule, dist::Communicator& pp,
                                 const std::vector<PipelineMicroBatch>& micro_batches, int64_t seq_len) override;
  double eval_loss_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len) override;
  std::vector<float> next_token_logits(const Token* inputs, int64_t batch, int64_t seq_len) override;
  TopKTargets top_k(const Token* inputs, int64_t batch, int64_t seq_len, int64_t k) override;
  void set_distill_targets(const TopKTargets* targets, double weight) override;
  double eval_distill_kl_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len,
                             const TopKTargets& teacher) override;
  std::vector<std::string> moe_layer_names() override;
  void begin_step(int64_t step, bool sample_health) override;
  nlohmann::json take_health() override;
  int64_t compute_weight_bytes() override;

  model::DeepSeekV3Model& model() { return *model_; }
  // The whole model's trainable parameters (a model holding a shard of the experts counts every shard).
  int64_t parameter_count() const;

 private:
  std::unique_ptr<model::DeepSeekV3Model> model_;
  optim::ParamArenas params_;
  model::DistillTargets distill_;  // the targets set_distill_targets put on the model's device
};

}  // namespace fp8train::train
