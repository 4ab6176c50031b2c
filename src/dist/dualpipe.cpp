// The DualPipeV schedule, its checker and simulator (see dualpipe.h).
#include "dist/dualpipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <tuple>
#include <utility>

#include "common/error.h"

namespace fp8train::dist {

int dualpipev_stage(int rank, int chunk, int ranks) { return chunk == 0 ? rank : 2 * ranks - 1 - rank; }
int dualpipev_rank(int stage, int ranks) { return stage < ranks ? stage : 2 * ranks - 1 - stage; }
int dualpipev_chunk(int stage, int ranks) { return stage < ranks ? 0 : 1; }

std::string PipeAction::str() const {
  switch (op) {
    case PipeOp::F:
      return fmt::format("F{}({})", chunk, mb);
    case PipeOp::B:
      return fmt::format("B{}({})", chunk, mb);
    case PipeOp::W:
      return fmt::format("W{}({})", chunk, mb);
    case PipeOp::FB:
      return fmt::format("F{}({})&B{}({})", chunk, mb, chunk2, mb2);
    case PipeOp::Send:
    case PipeOp::Recv:
      return fmt::format("{} {} of stage {} mb {} {} rank {}", op == PipeOp::Send ? "send" : "recv",
                         payload == Payload::Activation ? "activation" : "gradient", stage, mb,
                         op == PipeOp::Send ? "to" : "from", peer);
  }
  return "?";
}

namespace {

void check_shape(int ranks, int micro_batches) {
  FP8T_CHECK(ranks >= 2, "DualPipeV needs at least 2 pipeline ranks, got {}", ranks);
  FP8T_CHECK(micro_batches >= 2 * ranks,
             "DualPipeV on {} ranks needs at least {} micro-batches (2 x ranks: rank 0 alone starts 2 x ranks - 1 "
             "before the first comes back, and the steady phase needs one more), got {}",
             ranks, 2 * ranks, micro_batches);
}

// One rank's computations in DualPipeV order (the eight phases of dualpipe.h).
std::vector<PipeAction> rank_order(int r, int P, int M) {
  std::vector<PipeAction> a;
  int fwd[2] = {0, 0}, bwd[2] = {0, 0};
  std::deque<std::pair<int, int>> deferred;  // (chunk, mb) whose W waits, oldest first
  const auto F = [&](int c) { a.push_back(PipeAction::f(c, fwd[c]++)); };
  const auto full_backward = [&](int c) {
    const int m = bwd[c]++;
    a.push_back(PipeAction::b(c, m));
    a.push_back(PipeAction::w(c, m));
  };
  const auto input_backward = [&](int c) {
    const int m = bwd[c]++;
    a.push_back(PipeAction::b(c, m));
    deferred.emplace_back(c, m);
  };
  const auto weight_backward = [&] {
    const auto [c, m] = deferred.front();
    deferred.pop_front();
    a.push_back(PipeAction::w(c, m));
  };
  const auto overlapped = [&](int fc, int bc) {
    a.push_back(PipeAction::fb(fc, fwd[fc], bc, bwd[bc]));
    ++fwd[fc];
    ++bwd[bc];
  };
  const int below = P - r - 1;  // ranks after this one
  for (int i = 0; i < 2 * below; ++i) F(0);
  for (int i = 0; i <= r; ++i) {
    F(0);
    F(1);
  }
  for (int i = 0; i < below; ++i) {
    input_backward(1);
    weight_backward();
    F(1);
  }
  for (int i = 0; i < M - 2 * P + r + 1; ++i) {
    if (i == 0 && r == P - 1) {
      // The turn of the V: this B1 needs the output of the F0 just before it, so they cannot overlap.
      F(0);
      full_backward(1);
    } else {
      overlapped(0, 1);
    }
    overlapped(1, 0);
  }
  for (int i = 0; i < below; ++i) {
    full_backward(1);
    overlapped(1, 0);
  }
  // Cool-down: from the middle on, defer W so that it fills the idle time at the end.
  bool defer = false;
  for (int i = 0; i <= r; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) defer = true;
    defer ? input_backward(1) : full_backward(1);
    if (i == (r + 1) / 2 && r % 2 == 0) defer = true;
    defer ? input_backward(0) : full_backward(0);
  }
  for (int i = 0; i < below; ++i) {
    weight_backward();
    input_backward(0);
  }
  while (!deferred.empty()) weight_backward();
  return a;
}

// The stage and micro-batch of the forward / backward part of a computation (FB has both).
struct Part {
  int stage, mb;
};

// Per (stage, mb) time table; NaN: not yet.
class Table {
 public:
  Table(int stages, int mbs) : mbs_(mbs), v_(static_cast<size_t>(stages) * static_cast<size_t>(mbs), std::nan("")) {}
  double& at(int stage, int mb) {
    return v_[static_cast<size_t>(stage) * static_cast<size_t>(mbs_) + static_cast<size_t>(mb)];
  }
  bool has(int stage, int mb) { return !std::isnan(at(stage, mb)); }

