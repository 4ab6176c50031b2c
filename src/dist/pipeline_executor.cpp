// The pipeline executor (see pipeline_executor.h).
#include "dist/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
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

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

ChunkTimes PipeTiming::chunk_times() const {
  const auto mean = [](double s, int64_t n) { return n > 0 ? s / static_cast<double>(n) : 0.0; };
  ChunkTimes t;
  t.f = mean(f_s, f);
  t.w = mean(w_s, w);
  t.b = mean(b_s, b) + t.w;
  t.fb = mean(fb_s, fb);
  return t;
}

PipeTiming run_pipeline(const PipeSchedule& schedule, Communicator& pp, PipelineStages& stages, const ExecCtx& ctx) {
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
  PipeTiming timing;
  ctx.synchronize();
  const double start = now_s();
  for (const PipeAction& a : schedule.actions.at(static_cast<size_t>(r))) {
    const double t0 = now_s();
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
    ctx.synchronize();
    const double dt = now_s() - t0;
    switch (a.op) {
      case PipeOp::F:
        timing.f_s += dt, ++timing.f;
        break;
      case PipeOp::B:
        timing.b_s += dt, ++timing.b;
        break;
      case PipeOp::W:
        timing.w_s += dt, ++timing.w;
        break;
      case PipeOp::FB:
        timing.fb_s += dt, ++timing.fb;
        break;
      case PipeOp::Send:
      case PipeOp::Recv:
        timing.transfer_s += dt;
        break;
    }
  }
  timing.step_s = now_s() - start;
  FP8T_CHECK(inputs.empty() && grad_outputs.empty() && to_send_act.empty() && to_send_grad.empty(),
             "pipeline: rank {} finished the schedule with tensors never used or sent", r);
  return timing;
}

std::vector<PipeTiming> gather_timings(Communicator& pp, const PipeTiming& mine, const ExecCtx& ctx) {
  constexpr size_t kFields = 10;
  // Each rank fills its own slot; the sum over the ranks is then every rank's values (the counts are exact).
  std::vector<double> slots(kFields * static_cast<size_t>(pp.size()), 0.0);
  double* m = slots.data() + kFields * static_cast<size_t>(pp.rank());
  const double own[kFields] = {mine.step_s,
                               mine.f_s,
                               mine.b_s,
                               mine.w_s,
                               mine.fb_s,
                               mine.transfer_s,
                               static_cast<double>(mine.f),
                               static_cast<double>(mine.b),
                               static_cast<double>(mine.w),
                               static_cast<double>(mine.fb)};
  std::copy(own, own + kFields, m);
  const std::vector<double> all = sum_in_rank_order(pp, slots, ctx);
  std::vector<PipeTiming> out;
  for (int r = 0; r < pp.size(); ++r) {
    const double* v = all.data() + kFields * static_cast<size_t>(r);
    PipeTiming t;
    t.step_s = v[0], t.f_s = v[1], t.b_s = v[2], t.w_s = v[3], t.fb_s = v[4], t.transfer_s = v[5];
    t.f = std::llround(v[6]), t.b = std::llround(v[7]), t.w = std::llround(v[8]), t.fb = std::llround(v[9]);
    out.push_back(t);
  }
  return out;
}

}  // namespace fp8train::dist
