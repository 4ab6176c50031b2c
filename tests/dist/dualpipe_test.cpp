// The DualPipeV schedule without ranks: the V layout; every (stage, micro-batch) computed forward, input-backward
// and weight-backward exactly once on the rank holding the stage (counted here, independently of check_schedule);
// the phase structure (warm-up, overlapped pairs); the activations and deferred W a rank holds; transfers one per
// crossing; check_schedule catching broken schedules (a missing W, a computation before its input, a deadlock of
// blocking send/recv); the simulated bubble against DeepSeek's (PP/2−1)(F&B+B−3W) for 2, 4 and 8 ranks; the text
// timeline; refused arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "../common/error_of.h"
#include "common/error.h"
#include "dist/dualpipe.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {

using test_util::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::vector<std::pair<int, int>> kShapes = {{2, 4}, {2, 5}, {3, 6}, {4, 8}, {4, 10}, {4, 13}, {8, 16}, {8, 20}};

}  // namespace

TEST(DualPipeVSchedule, VLayout) {
  // 4 ranks, 8 stages: rank 0 holds 0 and 7, rank 3 holds 3 and 4.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(dualpipev_stage(r, 0, 4), r);
    EXPECT_EQ(dualpipev_stage(r, 1, 4), 7 - r);
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(dualpipev_rank(dualpipev_stage(r, c, 4), 4), r);
      EXPECT_EQ(dualpipev_chunk(dualpipev_stage(r, c, 4), 4), c);
    }
  }
}

TEST(DualPipeVSchedule, EveryStageAndMicroBatchGetsOneForwardBackwardAndWeightOnItsRank) {
  for (const auto& [P, M] : kShapes) {
    SCOPED_TRACE(::testing::Message() << P << " ranks, " << M << " micro-batches");
    const PipeSchedule s = dualpipev_schedule(P, M);
    ASSERT_EQ(static_cast<int>(s.actions.size()), P);
    // counts[kind][stage][mb], kind 0 F, 1 B, 2 W; the rank that ran it.
    std::vector<std::vector<std::vector<int>>> counts(3, std::vector<std::vector<int>>(2 * P, std::vector<int>(M, 0)));
    for (int r = 0; r < P; ++r)
      for (const PipeAction& a : s.actions[static_cast<size_t>(r)]) {
        const auto add = [&](int kind, int chunk, int mb) {
          ASSERT_TRUE(chunk == 0 || chunk == 1);
          ASSERT_TRUE(mb >= 0 && mb < M);
          ++counts[static_cast<size_t>(kind)][static_cast<size_t>(chunk == 0 ? r : 2 * P - 1 - r)]
                  [static_cast<size_t>(mb)];
        };
        if (a.op == PipeOp::F) add(0, a.chunk, a.mb);
        if (a.op == PipeOp::B) add(1, a.chunk, a.mb);
        if (a.op == PipeOp::W) add(2, a.chunk, a.mb);
        if (a.op == PipeOp::FB) {
          add(0, a.chunk, a.mb);
          add(1, a.chunk2, a.mb2);
          add(2, a.chunk2, a.mb2);
        }
      }
    for (const auto& kind : counts)
      for (const auto& stage : kind)
        for (int n : stage) EXPECT_EQ(n, 1);
  }
}

TEST(DualPipeVSchedule, OnARankForwardPrecedesBackwardPrecedesWeight) {
  for (const auto& [P, M] : kShapes) {
    const PipeSchedule s = dualpipev_schedule(P, M);
    for (int r = 0; r < P; ++r) {
      // Position of each part per (chunk, mb).
      std::vector<int> f(2 * M, -1), b(2 * M, -1), w(2 * M, -1);
      const auto& list = s.actions[static_cast<size_t>(r)];
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        const PipeAction& a = list[static_cast<size_t>(i)];
        if (a.op == PipeOp::F || a.op == PipeOp::FB) f[static_cast<size_t>(a.chunk * M + a.mb)] = i;
        if (a.op == PipeOp::B) b[static_cast<size_t>(a.chunk * M + a.mb)] = i;
        if (a.op == PipeOp::W) w[static_cast<size_t>(a.chunk * M + a.mb)] = i;
        if (a.op == PipeOp::FB)
          b[static_cast<size_t>(a.chunk2 * M + a.mb2)] = w[static_cast<size_t>(a.chunk2 * M + a.mb2)] = i;
      }
      for (int k = 0; k < 2 * M; ++k) {
        EXPECT_LT(f[static_cast<size_t>(k)], b[static_cast<size_t>(k)])
            << "rank " << r << " chunk " << k / M << " mb " << k % M;
        EXPECT_LE(b[static_cast<size_t>(k)], w[static_cast<size_t>(k)])
            << "rank " << r << " chunk " << k / M << " mb " << k % M;
      }
    }
  }
}