 private:
  int mbs_;
  std::vector<double> v_;
};

}  // namespace

PipeSchedule dualpipev_compute_order(int ranks, int micro_batches) {
  check_shape(ranks, micro_batches);
  PipeSchedule s;
  s.ranks = ranks;
  s.micro_batches = micro_batches;
  for (int r = 0; r < ranks; ++r) s.actions.push_back(rank_order(r, ranks, micro_batches));
  return s;
}

PipeSchedule dualpipev_schedule(int ranks, int micro_batches) {
  const PipeSchedule order = dualpipev_compute_order(ranks, micro_batches);
  const PipeSimulation sim = simulate(order, ChunkTimes{});
  const int P = ranks, S = 2 * ranks;
  // Every message with its time: (time, stage, payload, mb) orders them the same way on every rank.
  struct Item {
    double time;
    int kind;  // 0 transfer, 1 computation (a transfer first when times tie)
    int stage, payload, mb, seq;
    PipeAction action;
  };
  std::vector<std::vector<Item>> items(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    int seq = 0;
    for (const PipeSpan& span : sim.spans[static_cast<size_t>(r)]) {
      const PipeAction& a = span.action;
      items[static_cast<size_t>(r)].push_back({span.start, 1, 0, 0, 0, seq++, a});
      const auto message = [&](Payload payload, int stage, int mb, int to) {
        PipeAction send{PipeOp::Send};
        send.payload = payload;
        send.stage = stage;
        send.mb = mb;
        send.peer = to;
        PipeAction recv = send;
        recv.op = PipeOp::Recv;
        recv.peer = r;
        const int p = static_cast<int>(payload);
        items[static_cast<size_t>(r)].push_back({span.end, 0, stage, p, mb, 0, send});
        items[static_cast<size_t>(to)].push_back({span.end, 0, stage, p, mb, 0, recv});
      };
      const bool forward = a.op == PipeOp::F || a.op == PipeOp::FB;
      const bool backward = a.op == PipeOp::B || a.op == PipeOp::FB;
      if (forward) {
        const int s = dualpipev_stage(r, a.chunk, P);
        if (s + 1 < S && dualpipev_rank(s + 1, P) != r) message(Payload::Activation, s, a.mb, dualpipev_rank(s + 1, P));
      }
      if (backward) {
        const int chunk = a.op == PipeOp::FB ? a.chunk2 : a.chunk, mb = a.op == PipeOp::FB ? a.mb2 : a.mb;
        const int s = dualpipev_stage(r, chunk, P);
        if (s > 0 && dualpipev_rank(s - 1, P) != r) message(Payload::Gradient, s, mb, dualpipev_rank(s - 1, P));
      }
    }
  }
  PipeSchedule out;
  out.ranks = ranks;
  out.micro_batches = micro_batches;
  for (auto& list : items) {
    std::stable_sort(list.begin(), list.end(), [](const Item& x, const Item& y) {
      return std::tie(x.time, x.kind, x.stage, x.payload, x.mb, x.seq) <
             std::tie(y.time, y.kind, y.stage, y.payload, y.mb, y.seq);
    });
    std::vector<PipeAction> actions;
    for (const Item& i : list) actions.push_back(i.action);
    out.actions.push_back(std::move(actions));
  }
  check_schedule(out);
  return out;
}

