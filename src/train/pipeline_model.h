// fp8train's model as the stages of a DualPipeV pipeline (dist/pipeline_executor.h): rank r of P runs the model's
// pipeline stages r and 2P−1−r of 2P (DeepSeekV3Model::stage_forward / stage_backward), so rank 0 holds the
// embedding, the head and MTP, and every rank a contiguous range of blocks on each arm of the V. Each micro-batch
// is given to every rank (stage 0 reads its tokens, the last stage its targets, MTP both).
// B and W: backward_input runs the stage's backward with its Linears' Wgrad GEMMs queued (StepContext::wgrad_queue:
// the quantized or copied operands are held until then), and backward_weight runs that micro-batch's queue, so the
// schedule's deferred W steps carry the Wgrad GEMMs. The other weight gradients (norms, router, embedding, head)
// are small and are added in B. Adding a micro-batch's Wgrad later changes only the order in which the FP32
// gradients accumulate over micro-batches.
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
  // Wgrad GEMMs run by backward_weight so far (what the W steps carried).
  int64_t wgrad_gemms_in_w() const { return wgrad_gemms_in_w_; }

 private:
  model::DeepSeekV3Model& model_;
  int rank_, ranks_;
  std::vector<MicroBatch> micro_batches_;
  double grad_scale_;
  std::vector<model::DeepSeekV3Model::StageRun> runs_[2];  // per chunk, per micro-batch
  std::vector<model::WgradQueue> wgrads_[2];                // per chunk, per micro-batch: B's queued Wgrad GEMMs
  int64_t wgrad_gemms_in_w_ = 0;
  std::vector<model::LossBreakdown> losses_;
};

}  // namespace fp8train::train