TEST(DualPipeVSchedule, PhaseStructure) {
  for (const auto& [P, M] : kShapes) {
    SCOPED_TRACE(::testing::Message() << P << " ranks, " << M << " micro-batches");
    const PipeSchedule s = dualpipev_compute_order(P, M);
    for (int r = 0; r < P; ++r) {
      const auto& list = s.actions[static_cast<size_t>(r)];
      // Warm-up: 2(P−r−1) + 1 forwards of chunk 0 before the first forward of chunk 1.
      int warm = 0;
      while (list[static_cast<size_t>(warm)].op == PipeOp::F && list[static_cast<size_t>(warm)].chunk == 0) ++warm;
      EXPECT_EQ(warm, 2 * (P - r - 1) + 1) << "rank " << r;
      // Overlapped pairs: 2 per steady iteration (the turn of the V on the last rank not overlapped) and one per
      // step of phase 5.
      const auto pairs =
          std::count_if(list.begin(), list.end(), [](const PipeAction& a) { return a.op == PipeOp::FB; });
      EXPECT_EQ(pairs, 2 * (M - 2 * P + r + 1) - (r == P - 1 ? 1 : 0) + (P - r - 1)) << "rank " << r;
      // The last action is a weight backward (deferred ones fill the cool-down).
      EXPECT_EQ(list.back().op, PipeOp::W);
    }
  }
}

TEST(DualPipeVSchedule, InFlightBounds) {
  // What a rank must keep: the activations of every (chunk, mb) between its forward and its weight backward — at
  // most 2P + 1, DeepSeek's "PP + 1" activations per device with PP = 2P stages — and at most P deferred W.
  for (const auto& [P, M] : kShapes) {
    const PipeSchedule s = dualpipev_compute_order(P, M);
    int most_live = 0, most_deferred = 0;
    for (const auto& list : s.actions) {
      std::set<std::pair<int, int>> live, deferred;
      for (const PipeAction& a : list) {
        if (a.op == PipeOp::F || a.op == PipeOp::FB) live.insert({a.chunk, a.mb});
        if (a.op == PipeOp::FB) live.erase({a.chunk2, a.mb2});
        if (a.op == PipeOp::B) deferred.insert({a.chunk, a.mb});
        if (a.op == PipeOp::W) {
          deferred.erase({a.chunk, a.mb});
          live.erase({a.chunk, a.mb});
        }
        most_live = std::max(most_live, static_cast<int>(live.size()));
        most_deferred = std::max(most_deferred, static_cast<int>(deferred.size()));
      }
      EXPECT_TRUE(live.empty());
    }
    EXPECT_EQ(most_live, 2 * P + 1) << P << " ranks, " << M << " micro-batches";
    EXPECT_EQ(most_deferred, P) << P << " ranks, " << M << " micro-batches";
  }
}

TEST(DualPipeVSchedule, OneTransferPerCrossingAndMessageInEachDirection) {
  for (const auto& [P, M] : kShapes) {
    const PipeSchedule s = dualpipev_schedule(P, M);
    for (int r = 0; r < P; ++r) {
      int sends = 0, recvs = 0;
      for (const PipeAction& a : s.actions[static_cast<size_t>(r)]) {
        if (a.op == PipeOp::Send) ++sends;
        if (a.op == PipeOp::Recv) ++recvs;
        if (a.is_transfer()) {
          EXPECT_EQ(std::abs(a.peer - r), 1) << "only neighbouring ranks talk";
        }
      }
      // Rank r's boundaries with other ranks: r → r+1 going down (r < P−1), and coming up 2P−1−r → 2P−r (r > 0):
      // an activation and a gradient each way per micro-batch.
      const int crossings = (r < P - 1 ? 1 : 0) + (r > 0 ? 1 : 0);
      EXPECT_EQ(sends, 2 * crossings * M);
      EXPECT_EQ(recvs, 2 * crossings * M);
    }
  }
}

