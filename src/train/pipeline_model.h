// fp8train's model as the stages of a DualPipeV pipeline (dist/pipeline_executor.h): rank r of P runs the model's
// pipeline stages r and 2P−1−r of 2P (DeepSeekV3Model::stage_forward / stage_backward), so rank 0 holds the
// embedding, the head and MTP, and every rank a contiguous range of blocks on each arm of the V. Each micro-batch
// is given to every rank (stage 0 reads its tokens, the last stage its targets, MTP both).
// The model's backward computes a block's weight gradients together with its input gradient, so backward_weight
// has nothing left to do: the schedule's deferred W are empty here (splitting Linear::backward into Dgrad and a
// deferred Wgrad is the next step; docs/distributed.md).
// The trainer runs it through DeepSeekTrainable::pipeline_step (`fp8train train --pp P`).
#pragma once
#include <vector>

#include "dist/pipeline_executor.h"
#include "model/model.h"

namespace fp8train::train {

class ModelStages final : public dist::PipelineStages {
 public:
  struct MicroBatch {
    Tensor inputs, targets;  // i32 [batch·seq], as forward_backward takes them
    int64_t batch = 1;
    double grad_scale = -1;  // this micro-batch's grad_scale; < 0: the constructor's
  };
  // grad_scale: each micro-batch's gradients are those of grad_scale·total (forward_backward's argument).
  ModelStages(model::DeepSeekV3Model& model, int rank, int ranks, std::vector<MicroBatch> micro_batches,
              double grad_scale);

  Tensor forward(int chunk, int mb, const Tensor& input) override;
  Tensor backward_input(int chunk, int mb, const Tensor& grad_output) override;
  void backward_weight(int chunk, int mb) override;
  Tensor receive_buffer(int chunk, int mb, dist::Payload payload) override;

  // This rank's part of each micro-batch's losses: its stages' (main, MTP and distillation on rank 0, which holds
  // the last stage; the balance losses of its blocks). Summed over the ranks, total is forward_backward's.
  const std::vector<model::LossBreakdown>& losses() const { return losses_; }

 private:
  model::DeepSeekV3Model& model_;
  int rank_, ranks_;
  std::vector<MicroBatch> micro_batches_;
  double grad_scale_;
  std::vector<model::DeepSeekV3Model::StageRun> runs_[2];  // per chunk, per micro-batch
  std::vector<model::LossBreakdown> losses_;
};

}  // namespace fp8train::train