void check_schedule(const PipeSchedule& schedule) {
  const int P = schedule.ranks, M = schedule.micro_batches, S = 2 * P;
  FP8T_CHECK(P >= 1 && M >= 1 && static_cast<int>(schedule.actions.size()) == P,
             "pipeline schedule: {} rank lists for {} ranks", schedule.actions.size(), P);
  // Each (stage, mb) exactly once per kind, on the rank holding the stage.
  std::vector<int> count[3];
  for (auto& c : count) c.assign(static_cast<size_t>(S * M), 0);
  const auto tally = [&](int kind, int r, int chunk, int mb, const PipeAction& a) {
    FP8T_CHECK(chunk == 0 || chunk == 1, "pipeline schedule: rank {} action {} names chunk {}", r, a.str(), chunk);
    FP8T_CHECK(mb >= 0 && mb < M, "pipeline schedule: rank {} action {} names micro-batch {} of {}", r, a.str(), mb, M);
    ++count[kind][static_cast<size_t>(dualpipev_stage(r, chunk, P) * M + mb)];
  };
  for (int r = 0; r < P; ++r)
    for (const PipeAction& a : schedule.actions[static_cast<size_t>(r)]) {
      if (a.op == PipeOp::F) tally(0, r, a.chunk, a.mb, a);
      if (a.op == PipeOp::B) tally(1, r, a.chunk, a.mb, a);
      if (a.op == PipeOp::W) tally(2, r, a.chunk, a.mb, a);
      if (a.op == PipeOp::FB) {
        tally(0, r, a.chunk, a.mb, a);
        tally(1, r, a.chunk2, a.mb2, a);
        tally(2, r, a.chunk2, a.mb2, a);
      }
    }
  for (int k = 0; k < 3; ++k)
    for (int s = 0; s < S; ++s)
      for (int m = 0; m < M; ++m) {
        const int n = count[k][static_cast<size_t>(s * M + m)];
        FP8T_CHECK(n == 1, "pipeline schedule: stage {} (rank {}) micro-batch {} has {} {} instead of one", s,
                   dualpipev_rank(s, P), m, n,
                   k == 0   ? "forwards"
                   : k == 1 ? "input backwards"
                            : "weight backwards");
      }

  // Run it: computations need their inputs on their rank; a Send/Recv waits until its peer is at the matching one.
  // have_act(s, m): rank(s) holds the input of stage s (stage 0: always); have_grad(s, m): rank(s) holds the
  // gradient of stage s's output (the last stage: always, from its loss).
  Table input(S, M), grad_out(S, M), fdone(S, M), bdone(S, M), wdone(S, M), act_out(S, M), grad_in(S, M);
  std::vector<size_t> pc(static_cast<size_t>(P), 0);
  const auto run_forward = [&](int r, int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    FP8T_CHECK(s == 0 || input.has(s, mb), "pipeline schedule: rank {} runs {} before its input is on the rank", r,
               a.str());
    fdone.at(s, mb) = 1;
    if (s + 1 < S && dualpipev_rank(s + 1, P) == r) input.at(s + 1, mb) = 1;
    act_out.at(s, mb) = 1;
  };
  const auto run_backward = [&](int r, int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    FP8T_CHECK(fdone.has(s, mb), "pipeline schedule: rank {} runs {} before the forward it differentiates", r, a.str());
    FP8T_CHECK(s == S - 1 || grad_out.has(s, mb),
               "pipeline schedule: rank {} runs {} before the gradient of its output is on the rank", r, a.str());
    bdone.at(s, mb) = 1;
    if (s > 0 && dualpipev_rank(s - 1, P) == r) grad_out.at(s - 1, mb) = 1;
    grad_in.at(s, mb) = 1;
  };
  const auto run_weight = [&](int r, int chunk, int mb, const PipeAction& a) {
    const int s = dualpipev_stage(r, chunk, P);
    FP8T_CHECK(bdone.has(s, mb), "pipeline schedule: rank {} runs {} before its input backward", r, a.str());
    wdone.at(s, mb) = 1;
  };
  const auto check_transfer = [&](int r, const PipeAction& a) {
    const bool act = a.payload == Payload::Activation;
    FP8T_CHECK(a.stage >= 0 && a.stage < S && a.mb >= 0 && a.mb < M, "pipeline schedule: rank {}: {} is out of range",
               r, a.str());
    const int from = dualpipev_rank(a.stage, P);
    const int to_stage = act ? a.stage + 1 : a.stage - 1;
    FP8T_CHECK(to_stage >= 0 && to_stage < S, "pipeline schedule: rank {}: {} has no receiving stage", r, a.str());
    const int to = dualpipev_rank(to_stage, P);
    FP8T_CHECK(from != to, "pipeline schedule: rank {}: {} stays on rank {}", r, a.str(), from);
    if (a.op == PipeOp::Send) {
      FP8T_CHECK(r == from && a.peer == to, "pipeline schedule: rank {}: {} should go from rank {} to rank {}", r,
                 a.str(), from, to);
      FP8T_CHECK(act ? act_out.has(a.stage, a.mb) : grad_in.has(a.stage, a.mb),
                 "pipeline schedule: rank {} runs {} before computing it", r, a.str());
    } else {
      FP8T_CHECK(r == to && a.peer == from, "pipeline schedule: rank {}: {} should go from rank {} to rank {}", r,
                 a.str(), from, to);
    }
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      const auto& list = schedule.actions[static_cast<size_t>(r)];
      while (pc[static_cast<size_t>(r)] < list.size()) {
        const PipeAction& a = list[pc[static_cast<size_t>(r)]];
        if (a.op == PipeOp::F) {
          run_forward(r, a.chunk, a.mb, a);
        } else if (a.op == PipeOp::B) {
          run_backward(r, a.chunk, a.mb, a);
        } else if (a.op == PipeOp::W) {
          run_weight(r, a.chunk, a.mb, a);
        } else if (a.op == PipeOp::FB) {
          run_forward(r, a.chunk, a.mb, a);
          run_backward(r, a.chunk2, a.mb2, a);
          run_weight(r, a.chunk2, a.mb2, a);
        } else {
          check_transfer(r, a);
          FP8T_CHECK(a.peer >= 0 && a.peer < P, "pipeline schedule: rank {}: {} names no rank", r, a.str());
          const auto& peer_list = schedule.actions[static_cast<size_t>(a.peer)];
          const size_t peer_pc = pc[static_cast<size_t>(a.peer)];
          if (peer_pc >= peer_list.size()) break;
          const PipeAction& b = peer_list[peer_pc];
          const bool match = b.is_transfer() && b.op != a.op && b.peer == r && b.payload == a.payload &&
                             b.stage == a.stage && b.mb == a.mb;
          if (!match) break;  // wait for the peer
          check_transfer(a.peer, b);
          const PipeAction& recv = a.op == PipeOp::Recv ? a : b;
          (recv.payload == Payload::Activation ? input.at(recv.stage + 1, recv.mb)
                                               : grad_out.at(recv.stage - 1, recv.mb)) = 1;
          ++pc[static_cast<size_t>(a.peer)];
        }
        ++pc[static_cast<size_t>(r)];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < P; ++r) {
    const auto& list = schedule.actions[static_cast<size_t>(r)];
    const size_t i = pc[static_cast<size_t>(r)];
    if (i < list.size()) stuck += fmt::format("{}rank {} waits at {}", stuck.empty() ? "" : "; ", r, list[i].str());
  }
  FP8T_CHECK(stuck.empty(), "pipeline schedule deadlocks with blocking send/recv: {}", stuck);
}

void ChunkTimes::validate() const {
  FP8T_CHECK(std::isfinite(f) && std::isfinite(b) && std::isfinite(w) && std::isfinite(fb),
             "chunk times must be finite numbers");
  FP8T_CHECK(f > 0, "the forward time F must be positive, got {}", f);
  FP8T_CHECK(w >= 0, "the weight-backward time W must not be negative, got {}", w);
  FP8T_CHECK(b > w, "the full backward time B ({}) must exceed its weight part W ({}): B covers input and weights", b,
             w);
  // A pair runs both chunks, so it cannot take less than the longer of them.
  FP8T_CHECK(fb < 0 || fb >= std::max(f, b),
             "the overlapped F&B time ({}) must be at least the longer of F ({}) and B ({}): the pair runs both", fb, f,
             b);
}

double PipeSimulation::max_bubble() const {
  return bubble.empty() ? 0.0 : *std::max_element(bubble.begin(), bubble.end());
}

PipeSimulation simulate(const PipeSchedule& schedule, const ChunkTimes& times) {
  return simulate(schedule, std::vector<ChunkTimes>(static_cast<size_t>(schedule.ranks), times));
}

PipeSimulation simulate(const PipeSchedule& schedule, const std::vector<ChunkTimes>& rank_times) {
  FP8T_CHECK(rank_times.size() == static_cast<size_t>(schedule.ranks),
             "pipeline simulation: {} ranks' chunk times for a schedule of {} ranks", rank_times.size(),
             schedule.ranks);
  for (const ChunkTimes& t : rank_times) t.validate();
  const int P = schedule.ranks, M = schedule.micro_batches, S = 2 * P;
  // Ready times: act(s, m) the input of stage s, grad(s, m) the gradient of stage s's output, bend(s, m) its input
  // backward, fend(s, m) its forward.
  Table act(S, M), grad(S, M), fend(S, M), bend(S, M);
  PipeSimulation sim;
  sim.spans.resize(static_cast<size_t>(P));
  std::vector<size_t> pc(static_cast<size_t>(P), 0);
  std::vector<double> free_at(static_cast<size_t>(P), 0.0);
  const auto forward_ready = [&](int r, int chunk, int mb, double& t) {
    const int s = dualpipev_stage(r, chunk, P);
    if (s == 0) return true;
    if (!act.has(s, mb)) return false;
    t = std::max(t, act.at(s, mb));
    return true;
  };
  const auto backward_ready = [&](int r, int chunk, int mb, double& t) {
    const int s = dualpipev_stage(r, chunk, P);
    if (!fend.has(s, mb)) return false;
    t = std::max(t, fend.at(s, mb));
    if (s == S - 1) return true;
    if (!grad.has(s, mb)) return false;
    t = std::max(t, grad.at(s, mb));
    return true;
  };
  const auto forward_done = [&](int r, int chunk, int mb, double t) {
    const int s = dualpipev_stage(r, chunk, P);
    fend.at(s, mb) = t;
    if (s + 1 < S) act.at(s + 1, mb) = t;
  };
  const auto backward_done = [&](int r, int chunk, int mb, double t) {
    const int s = dualpipev_stage(r, chunk, P);
    bend.at(s, mb) = t;
    if (s > 0) grad.at(s - 1, mb) = t;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < P; ++r) {
      const auto& list = schedule.actions[static_cast<size_t>(r)];
      size_t& i = pc[static_cast<size_t>(r)];
      for (; i < list.size(); ++i) {
        const PipeAction& a = list[i];
        if (a.is_transfer()) continue;
        const ChunkTimes& times = rank_times[static_cast<size_t>(r)];
        double start = free_at[static_cast<size_t>(r)], length = 0;
        bool ready = true;
        if (a.op == PipeOp::F) {
          ready = forward_ready(r, a.chunk, a.mb, start);
          length = times.f;
        } else if (a.op == PipeOp::B) {
          ready = backward_ready(r, a.chunk, a.mb, start);
          length = times.b - times.w;
        } else if (a.op == PipeOp::W) {
          const int s = dualpipev_stage(r, a.chunk, P);
          ready = bend.has(s, a.mb);
          if (ready) start = std::max(start, bend.at(s, a.mb));
          length = times.w;
        } else {
          ready = forward_ready(r, a.chunk, a.mb, start) && backward_ready(r, a.chunk2, a.mb2, start);
          length = times.overlapped();
        }
        if (!ready) break;
        const double end = start + length;
        if (a.op == PipeOp::F || a.op == PipeOp::FB) forward_done(r, a.chunk, a.mb, end);
        if (a.op == PipeOp::B) backward_done(r, a.chunk, a.mb, end);
        if (a.op == PipeOp::FB) backward_done(r, a.chunk2, a.mb2, end);
        sim.spans[static_cast<size_t>(r)].push_back({start, end, a});
        free_at[static_cast<size_t>(r)] = end;
        progress = true;
      }
    }
  }
  for (int r = 0; r < P; ++r) {
    const auto& list = schedule.actions[static_cast<size_t>(r)];
    const size_t i = pc[static_cast<size_t>(r)];
    FP8T_CHECK(i == list.size(), "pipeline schedule cannot finish: rank {} waits forever at {}", r, list[i].str());
  }
  for (int r = 0; r < P; ++r) {
    double busy = 0;
    for (const PipeSpan& span : sim.spans[static_cast<size_t>(r)]) {
      busy += span.end - span.start;
      sim.makespan = std::max(sim.makespan, span.end);
    }
    sim.busy.push_back(busy);
  }
  for (double busy : sim.busy) sim.bubble.push_back(sim.makespan - busy);
  return sim;
}

