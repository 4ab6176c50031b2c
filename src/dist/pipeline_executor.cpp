// The pipeline executor (see pipeline_executor.h).
#include "dist/pipeline_executor.h"

#include <map>
#include <tuple>

#include "common/error.h"

namespace fp8train::dist {

namespace {

// Tensors waiting on this rank, by (stage, mb): inputs of its stages, gradients of their outputs, and outputs
// and input gradients waiting to be sent.
class Mailbox {
 public:
  void put(int stage, int mb, Tensor t) { slots_[{stage, mb}] = std::move(t); }
  Tensor take(int stage, int mb, const char* what, const PipeAction& a) {
    const auto it = slots_.find({stage, mb});
    FP8T_CHECK(it != slots_.end(), "pipeline: {} of stage {} micro-batch {} is missing at {}", what, stage, mb,
               a.str());
    Tensor t = std::move(it->second);
    slots_.erase(it);
    return t;
  }
  bool empty() const { return slots_.empty(); }

 private:
  std::map<std::pair<int, int>, Tensor> slots_;
};

}  // namespace

void run_pipeline(const PipeSchedule& schedule, Communicator& pp, PipelineStages& stages, const ExecCtx& ctx) {
  const int P = schedule.ranks, S = 2 * P, r = pp.rank();
  FP8T_CHECK(pp.size() == P, "pipeline schedule for {} ranks run on group '{}' of {} ranks", P, pp.name(), pp.size());
  Mailbox inputs, grad_outputs, to_send_act, to_send_grad;
  const auto forward = [&](int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    const Tensor input = s == 0 ? Tensor() : inputs.take(s, mb, "the input", a);
    Tensor out = stages.forward(chunk, mb, input);
    if (s + 1 == S) return;
    FP8T_CHECK(out.defined(), "pipeline: the forward of stage {} micro-batch {} returned no output", s, mb);
    (dualpipev_rank(s + 1, P) == r ? inputs : to_send_act).put(dualpipev_rank(s + 1, P) == r ? s + 1 : s, mb, out);
  };
  const auto backward = [&](int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    const Tensor grad = s + 1 == S ? Tensor() : grad_outputs.take(s, mb, "the output gradient", a);
    Tensor grad_input = stages.backward_input(chunk, mb, grad);
    if (s == 0) return;
    FP8T_CHECK(grad_input.defined(), "pipeline: the backward of stage {} micro-batch {} returned no input gradient", s,
               mb);
    (dualpipev_rank(s - 1, P) == r ? grad_outputs : to_send_grad)
        .put(dualpipev_rank(s - 1, P) == r ? s - 1 : s, mb, grad_input);
  };
  for (const PipeAction& a : schedule.actions.at(static_cast<size_t>(r))) {
    switch (a.op) {
      case PipeOp::F:
        forward(a.chunk, a.mb, a);
        break;
      case PipeOp::B:
        backward(a.chunk, a.mb, a);
        break;
      case PipeOp::W:
        stages.backward_weight(a.chunk, a.mb);
        break;
      case PipeOp::FB:
        forward(a.chunk, a.mb, a);
        backward(a.chunk2, a.mb2, a);
        stages.backward_weight(a.chunk2, a.mb2);
        break;
      case PipeOp::Send: {
        const bool act = a.payload == Payload::Activation;
        const Tensor t =
            (act ? to_send_act : to_send_grad).take(a.stage, a.mb, act ? "the output" : "the input gradient", a);
        pp.send(t, a.peer, ctx);
        break;
      }
      case PipeOp::Recv: {
        const bool act = a.payload == Payload::Activation;
        const int to_stage = act ? a.stage + 1 : a.stage - 1;
        const Tensor t = stages.receive_buffer(dualpipev_chunk(to_stage, P), a.mb, a.payload);
        pp.recv(t, a.peer, ctx);
        (act ? inputs : grad_outputs).put(to_stage, a.mb, t);
        break;
      }
    }
  }
  FP8T_CHECK(inputs.empty() && grad_outputs.empty() && to_send_act.empty() && to_send_grad.empty(),
             "pipeline: rank {} finished the schedule with tensors never used or sent", r);
}

}  // namespace fp8train::dist
