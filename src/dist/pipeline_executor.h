// Runs a pipeline schedule (dualpipe.h) on this rank's stages, passing activations and gradients with
// Communicator::send/recv on the PP group. The model side is the abstract PipelineStages: this rank's two chunks
// (chunk 0 = stage r, chunk 1 = stage 2P−1−r of the V), each with a forward, a backward for its input and a
// backward for its weights, called in the schedule's order. An overlapped F&B pair runs as its forward, then its
// backward's input and weight parts (the two are not issued on separate streams yet). Received tensors go into
// buffers the stages provide (their shape and dtype). On a GPU the transfers run on a side queue beside the
// compute stream (Backend::side_queue), so a stage computes while its tensors move; on the CPU everything runs on
// the calling thread in schedule order.
#pragma once
#include <vector>

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

// Where one rank's pipeline step spent its time. Each computation is timed on the compute stream by timestamps
// taken after the waits for its received inputs (SideQueue::time_mark; host-clock readings on the CPU), so its
// time is its kernels' and the host work inside it; the step is the host's wall time from its start until both
// queues are drained. `bubble()` is the time this rank computed nothing: waits for a peer, and on the CPU the
// transfers themselves (on a GPU they run beside the computation).
struct PipeTiming {
  double step_s = 0;                           // the whole schedule on this rank
  double f_s = 0, b_s = 0, w_s = 0, fb_s = 0;  // total time in each kind of computation
  int64_t f = 0, b = 0, w = 0, fb = 0;         // how many of each
  double transfer_s = 0;  // host time in send and recv: on the CPU the transfers (peer waits included), on a GPU
                          // only their enqueueing
  // The lone F, B and W computations again, by the rank's chunk (0: stage r, 1: stage 2P−1−r), so that stages that
  // cost differently show which (the F&B pairs mix both chunks and are left out).
  double chunk_f_s[2] = {0, 0}, chunk_b_s[2] = {0, 0}, chunk_w_s[2] = {0, 0};
  int64_t chunk_f[2] = {0, 0}, chunk_b[2] = {0, 0}, chunk_w[2] = {0, 0};
  double busy_s() const { return f_s + b_s + w_s + fb_s; }
  double bubble_s() const { return step_s - busy_s(); }
  // The mean times in DeepSeek's terms (ChunkTimes: b is the FULL backward, B + W; an F&B pair runs here as its
  // F, B and W in sequence). Counts of zero give zero times.
  ChunkTimes chunk_times() const;
};

// Executes rank pp.rank()'s actions of `schedule` (pp.size() must be schedule.ranks) and returns where the time
// went. Throws Error when the schedule hands a computation an input it does not have (check_schedule rules that
// out) or a transfer fails.
PipeTiming run_pipeline(const PipeSchedule& schedule, Communicator& pp, PipelineStages& stages, const ExecCtx& ctx);

// Every rank's timing, in rank order (a collective over the PP group: every rank must call it).
std::vector<PipeTiming> gather_timings(Communicator& pp, const PipeTiming& mine, const ExecCtx& ctx);

}  // namespace fp8train::dist