double dualpipev_bubble_formula(int stages, const ChunkTimes& times) {
  return (stages / 2.0 - 1.0) * (times.overlapped() + times.b - 3.0 * times.w);
}

std::string render_timeline(const PipeSimulation& sim, const ChunkTimes& times) {
  const auto whole = [](double x, const char* what) {
    FP8T_CHECK(x >= 0 && x == std::floor(x) && x <= 100000,
               "the timeline prints one cell per time unit: {} = {} "
               "must be a whole number",
               what, x);
    return static_cast<int64_t>(x);
  };
  whole(times.f, "F");
  whole(times.b, "B");
  whole(times.w, "W");
  whole(times.overlapped(), "F&B");
  const int64_t width = whole(sim.makespan, "the makespan");
  const auto mb_char = [](int mb) {
    return mb < 10 ? static_cast<char>('0' + mb) : mb < 36 ? static_cast<char>('a' + mb - 10) : '+';
  };
  const auto letter = [](char upper, int chunk) { return chunk == 0 ? upper : static_cast<char>(upper - 'A' + 'a'); };
  std::string out;
  const int P = static_cast<int>(sim.spans.size());
  for (int r = 0; r < P; ++r) {
    std::string ops(static_cast<size_t>(width), '.'), mbs(static_cast<size_t>(width), ' ');
    for (const PipeSpan& span : sim.spans[static_cast<size_t>(r)]) {
      const PipeAction& a = span.action;
      const int64_t begin = static_cast<int64_t>(span.start), end = static_cast<int64_t>(span.end);
      // An F&B pair: its forward's share of the cells (F of F + B), at least one cell each when there are two.
      int64_t split = end;
      if (a.op == PipeOp::FB) {
        split = begin +
                static_cast<int64_t>(std::llround(static_cast<double>(end - begin) * times.f / (times.f + times.b)));
        if (end - begin >= 2) split = std::clamp(split, begin + 1, end - 1);
      }
      for (int64_t t = begin; t < end; ++t) {
        char c = 'F';
        int chunk = a.chunk, mb = a.mb;
        if (a.op == PipeOp::B) c = 'B';
        if (a.op == PipeOp::W) c = 'W';
        if (a.op == PipeOp::FB && t >= split) {
          c = 'B';
          chunk = a.chunk2;
          mb = a.mb2;
        }
        ops[static_cast<size_t>(t)] = letter(c, chunk);
        mbs[static_cast<size_t>(t)] = mb_char(mb);
      }
    }
    out += fmt::format("rank {:<3} {}\n", r, ops);
    out += fmt::format("{:<8} {}\n", "", mbs);
  }
  return out;
}

}  // namespace fp8train::dist
