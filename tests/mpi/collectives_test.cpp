// The MPI communicator against serial computations on every rank (run under mpiexec, any number of ranks):
// every collective for every dtype it takes, uneven and empty blocks, in-place forms, point to point, split into
// process groups, the traffic counters, the rank-ordered helpers, and ZeRO-1's reduce-scatter / norm / sharded AdamW
// / all-gather against one rank's computation on the summed gradients (bit for bit).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "../optim/param_arenas.h"
#include "mpi_world.h"
#include "dist/groups.h"
#include "dist/mpi_communicator.h"
#include "dist/zero.h"
#include "optim/adamw.h"
#include "optim/clip.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {

const ExecCtx& cpu() { return ExecCtx::cpu(); }

// A value of rank r at index i that sums exactly in any order (small integers).
double v(int r, int64_t i) { return static_cast<double>((r * 7 + i * 3) % 23) - 11.0; }

template <class T>
std::vector<T> values(int r, int64_t n) {
  std::vector<T> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<T>(v(r, i));
  return x;
}

template <class T>
void check_all_reduce() {
  Communicator& w = world();
  const int64_t n = 37;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    const Tensor send = Tensor::from_vector(values<T>(w.rank(), n), {n});
    const Tensor recv = Tensor::zeros({n}, dtype_of<T>());
    w.all_reduce(send, recv, op, cpu());
    const Tensor inplace = Tensor::from_vector(values<T>(w.rank(), n), {n});
    w.all_reduce(inplace, inplace, op, cpu());
    std::vector<T> want = values<T>(0, n);
    for (int r = 1; r < w.size(); ++r) {
      const std::vector<T> x = values<T>(r, n);
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = op == ReduceOp::Sum   ? want[i] + x[i]
                  : op == ReduceOp::Max ? std::max(want[i], x[i])
                                        : std::min(want[i], x[i]);
    }
    EXPECT_EQ(recv.to_vector<T>(), want) << reduce_op_name(op) << " " << dtype_name(dtype_of<T>());
    EXPECT_EQ(inplace.to_vector<T>(), want) << "in place";
  }
}

}  // namespace

TEST(MpiCollectives, AllReduceEveryDtypeAndOp) {
  check_all_reduce<float>();
  check_all_reduce<double>();
  check_all_reduce<int32_t>();
  check_all_reduce<int64_t>();
}

TEST(MpiCollectives, ReduceScatterSumsEachBlock) {
  Communicator& w = world();
  const int64_t block = 5, n = block * w.size();
  const Tensor send = Tensor::from_vector(values<float>(w.rank(), n), {n});
  const Tensor recv = Tensor::zeros({block}, DType::F32);
  w.reduce_scatter(send, recv, ReduceOp::Sum, cpu());
  std::vector<float> want(static_cast<size_t>(block), 0.0f);
  for (int r = 0; r < w.size(); ++r)
    for (int64_t i = 0; i < block; ++i) want[static_cast<size_t>(i)] += static_cast<float>(v(r, w.rank() * block + i));
  EXPECT_EQ(recv.to_vector<float>(), want);
}

TEST(MpiCollectives, AllGatherMovesEveryDtype) {
  Communicator& w = world();
  const int64_t n = 6;
  std::vector<uint16_t> mine(n);
  for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = static_cast<uint16_t>(1000 * w.rank() + i);
  const Tensor send = Tensor::from_vector(mine, {n});
  const Tensor recv = Tensor::zeros({n * w.size()}, DType::U16);
  w.all_gather(send, recv, cpu());
  const std::vector<uint16_t> got = recv.to_vector<uint16_t>();
  for (int r = 0; r < w.size(); ++r)
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[static_cast<size_t>(r * n + i)], 1000 * r + i);
  // BF16 and FP8 codes are moved bit for bit.
  std::vector<bf16> b{bf16(1.5f + static_cast<float>(w.rank())), bf16(-0.1f)};
  const Tensor bs = Tensor::from_vector(b, {2});
  const Tensor br = Tensor::zeros({2 * w.size()}, DType::BF16);
  w.all_gather(bs, br, cpu());
  const std::vector<bf16> bg = br.to_vector<bf16>();
  for (int r = 0; r < w.size(); ++r) {
    EXPECT_EQ(bg[static_cast<size_t>(2 * r)].bits, bf16(1.5f + static_cast<float>(r)).bits);
    EXPECT_EQ(bg[static_cast<size_t>(2 * r + 1)].bits, bf16(-0.1f).bits);
  }
  const Tensor u8s = Tensor::from_vector(std::vector<uint8_t>{static_cast<uint8_t>(0xF0 + w.rank())}, {1});
  const Tensor u8r = Tensor::zeros({w.size()}, DType::U8);
  w.all_gather(u8s, u8r, cpu());
  for (int r = 0; r < w.size(); ++r) EXPECT_EQ(u8r.to_vector<uint8_t>()[static_cast<size_t>(r)], 0xF0 + r);
}

