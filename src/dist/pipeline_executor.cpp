// The pipeline executor (see pipeline_executor.h).
#include "dist/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <tuple>

#include "common/error.h"
#include "tensor/backend.h"

namespace fp8train::dist {

namespace {

// Tensors waiting on this rank, by (stage, mb): inputs of its stages, gradients of their outputs, and outputs
// and input gradients waiting to be sent. A received tensor carries the side-queue marker after its receive
// (-1: produced on the compute stream, nothing to wait for).
class Mailbox {
 public:
  struct Item {
    Tensor tensor;
    int mark = -1;
  };
  void put(int stage, int mb, Tensor t, int mark = -1) { slots_[{stage, mb}] = {std::move(t), mark}; }
  Item take(int stage, int mb, const char* what, const PipeAction& a) {
    const auto it = slots_.find({stage, mb});
    FP8T_CHECK(it != slots_.end(), "pipeline: {} of stage {} micro-batch {} is missing at {}", what, stage, mb,
               a.str());
    Item item = std::move(it->second);
    slots_.erase(it);
    return item;
  }
  bool empty() const { return slots_.empty(); }

 private:
  std::map<std::pair<int, int>, Item> slots_;
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
  // Transfers go on the side queue, so that a stage computes while its tensors move: a send waits (on the device)
  // for what the compute stream has queued before it, and the computation that uses a received tensor waits for
  // its receive. The order of the transfers is the schedule's, which check_schedule proves free of deadlocks even
  // when every transfer blocks its rank; here they block only the side queue, which relaxes the order without
  // adding any wait. On the CPU the side queue is the calling thread: everything runs in schedule order.
  SideQueue& queue = side_queue(ctx.device, SideQueueUse::Pipeline);
  const ExecCtx comm_ctx = ctx.with_stream(queue.side_stream());
  Mailbox inputs, grad_outputs, to_send_act, to_send_grad;
  std::vector<Tensor> in_flight;  // sent tensors, kept alive until the side queue has read them
  const auto wait_for = [&](const Mailbox::Item& item) {
    if (item.mark >= 0) queue.compute_waits_for(item.mark);
    return item.tensor;
  };
  const auto input_of = [&](int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    return s == 0 ? Tensor() : wait_for(inputs.take(s, mb, "the input", a));
  };
  const auto grad_of = [&](int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    return s + 1 == S ? Tensor() : wait_for(grad_outputs.take(s, mb, "the output gradient", a));
  };
  const auto forward = [&](int chunk, int mb, const Tensor& input) {
    const int s = dualpipev_stage(r, chunk, P);
    Tensor out = stages.forward(chunk, mb, input);
    if (s + 1 == S) return;
    FP8T_CHECK(out.defined(), "pipeline: the forward of stage {} micro-batch {} returned no output", s, mb);
    (dualpipev_rank(s + 1, P) == r ? inputs : to_send_act).put(dualpipev_rank(s + 1, P) == r ? s + 1 : s, mb, out);
  };
  const auto backward = [&](int chunk, int mb, const Tensor& grad) {
    const int s = dualpipev_stage(r, chunk, P);
    Tensor grad_input = stages.backward_input(chunk, mb, grad);
    if (s == 0) return;
    FP8T_CHECK(grad_input.defined(), "pipeline: the backward of stage {} micro-batch {} returned no input gradient", s,
               mb);
    (dualpipev_rank(s - 1, P) == r ? grad_outputs : to_send_grad)
        .put(dualpipev_rank(s - 1, P) == r ? s - 1 : s, mb, grad_input);
  };
  // Each computation's span on the compute stream (timestamps after the waits for its inputs): its kernels' time.
  struct Span {
    PipeOp op;
    int chunk;
    int from, to;
  };
  std::vector<Span> spans;
  PipeTiming timing;
  ctx.synchronize();
  queue.reset();
  const double start = now_s();
  // On an error the side queue may still read sent tensors or write received ones: let it finish first.
  struct DrainOnError {
    SideQueue& queue;
    int exceptions = std::uncaught_exceptions();
    ~DrainOnError() {
      if (std::uncaught_exceptions() <= exceptions) return;
      try {
        queue.synchronize();
      } catch (...) {  // the error being thrown says more
      }
      queue.reset();
    }
  } drain{queue};
  for (const PipeAction& a : schedule.actions.at(static_cast<size_t>(r))) {
    switch (a.op) {
      case PipeOp::F: {
        const Tensor input = input_of(a.chunk, a.mb, a);
        const int from = queue.time_mark();
        forward(a.chunk, a.mb, input);
        spans.push_back({a.op, a.chunk, from, queue.time_mark()});
        break;
      }
      case PipeOp::B: {
        const Tensor grad = grad_of(a.chunk, a.mb, a);
        const int from = queue.time_mark();
        backward(a.chunk, a.mb, grad);
        spans.push_back({a.op, a.chunk, from, queue.time_mark()});
        break;
      }
      case PipeOp::W: {
        const int from = queue.time_mark();
        stages.backward_weight(a.chunk, a.mb);
        spans.push_back({a.op, a.chunk, from, queue.time_mark()});
        break;
      }
      case PipeOp::FB: {
        const Tensor input = input_of(a.chunk, a.mb, a);
        const Tensor grad = grad_of(a.chunk2, a.mb2, a);
        const int from = queue.time_mark();
        forward(a.chunk, a.mb, input);
        backward(a.chunk2, a.mb2, grad);
        stages.backward_weight(a.chunk2, a.mb2);
        spans.push_back({a.op, a.chunk, from, queue.time_mark()});
        break;
      }
      case PipeOp::Send: {
        const double t0 = now_s();
        const bool act = a.payload == Payload::Activation;
        Tensor t =
            (act ? to_send_act : to_send_grad).take(a.stage, a.mb, act ? "the output" : "the input gradient", a).tensor;
        queue.side_waits_for_compute();
        pp.send(t, a.peer, comm_ctx);
        in_flight.push_back(std::move(t));
        timing.transfer_s += now_s() - t0;
        break;
      }
      case PipeOp::Recv: {
        const double t0 = now_s();
        const bool act = a.payload == Payload::Activation;
        const int to_stage = act ? a.stage + 1 : a.stage - 1;
        const Tensor t = stages.receive_buffer(dualpipev_chunk(to_stage, P), a.mb, a.payload);
        queue.side_waits_for_compute();  // the buffer's memory may still be in use by queued computations
        pp.recv(t, a.peer, comm_ctx);
        (act ? inputs : grad_outputs).put(to_stage, a.mb, t, queue.side_mark());
        timing.transfer_s += now_s() - t0;
        break;
      }
    }
  }
  queue.synchronize();
  timing.step_s = now_s() - start;
  in_flight.clear();
  for (const Span& s : spans) {
    const double dt = queue.seconds_between(s.from, s.to);
    const size_t c = s.chunk == 0 ? 0 : 1;
    switch (s.op) {
      case PipeOp::F:
        timing.f_s += dt, ++timing.f;
        timing.chunk_f_s[c] += dt, ++timing.chunk_f[c];
        break;
      case PipeOp::B:
        timing.b_s += dt, ++timing.b;
        timing.chunk_b_s[c] += dt, ++timing.chunk_b[c];
        break;
      case PipeOp::W:
        timing.w_s += dt, ++timing.w;
        timing.chunk_w_s[c] += dt, ++timing.chunk_w[c];
        break;
      case PipeOp::FB:
        timing.fb_s += dt, ++timing.fb;
        break;
      case PipeOp::Send:
      case PipeOp::Recv:
        break;
    }
  }
  queue.reset();
  FP8T_CHECK(inputs.empty() && grad_outputs.empty() && to_send_act.empty() && to_send_grad.empty(),
             "pipeline: rank {} finished the schedule with tensors never used or sent", r);
  return timing;
}

std::vector<PipeTiming> gather_timings(Communicator& pp, const PipeTiming& mine, const ExecCtx& ctx) {
  constexpr size_t kFields = 22;
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
                               static_cast<double>(mine.fb),
                               mine.chunk_f_s[0],
                               mine.chunk_f_s[1],
                               mine.chunk_b_s[0],
                               mine.chunk_b_s[1],
                               mine.chunk_w_s[0],
                               mine.chunk_w_s[1],
                               static_cast<double>(mine.chunk_f[0]),
                               static_cast<double>(mine.chunk_f[1]),
                               static_cast<double>(mine.chunk_b[0]),
                               static_cast<double>(mine.chunk_b[1]),
                               static_cast<double>(mine.chunk_w[0]),
                               static_cast<double>(mine.chunk_w[1])};
  std::copy(own, own + kFields, m);
  const std::vector<double> all = sum_in_rank_order(pp, slots, ctx);
  std::vector<PipeTiming> out;
  for (int r = 0; r < pp.size(); ++r) {
    const double* v = all.data() + kFields * static_cast<size_t>(r);
    PipeTiming t;
    t.step_s = v[0], t.f_s = v[1], t.b_s = v[2], t.w_s = v[3], t.fb_s = v[4], t.transfer_s = v[5];
    t.f = std::llround(v[6]), t.b = std::llround(v[7]), t.w = std::llround(v[8]), t.fb = std::llround(v[9]);
    for (size_t c = 0; c < 2; ++c) {
      t.chunk_f_s[c] = v[10 + c], t.chunk_b_s[c] = v[12 + c], t.chunk_w_s[c] = v[14 + c];
      t.chunk_f[c] = std::llround(v[16 + c]), t.chunk_b[c] = std::llround(v[18 + c]);
      t.chunk_w[c] = std::llround(v[20 + c]);
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace fp8train::dist
