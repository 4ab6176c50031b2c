// Runs a pipeline schedule (dualpipe.h) on this rank's stages, passing activations and gradients with
// Communicator::send/recv on the PP group. The model side is the abstract PipelineStages: this rank's two chunks
// (chunk 0 = stage r, chunk 1 = stage 2P−1−r of the V), each with a forward, a backward for its input and a
// backward for its weights, called in the schedule's order. An overlapped F&B pair runs as its forward, then its
// backward's input and weight parts (on the CPU there is nothing to overlap; a GPU implementation would issue the
// two on separate streams). Received tensors go into buffers the stages provide (their shape and dtype).
#pragma once
#include "dist/communicator.h"
#include "dist/dualpipe.h"
#include "tensor/exec_ctx.h"
#include "tensor/tensor.h"

namespace fp8train::dist {

class PipelineStages {
 public:
  virtual ~PipelineStages() = default;
  // Forward of `chunk` for micro-batch mb. `input`: the previous stage's output (undefined for stage 0, which
  // reads its micro-batch itself). Returns the output (the last stage's is not passed on: it computes its loss).
  virtual Tensor forward(int chunk, int mb, const Tensor& input) = 0;
  // The gradient of the loss with respect to the chunk's input, from the gradient of its output (undefined for the
  // last stage, which starts from its loss). Stage 0's result is not used (may be undefined).
  virtual Tensor backward_input(int chunk, int mb, const Tensor& grad_output) = 0;
  // Accumulates the chunk's weight gradients for mb (after its backward_input).
  virtual void backward_weight(int chunk, int mb) = 0;
  // A contiguous tensor to receive into: the input of `chunk` for mb (Activation), or the gradient of its output
  // (Gradient).
  virtual Tensor receive_buffer(int chunk, int mb, Payload payload) = 0;
};

// Executes rank pp.rank()'s actions of `schedule` (pp.size() must be schedule.ranks). Throws Error when the
// schedule hands a computation an input it does not have (check_schedule rules that out) or a transfer fails.
void run_pipeline(const PipeSchedule& schedule, Communicator& pp, PipelineStages& stages, const ExecCtx& ctx);

}  // namespace fp8train::dist