TEST(MpiCollectives, AllGathervUnevenEmptyAndInPlace) {
  Communicator& w = world();
  std::vector<int64_t> counts;
  for (int r = 0; r < w.size(); ++r) counts.push_back(r == 1 ? 0 : 3 + r);  // rank 1 contributes nothing
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t mine = counts[static_cast<size_t>(w.rank())];
  const Tensor send = Tensor::from_vector(values<double>(w.rank(), mine), {mine});
  const Tensor recv = Tensor::zeros({total}, DType::F64);
  w.all_gatherv(send, recv, counts, cpu());
  std::vector<double> want;
  for (int r = 0; r < w.size(); ++r)
    for (double x : values<double>(r, counts[static_cast<size_t>(r)])) want.push_back(x);
  EXPECT_EQ(recv.to_vector<double>(), want);
  // In place: this rank's block of recv already holds its values.
  const Tensor buffer = Tensor::zeros({total}, DType::F64);
  const int64_t at = std::accumulate(counts.begin(), counts.begin() + w.rank(), int64_t{0});
  Tensor block = buffer.narrow(0, at, mine);
  if (mine > 0) block.copy_from(send);
  w.all_gatherv(block, buffer, counts, cpu());
  EXPECT_EQ(buffer.to_vector<double>(), want);
}

TEST(MpiCollectives, AllToAllAndAllToAllv) {
  Communicator& w = world();
  const int n = w.size();
  // all_to_all: block j of rank i holds 100 i + j.
  std::vector<int32_t> s(static_cast<size_t>(2 * n));
  for (int j = 0; j < n; ++j) s[static_cast<size_t>(2 * j)] = s[static_cast<size_t>(2 * j + 1)] = 100 * w.rank() + j;
  const Tensor send = Tensor::from_vector(s, {2 * n});
  const Tensor recv = Tensor::zeros({2 * n}, DType::I32);
  w.all_to_all(send, recv, cpu());
  const std::vector<int32_t> got = recv.to_vector<int32_t>();
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[static_cast<size_t>(2 * i)], 100 * i + w.rank());
  // all_to_allv: rank i sends (i + j) % 3 elements, valued 1000 i + j, to rank j.
  const auto cnt = [](int i, int j) { return static_cast<int64_t>((i + j) % 3); };
  std::vector<int64_t> sc, rc;
  std::vector<float> sv;
  for (int j = 0; j < n; ++j) {
    sc.push_back(cnt(w.rank(), j));
    rc.push_back(cnt(j, w.rank()));
    for (int64_t k = 0; k < cnt(w.rank(), j); ++k) sv.push_back(static_cast<float>(1000 * w.rank() + j));
  }
  const int64_t rtotal = std::accumulate(rc.begin(), rc.end(), int64_t{0});
  const Tensor vs = Tensor::from_vector(sv, {static_cast<int64_t>(sv.size())});
  const Tensor vr = Tensor::zeros({rtotal}, DType::F32);
  w.reset_stats();
  w.all_to_allv(vs, sc, vr, rc, cpu());
  std::vector<float> want;
  for (int i = 0; i < n; ++i)
    for (int64_t k = 0; k < cnt(i, w.rank()); ++k) want.push_back(static_cast<float>(1000 * i + w.rank()));
  EXPECT_EQ(vr.to_vector<float>(), want);
  // The counters: exactly the bytes to and from the other ranks.
  EXPECT_EQ(w.stats().bytes_sent, 4 * (static_cast<int64_t>(sv.size()) - cnt(w.rank(), w.rank())));
  EXPECT_EQ(w.stats().bytes_received, 4 * (rtotal - cnt(w.rank(), w.rank())));
  EXPECT_EQ(w.stats().calls, 1);
  // The same exchange fused with a second part of another dtype (an FP8 dispatch's codes and scales): each part
  // arrives as it would alone.
  std::vector<int64_t> sc2, rc2;
  std::vector<uint8_t> sv2;
  for (int j = 0; j < n; ++j) {
    sc2.push_back(2 * cnt(w.rank(), j));
    rc2.push_back(2 * cnt(j, w.rank()));
    for (int64_t k = 0; k < 2 * cnt(w.rank(), j); ++k) sv2.push_back(static_cast<uint8_t>(10 * w.rank() + j));
  }
  const Tensor bs = Tensor::from_vector(sv2, {static_cast<int64_t>(sv2.size())});
  const Tensor br = Tensor::zeros({2 * rtotal}, DType::U8);
  const Tensor vr2 = Tensor::zeros({rtotal}, DType::F32);
  const Communicator::AllToAllvPart parts[2] = {{bs, sc2, br, rc2}, {vs, sc, vr2, rc}};
  w.all_to_allv_fused(parts, cpu());
  std::vector<uint8_t> want2;
  for (int i = 0; i < n; ++i)
    for (int64_t k = 0; k < 2 * cnt(i, w.rank()); ++k) want2.push_back(static_cast<uint8_t>(10 * i + w.rank()));
  EXPECT_EQ(br.to_vector<uint8_t>(), want2);
  EXPECT_EQ(vr2.to_vector<float>(), want);
}

