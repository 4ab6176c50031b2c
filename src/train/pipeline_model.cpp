// The model as pipeline stages (see pipeline_model.h).
#include "train/pipeline_model.h"

#include "common/error.h"

namespace fp8train::train {

ModelStages::ModelStages(model::DeepSeekV3Model& model, int rank, int ranks, std::vector<MicroBatch> micro_batches,
                         double grad_scale)
    : model_(model), rank_(rank), ranks_(ranks), micro_batches_(std::move(micro_batches)), grad_scale_(grad_scale) {
  FP8T_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "pipeline rank {} of {} does not exist", rank, ranks);
  model.stage_blocks(0, 2 * ranks);  // throws when the model has fewer blocks than stages
  for (auto& runs : runs_) runs.resize(micro_batches_.size());
  for (auto& queues : wgrads_) queues.resize(micro_batches_.size());
  losses_.resize(micro_batches_.size());
}

Tensor ModelStages::forward(int chunk, int mb, const Tensor& input) {
  const MicroBatch& b = micro_batches_.at(static_cast<size_t>(mb));
  model::DeepSeekV3Model::StageRun& run = runs_[chunk].at(static_cast<size_t>(mb));
  Tensor out = model_.stage_forward(dist::dualpipev_stage(rank_, chunk, ranks_), 2 * ranks_, b.inputs, b.targets,
                                    b.batch, input, b.grad_scale < 0 ? grad_scale_ : b.grad_scale, run);
  model::LossBreakdown& l = losses_[static_cast<size_t>(mb)];
  l.total += run.loss.total;
  l.main += run.loss.main;
  l.mtp += run.loss.mtp;
  l.balance += run.loss.balance;
  l.distill += run.loss.distill;
  l.distill_kl += run.loss.distill_kl;
  l.main_tokens += run.loss.main_tokens;
  if (!run.loss.mtp_per_depth.empty()) l.mtp_per_depth = run.loss.mtp_per_depth;
  return out;
}

Tensor ModelStages::backward_input(int chunk, int mb, const Tensor& grad_output) {
  model::WgradQueue& queue = wgrads_[chunk].at(static_cast<size_t>(mb));
  FP8T_CHECK(queue.empty(), "pipeline chunk {} micro-batch {}: backward before the previous one's W step", chunk, mb);
  return model_.stage_backward(grad_output, runs_[chunk].at(static_cast<size_t>(mb)), &queue);
}

void ModelStages::backward_weight(int chunk, int mb) {
  model::WgradQueue& queue = wgrads_[chunk].at(static_cast<size_t>(mb));
  for (auto& wgrad : queue) wgrad();
  wgrad_gemms_in_w_ += static_cast<int64_t>(queue.size());
  queue.clear();  // releases the operands held since B
}

Tensor ModelStages::receive_buffer(int, int mb, dist::Payload) {
  const MicroBatch& b = micro_batches_.at(static_cast<size_t>(mb));
  return Tensor::empty({b.inputs.numel(), model_.config().hidden_size}, model_.compute_dtype(), MemCategory::Workspace,
                       b.inputs.device());
}

}  // namespace fp8train::train