TEST(DualPipeVSchedule, CheckerCatchesBrokenSchedules) {
  const PipeSchedule good = dualpipev_schedule(4, 8);
  EXPECT_NO_THROW(check_schedule(good));

  PipeSchedule missing_w = good;
  auto& l1 = missing_w.actions[2];
  l1.erase(std::find_if(l1.begin(), l1.end(), [](const PipeAction& a) { return a.op == PipeOp::W; }));
  EXPECT_TRUE(contains(error_of([&] { check_schedule(missing_w); }), "weight backwards"))
      << error_of([&] { check_schedule(missing_w); });

  // Rank 1's first forward of chunk 1 moved before the receive of its input.
  PipeSchedule early = good;
  auto& l2 = early.actions[1];
  const auto f1 =
      std::find_if(l2.begin(), l2.end(), [](const PipeAction& a) { return a.op == PipeOp::F && a.chunk == 1; });
  const PipeAction moved = *f1;
  l2.erase(f1);
  l2.insert(l2.begin(), moved);
  EXPECT_TRUE(contains(error_of([&] { check_schedule(early); }), "before its input"))
      << error_of([&] { check_schedule(early); });

  // Two receives on rank 0 from rank 1 swapped: with blocking send/recv neither side can go on.
  PipeSchedule swapped = good;
  auto& l3 = swapped.actions[0];
  std::vector<size_t> recvs;
  for (size_t i = 0; i < l3.size(); ++i)
    if (l3[i].op == PipeOp::Recv) recvs.push_back(i);
  ASSERT_GE(recvs.size(), 2u);
  std::swap(l3[recvs[0]], l3[recvs[1]]);
  EXPECT_TRUE(contains(error_of([&] { check_schedule(swapped); }), "deadlock"))
      << error_of([&] { check_schedule(swapped); });

  // A send to the wrong rank.
  PipeSchedule misrouted = good;
  for (PipeAction& a : misrouted.actions[1])
    if (a.op == PipeOp::Send) {
      a.peer = 3;
      break;
    }
  EXPECT_TRUE(contains(error_of([&] { check_schedule(misrouted); }), "should go from rank"));
}

TEST(DualPipeVSchedule, SimulatedBubbleMatchesDeepSeekFormulaWhenFEqualsBInputEqualsW) {
  // DeepSeek's table assumes chunks where the forward, the input backward and the weight backward take about the
  // same time (B = 2W, F = W); then the largest per-rank bubble equals (PP/2−1)(F&B+B−3W), PP = 2 × ranks
  // stages, for any overlap gain B ≤ F&B ≤ F + B.
  for (int P : {2, 4, 8}) {
    for (int M : {2 * P, 3 * P + 1}) {
      for (double unit : {1.0, 2.0}) {
        for (double fb : {3 * unit, 2.5 * unit, 2 * unit}) {
          ChunkTimes t;
          t.f = unit;
          t.b = 2 * unit;
          t.w = unit;
          t.fb = fb;
          const PipeSimulation sim = simulate(dualpipev_schedule(P, M), t);
          EXPECT_DOUBLE_EQ(sim.max_bubble(), dualpipev_bubble_formula(2 * P, t))
              << P << " ranks, " << M << " micro-batches, F " << t.f << " B " << t.b << " W " << t.w << " F&B " << fb;
          for (int r = 0; r < P; ++r)
            EXPECT_DOUBLE_EQ(sim.busy[static_cast<size_t>(r)] + sim.bubble[static_cast<size_t>(r)], sim.makespan);
        }
      }
    }
  }
}

TEST(DualPipeVSchedule, BubbleOnEachRankAndWhatDeferringWSaves) {
  // With F&B = F + B every rank does M(2F + 2B) of work; 4 ranks, F 1, B 2, W 1: bubble 3 × 2 = 6 on each.
  const PipeSimulation sim = simulate(dualpipev_schedule(4, 10), ChunkTimes{});
  EXPECT_EQ(sim.makespan, 66);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(sim.busy[static_cast<size_t>(r)], 60);
    EXPECT_EQ(sim.bubble[static_cast<size_t>(r)], 6);
  }
  // When the pairs gain from overlap, the ranks' work differs and deferred weight backwards fill the gaps:
  // without the split of backward into B and W (every W right after its B), the bubble doubles.
  ChunkTimes gain;
  gain.fb = 2;
  const PipeSimulation split = simulate(dualpipev_schedule(4, 10), gain);
  EXPECT_EQ(split.max_bubble(), 3);
  PipeSchedule no_split = dualpipev_compute_order(4, 10);
  for (auto& list : no_split.actions) {
    std::vector<PipeAction> out;
    for (const PipeAction& a : list) {
      if (a.op == PipeOp::W) continue;
      out.push_back(a);
      if (a.op == PipeOp::B) out.push_back(PipeAction::w(a.chunk, a.mb));
    }
    list = out;
  }
  EXPECT_EQ(simulate(no_split, gain).max_bubble(), 6);
}