TEST(MpiCollectives, SendRecvRingAndBroadcast) {
  Communicator& w = world();
  const int n = w.size();
  if (n > 1) {
    const int next = (w.rank() + 1) % n, prev = (w.rank() + n - 1) % n;
    const Tensor out = Tensor::from_vector(values<float>(w.rank(), 9), {9});
    const Tensor in = Tensor::zeros({9}, DType::F32);
    // Even ranks send first, odd ranks receive first (blocking point to point must not all send at once).
    if (w.rank() % 2 == 0) {
      w.send(out, next, cpu());
      w.recv(in, prev, cpu());
    } else {
      w.recv(in, prev, cpu());
      w.send(out, next, cpu());
    }
    EXPECT_EQ(in.to_vector<float>(), values<float>(prev, 9));
  }
  for (int root = 0; root < n; ++root) {
    const Tensor t = Tensor::from_vector(values<int64_t>(w.rank(), 4), {4});
    w.broadcast(t, root, cpu());
    EXPECT_EQ(t.to_vector<int64_t>(), values<int64_t>(root, 4)) << "root " << root;
  }
  w.barrier();
  EXPECT_THROW(w.send(Tensor::zeros({1}, DType::F32), w.rank(), cpu()), Error);
  EXPECT_THROW(w.all_reduce(Tensor::zeros({2}, DType::BF16), Tensor::zeros({2}, DType::BF16), ReduceOp::Sum, cpu()),
               Error);
}

TEST(MpiCollectives, RankOrderedHelpers) {
  Communicator& w = world();
  double want = 0.0;
  for (int r = 0; r < w.size(); ++r) want += 0.1 * (r + 1);
  EXPECT_EQ(sum_in_rank_order(w, 0.1 * (w.rank() + 1), cpu()), want);  // bit for bit: the same order everywhere
  EXPECT_TRUE(any_rank(w, w.rank() == w.size() - 1, cpu()));
  EXPECT_FALSE(any_rank(w, false, cpu()));
}

TEST(MpiCollectives, ProcessGroupsOfALayout) {
  Communicator& w = world();
  const int n = w.size();
  ParallelLayout layout;
  layout.dp = n % 2 == 0 ? n / 2 : n;
  layout.ep = n % 2 == 0 ? 2 : 1;
  ProcessGroups g = make_process_groups(w, layout);
  EXPECT_EQ(g.dp->size(), layout.dp);
  EXPECT_EQ(g.ep->size(), layout.ep);
  EXPECT_EQ(g.pp->size(), 1);
  EXPECT_EQ(g.dp->rank(), g.dp_index);
  EXPECT_EQ(g.ep->rank(), g.ep_index);
  EXPECT_EQ(w.rank(), g.dp_index * layout.ep + g.ep_index);
  // Σ of world ranks over each group: the members are the ranks that differ only in that group's index.
  const auto group_sum = [&](Communicator& c) {
    const Tensor t = Tensor::from_vector(std::vector<int32_t>{w.rank()}, {1});
    c.all_reduce(t, t, ReduceOp::Sum, cpu());
    return t.to_vector<int32_t>()[0];
  };
  int want_dp = 0, want_ep = 0;
  for (int d = 0; d < layout.dp; ++d) want_dp += d * layout.ep + g.ep_index;
  for (int e = 0; e < layout.ep; ++e) want_ep += g.dp_index * layout.ep + e;
  EXPECT_EQ(group_sum(*g.dp), want_dp);
  EXPECT_EQ(group_sum(*g.ep), want_ep);
  EXPECT_THROW(make_process_groups(w, ParallelLayout{n + 1, 1, 1}), Error);
}

TEST(MpiZero1, ShardedStepEqualsOneRankOnTheSummedGradients) {
  Communicator& w = world();
  using optim::testing::make_arenas;
  // Parameters that straddle shard boundaries; each rank's gradients differ.
  const auto params_of = [](int r) {
    std::vector<optim::testing::TestParam> p;
    const int64_t sizes[] = {300, 1000, 129, 64, 700};
    for (int k = 0; k < 5; ++k) {
      std::vector<float> val(static_cast<size_t>(sizes[k])), grad(val.size());
      for (size_t i = 0; i < val.size(); ++i) {
        val[i] = std::sin(0.37f * static_cast<float>(i + 11 * k));
        grad[i] = std::cos(0.11f * static_cast<float>(i) + 1.3f * static_cast<float>(r + k)) * 0.5f;
      }
      p.push_back({fmt::format("p{}", k), val, grad, k != 3});
    }
    return p;
  };
  const optim::ParamArenas mine = make_arenas(params_of(w.rank()));
  // One rank's computation: the gradients summed in rank order, the whole-arena norm, clip and AdamW.
  const optim::ParamArenas ref = make_arenas(params_of(0));
  for (int r = 1; r < w.size(); ++r) {
    const optim::ParamArenas other = make_arenas(params_of(r));
    std::vector<float> g = ref.grads.flat().to_vector<float>();
    const std::vector<float> o = other.grads.flat().to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) g[i] += o[i];
    Tensor flat = ref.grads.flat();
    flat.copy_from(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
  }
  const std::vector<float> summed = ref.grads.flat().to_vector<float>();
  optim::AdamWConfig cfg;
  cfg.moment_dtype = optim::MomentDtype::BF16;
  optim::AdamW ref_opt(cfg, ref);

  // Small buckets, so the reduction runs in several rounds.
  Zero1 zero(w, mine, nullptr, 256);
  optim::AdamW opt(cfg, mine, zero.shard());
  EXPECT_EQ(opt.exp_avg_shard().numel(), zero.shard().size());
  for (int step = 0; step < 2; ++step) {
    if (step == 1) {  // fresh gradients for the second step: the same on both sides
      Tensor g = mine.grads.flat();
      g.copy_from(Tensor::from_vector(summed, {static_cast<int64_t>(summed.size())}));
      // Every rank but 0 contributes zeros, so the sum is `summed` again.
      if (w.rank() != 0) g.zero_();
      Tensor rg = ref.grads.flat();
      rg.copy_from(Tensor::from_vector(summed, {static_cast<int64_t>(summed.size())}));
    }
    w.reset_stats();
    zero.reduce_gradients(cpu());
    const std::vector<float> got = mine.grads.flat().to_vector<float>();
    const std::vector<float> want = ref.grads.flat().to_vector<float>();
    const ArenaRange s = zero.shard();
    for (int64_t i = s.begin; i < s.end; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "element " << i;
    const double norm = zero.clip_grad_norm(cpu(), 0.5);
    const double ref_norm = optim::clip_grad_norm(cpu(), ref, 0.5);
    EXPECT_NEAR(norm, ref_norm, 1e-12 * ref_norm);  // the same squares, grouped by shard
    EXPECT_EQ(sum_in_rank_order(w, norm, cpu()), norm * w.size()) << "every rank has the same norm";
    opt.step(cpu(), mine, 1e-2);
    ref_opt.step(cpu(), ref, 1e-2);
    zero.gather_parameters(cpu());
    const std::vector<float> a = mine.values.flat().to_vector<float>(), b = ref.values.flat().to_vector<float>();
    if (norm == ref_norm) {
      EXPECT_EQ(a, b);
    } else {  // the clip factor may differ in its last bit; the updates then differ by rounding
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << "element " << i;
    }
  }
  // Traffic of the second step: reduce-scatter + all-gather ≈ 2 (N-1)/N of the arena's bytes.
  const double arena_bytes = 4.0 * static_cast<double>(mine.layout().elements());
  const double expected = 2.0 * (w.size() - 1) / w.size() * arena_bytes;
  // (Uneven shards move up to one row of kAlignElements per rank more or less; the norm adds 8 bytes per peer.)
  EXPECT_NEAR(static_cast<double>(w.stats().bytes_sent) - 8.0 * (w.size() - 1), expected,
              4.0 * ArenaLayout::kAlignElements * w.size());
}

// Interleaved shards: reduced with the overlap (buckets launched on the worker thread as their ready groups are
// announced) and without it, the same step bit for bit; each rank's slices hold the rank-order sum of everyone's
// gradients, and the traffic is that of the contiguous shards.
TEST(MpiZero1, InterleavedOverlappedEqualsAfterBackwardBitForBit) {
  Communicator& w = world();
  using optim::testing::make_arenas;
  const auto params_of = [](int r) {
    std::vector<optim::testing::TestParam> p;
    const int64_t sizes[] = {300, 1000, 129, 64, 700, 2000};
    for (int k = 0; k < 6; ++k) {
      std::vector<float> val(static_cast<size_t>(sizes[k])), grad(val.size());
      for (size_t i = 0; i < val.size(); ++i) {
        val[i] = std::sin(0.37f * static_cast<float>(i + 11 * k));
        grad[i] = std::cos(0.11f * static_cast<float>(i) + 1.3f * static_cast<float>(r + k)) * 0.5f;
      }
      p.push_back({fmt::format("p{}", k), val, grad, k != 3});
    }
    return p;
  };
  const std::vector<int> groups{3, 0, 1, 0, 2, 3};
  const optim::ParamArenas on = make_arenas(params_of(w.rank())), off = make_arenas(params_of(w.rank()));
  // The rank-order sum, as one rank would add the ranks' gradients.
  std::vector<float> want = make_arenas(params_of(0)).grads.flat().to_vector<float>();
  for (int r = 1; r < w.size(); ++r) {
    const std::vector<float> o = make_arenas(params_of(r)).grads.flat().to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i) want[i] += o[i];
  }
  Zero1 zon(w, on, nullptr, 256, groups, true), zoff(w, off, nullptr, 256, groups, false);
  ASSERT_TRUE(zon.overlapping());
  ASSERT_FALSE(zoff.overlapping());
  ASSERT_EQ(zon.shards(), zoff.shards());
  // Every element in exactly one rank's shards.
  int64_t mine = 0;
  for (const ArenaRange& s : zon.shards()) mine += s.size();
  EXPECT_EQ(sum_in_rank_order(w, static_cast<double>(mine), cpu()), static_cast<double>(on.layout().elements()));
  optim::AdamWConfig cfg;
  optim::AdamW opt_on(cfg, on, zon.shards()), opt_off(cfg, off, zoff.shards());
  for (int step = 0; step < 2; ++step) {
    w.reset_stats();
    for (int g = 0; g <= 3; ++g) zon.group_ready(cpu(), g);
    zon.reduce_gradients(cpu());
    const int64_t sent_on = w.stats().bytes_sent;
    w.reset_stats();
    zoff.reduce_gradients(cpu());
    EXPECT_EQ(w.stats().bytes_sent, sent_on);
    const std::vector<float> got = on.grads.flat().to_vector<float>();
    for (const ArenaRange& s : zon.shards())
      for (int64_t i = s.begin; i < s.end; ++i)
        ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "element " << i;
    // The reduce-scatter sends (N-1)/N of the arena, give or take a row per rank of uneven slices per bucket.
    const double arena_bytes = 4.0 * static_cast<double>(on.layout().elements());
    EXPECT_NEAR(static_cast<double>(sent_on), (w.size() - 1.0) / w.size() * arena_bytes,
                4.0 * ArenaLayout::kAlignElements * w.size() * static_cast<double>(zon.buckets().size()));
    EXPECT_EQ(zon.clip_grad_norm(cpu(), 0.5), zoff.clip_grad_norm(cpu(), 0.5));
    opt_on.step(cpu(), on, 1e-2);
    opt_off.step(cpu(), off, 1e-2);
    zon.gather_parameters(cpu());
    zoff.gather_parameters(cpu());
    EXPECT_EQ(on.values.flat().to_vector<float>(), off.values.flat().to_vector<float>());
    // The next step's gradients: the same again on both sides.
    Tensor a = on.grads.flat(), b = off.grads.flat();
    a.copy_from(make_arenas(params_of(w.rank())).grads.flat());
    b.copy_from(make_arenas(params_of(w.rank())).grads.flat());
  }
}