// Each rank's own chunk times: equal ones are the uniform simulation; a rank whose stages cost more (rank 0 with the
// embedding and the head) sets the pace, so it idles least and every other rank idles by about the difference.
TEST(DualPipeVSchedule, SimulationWithEachRanksOwnTimes) {
  const PipeSchedule order = dualpipev_compute_order(4, 10);
  const ChunkTimes t;  // F 1, B 2, W 1: 6 on each rank
  const PipeSimulation uniform = simulate(order, t);
  const PipeSimulation same = simulate(order, std::vector<ChunkTimes>(4, t));
  EXPECT_EQ(same.makespan, uniform.makespan);
  EXPECT_EQ(same.bubble, uniform.bubble);
  ChunkTimes slow;  // rank 0: F 2, B 3, W 1 (+1 forward, +1 input backward per chunk and micro-batch)
  slow.f = 2;
  slow.b = 3;
  const PipeSimulation skewed = simulate(order, {slow, t, t, t});
  // rank 0's 10 micro-batches x 2 chunks x (2 + 3) = 100 are the whole step: it never waits, and the others, with
  // their 60, wait 40 (uniformly: 66, 6 each)
  EXPECT_EQ(skewed.makespan, 100);
  EXPECT_EQ(skewed.busy[0], 100);
  EXPECT_EQ(skewed.bubble[0], 0);
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(skewed.busy[static_cast<size_t>(r)], 60);
    EXPECT_EQ(skewed.bubble[static_cast<size_t>(r)], 40) << "rank " << r;
  }
  EXPECT_TRUE(contains(error_of([&] { simulate(order, std::vector<ChunkTimes>(3, t)); }), "3 ranks' chunk times"));
}

TEST(DualPipeVSchedule, TimelineHasOneCellPerTimeUnit) {
  const ChunkTimes t;
  const PipeSimulation sim = simulate(dualpipev_schedule(2, 4), t);
  const std::string text = render_timeline(sim, t);
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  ASSERT_EQ(lines.size(), 4u);
  for (int r = 0; r < 2; ++r) {
    const std::string cells = lines[static_cast<size_t>(2 * r)].substr(9);
    EXPECT_EQ(lines[static_cast<size_t>(2 * r)].substr(0, 9), "rank " + std::to_string(r) + "   ");
    EXPECT_EQ(static_cast<double>(cells.size()), sim.makespan);
    EXPECT_EQ(static_cast<double>(std::count(cells.begin(), cells.end(), '.')), sim.bubble[static_cast<size_t>(r)]);
    // Each chunk's forward cells: one per micro-batch (F = 1) outside pairs; rank 0 starts with F of mb 0.
    EXPECT_EQ(cells[0], r == 0 ? 'F' : '.');
    EXPECT_EQ(lines[static_cast<size_t>(2 * r + 1)].substr(9).size(), cells.size());
  }
  ChunkTimes half = t;
  half.f = 0.5;
  EXPECT_TRUE(
      contains(error_of([&] { render_timeline(simulate(dualpipev_schedule(2, 4), half), half); }), "whole number"));
}

TEST(DualPipeVSchedule, RefusesWhatItCannotSchedule) {
  EXPECT_TRUE(contains(error_of([] { dualpipev_schedule(1, 8); }), "at least 2 pipeline ranks"));
  EXPECT_TRUE(contains(error_of([] { dualpipev_schedule(4, 7); }), "at least 8 micro-batches"));
  ChunkTimes t;
  t.w = 2;
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "must exceed its weight part"));
  t = ChunkTimes{};
  t.f = 0;
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "forward time F must be positive"));
  t = ChunkTimes{};
  t.fb = 1.5;
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "must be at least the longer of F (1) and B (2)"));
}
