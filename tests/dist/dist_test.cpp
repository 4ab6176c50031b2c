// src/dist without MPI: the one-rank communicator (copies, argument checks, counters), the arena's shard plan,
// ZeRO-1 on one rank against the plain optimizer path (bit for bit), process groups of a one-rank world, launch
// detection from the environment, and the TCP store (threads as ranks: values handed over, a late server waited
// for, a key that never comes timing out with a message naming it).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../common/error_of.h"
#include "../optim/param_arenas.h"
#include "common/error.h"
#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "dist/groups.h"
#include "dist/tcp_store.h"
#include "dist/zero.h"
#include "optim/adamw.h"
#include "optim/clip.h"

using namespace fp8train;
using namespace fp8train::dist;

namespace {
const ExecCtx& cpu() { return ExecCtx::cpu(); }

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      if (value)
        setenv(name, value, 1);
      else
        unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old)
        setenv(name.c_str(), old->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Every variable a launcher may set, cleared.
ScopedEnv no_launcher() {
  return ScopedEnv{{"OMPI_COMM_WORLD_SIZE", nullptr},
                   {"OMPI_COMM_WORLD_RANK", nullptr},
                   {"PMIX_RANK", nullptr},
                   {"PMI_RANK", nullptr},
                   {"PMI_SIZE", nullptr},
                   {"WORLD_SIZE", nullptr},
                   {"RANK", nullptr},
                   {"LOCAL_RANK", nullptr},
                   {"MASTER_ADDR", nullptr},
                   {"MASTER_PORT", nullptr},
                   {"SLURM_PROCID", nullptr},
                   {"SLURM_NTASKS", nullptr}};
}
}  // namespace

TEST(SelfCommunicator, CollectivesCopyAndCountNothing) {
  SelfCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor y = Tensor::zeros({3}, DType::F32);
  c.all_reduce(x, y, ReduceOp::Sum, cpu());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  y.zero_();
  const std::vector<int64_t> counts{3};
  c.all_gatherv(x, y, counts, cpu());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  y.zero_();
  c.all_to_allv(x, counts, y, counts, cpu());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  c.broadcast(x, 0, cpu());
  EXPECT_EQ(c.stats().bytes_sent, 0);
  EXPECT_EQ(c.stats().calls, 4);
  EXPECT_THROW(c.send(x, 0, cpu()), Error);  // no peer
  EXPECT_THROW(c.broadcast(x, 1, cpu()), Error);
  EXPECT_THROW(c.all_reduce(Tensor::zeros({3}, DType::U8), Tensor::zeros({3}, DType::U8), ReduceOp::Sum, cpu()),
               Error);  // codes are not reduced
  EXPECT_THROW(c.all_gatherv(x, y, std::vector<int64_t>{2}, cpu()), Error);
  EXPECT_EQ(sum_in_rank_order(c, 0.1, cpu()), 0.1);
  EXPECT_TRUE(any_rank(c, true, cpu()));
  EXPECT_EQ(c.split(0, 0, "dp")->size(), 1);
}

TEST(ShardArena, AlignedContiguousShardsCoverTheArena) {
  const int64_t a = ArenaLayout::kAlignElements;
  for (int ranks : {1, 2, 3, 4, 7}) {
    for (int64_t rows : {1, 5, 12, 100}) {
      const ShardPlan p = shard_arena(rows * a, ranks);
      int64_t at = 0;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(p.begins[static_cast<size_t>(r)], std::min(at, rows * a));
        EXPECT_EQ(p.begins[static_cast<size_t>(r)] % a, 0);
        at = p.begins[static_cast<size_t>(r)] + p.counts[static_cast<size_t>(r)];
      }
      EXPECT_EQ(at, rows * a) << ranks << " ranks, " << rows << " rows";
    }
  }
  EXPECT_THROW(shard_arena(100, 2), Error);
}

TEST(Zero1, OneRankIsThePlainOptimizerPathBitForBit) {
  using optim::testing::make_arenas;
  std::vector<optim::testing::TestParam> spec;
  for (int k = 0; k < 3; ++k) {
    std::vector<float> v(200 + 50 * static_cast<size_t>(k)), g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
      g[i] = 0.3f * static_cast<float>((i * 7 + static_cast<size_t>(k)) % 13) - 1.7f;
    }
    spec.push_back({fmt::format("w{}", k), v, g, k != 1});
  }
  const optim::ParamArenas a = make_arenas(spec), b = make_arenas(spec);
  SelfCommunicator self("dp");
  Zero1 zero(self, a);
  EXPECT_EQ(zero.shard(), (ArenaRange{0, a.layout().elements()}));
  optim::AdamWConfig cfg;
  optim::AdamW opt_a(cfg, a, zero.shard()), opt_b(cfg, b);
  zero.reduce_gradients(cpu());
  const double na = zero.clip_grad_norm(cpu(), 1.0);
  const double nb = optim::clip_grad_norm(cpu(), b, 1.0);
  EXPECT_EQ(na, nb);
  opt_a.step(cpu(), a, 1e-2);
  opt_b.step(cpu(), b, 1e-2);
  zero.gather_parameters(cpu());
  EXPECT_EQ(a.values.flat().to_vector<float>(), b.values.flat().to_vector<float>());
  EXPECT_TRUE(opt_a.sharded());
  EXPECT_THROW(opt_a.exp_avg(), Error);
  EXPECT_EQ(opt_a.state_bytes(), opt_b.state_bytes());
}

// The interleaved plan: buckets are runs of regions of one ready group, in ready order, at most ranks x bucket
// elements each, tiling the arena; each bucket's slices are shard_arena's of it.
TEST(Zero1, InterleavedBucketPlan) {
  using optim::testing::make_arenas;
  std::vector<optim::testing::TestParam> spec;
  const int64_t sizes[] = {300, 1000, 129, 64, 700};
  for (int k = 0; k < 5; ++k)
    spec.push_back({fmt::format("p{}", k), std::vector<float>(static_cast<size_t>(sizes[k]), 1.0f),
                    std::vector<float>(static_cast<size_t>(sizes[k]), 0.5f), k != 3});
  const optim::ParamArenas a = make_arenas(spec);
  // Regions in arena order: p0 [0, 384), p1 [384, 1408), p2 [1408, 1664), p4 [1664, 2432), then p3 [2432, 2560)
  // (no weight decay).
  ASSERT_EQ(a.layout().elements(), 2560);
  const std::vector<int> groups{2, 0, 1, 0, 2};
  const std::vector<Bucket> plan = plan_buckets(a.layout(), {0, 2560}, groups, 3, 256);
  const std::vector<std::pair<ArenaRange, int>> want{{{384, 1152}, 0},  {{1152, 1408}, 0}, {{2432, 2560}, 0},
                                                     {{1408, 1664}, 1}, {{0, 384}, 2},     {{1664, 2432}, 2}};
  ASSERT_EQ(plan.size(), want.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].range, want[i].first) << "bucket " << i;
    EXPECT_EQ(plan[i].group, want[i].second) << "bucket " << i;
    int64_t at = plan[i].range.begin;
    for (int r = 0; r < 3; ++r) {
      const ArenaRange s = plan[i].slices.range(r);
      EXPECT_EQ(s.begin, std::min(at, plan[i].range.end)) << "bucket " << i << " rank " << r;
      EXPECT_EQ(s.begin % ArenaLayout::kAlignElements, 0);
      EXPECT_LE(s.size(), 256);
      at = std::max(at, s.end);
    }
    EXPECT_EQ(at, plan[i].range.end) << "bucket " << i << ": the slices cover it";
  }
  EXPECT_EQ(plan[0].slices.counts, (std::vector<int64_t>{256, 256, 256}));
  EXPECT_EQ(plan[2].slices.counts, (std::vector<int64_t>{128, 0, 0}));
  EXPECT_THROW(plan_buckets(a.layout(), {0, 2560}, {0, 1}, 3, 256), Error);  // a group per view
  EXPECT_THROW(plan_buckets(a.layout(), {0, 2560}, groups, 3, 100), Error);  // buckets of whole rows

  // One rank with the interleaved plan: its shard is the whole arena, and the step is the plain one bit for bit.
  const optim::ParamArenas b = make_arenas(spec), c = make_arenas(spec);
  SelfCommunicator self("dp");
  Zero1 zero(self, b, nullptr, 256, groups, true);
  EXPECT_TRUE(zero.interleaved());
  EXPECT_FALSE(zero.overlapping());  // nothing to overlap on one rank
  EXPECT_EQ(zero.shards(), (std::vector<ArenaRange>{{0, 2560}}));
  optim::AdamWConfig cfg;
  optim::AdamW opt_b(cfg, b, zero.shards()), opt_c(cfg, c);
  zero.group_ready(cpu(), 2);
  zero.reduce_gradients(cpu());
  EXPECT_EQ(zero.clip_grad_norm(cpu(), 1.0), optim::clip_grad_norm(cpu(), c, 1.0));
  opt_b.step(cpu(), b, 1e-2);
  opt_c.step(cpu(), c, 1e-2);
  zero.gather_parameters(cpu());
  EXPECT_EQ(b.values.flat().to_vector<float>(), c.values.flat().to_vector<float>());
}

TEST(ProcessGroups, OneRankWorldAndBadLayouts) {
  SelfCommunicator world;
  ProcessGroups g = make_process_groups(world, ParallelLayout{});
  EXPECT_EQ(g.dp->size(), 1);
  EXPECT_EQ(g.dp->name(), "dp");
  EXPECT_THROW(make_process_groups(world, ParallelLayout{2, 1, 1}), Error);
  EXPECT_THROW(make_process_groups(world, ParallelLayout{0, 1, 1}), Error);
}

// Several GPU ranks per node: each takes entry LOCAL_RANK of the visible devices (every rank computes on its
// cuda:0), unless the launcher already bound one device per rank.
TEST(Launch, EachLocalRankTakesItsOwnGpu) {
  LaunchEnv e;
  e.launcher = "mpi";
  e.size = 8;
  e.local_rank = 3;
  EXPECT_EQ(local_rank_gpu(e, nullptr), "3");          // every GPU visible: the local rank's number
  EXPECT_EQ(local_rank_gpu(e, "4,5,6,7"), "7");        // a list: its entry
  EXPECT_EQ(local_rank_gpu(e, "GPU-a, GPU-b,GPU-c,GPU-d"), "GPU-d");  // UUIDs, spaces ignored
  EXPECT_EQ(local_rank_gpu(e, "2"), "");               // one device per rank already
  EXPECT_EQ(local_rank_gpu(e, ""), "");                // none visible: left for the device check to report
  const std::string err = test_util::error_of([&] { local_rank_gpu(e, "0,1"); });
  EXPECT_NE(err.find("local rank 3 has no GPU of its own: CUDA_VISIBLE_DEVICES='0,1' lists 2 devices"),
            std::string::npos)
      << err;
  e.size = 1;  // one rank: nothing to choose
  EXPECT_EQ(local_rank_gpu(e, nullptr), "");
}

TEST(Launch, DetectsTheLauncherFromTheEnvironment) {
  {
    ScopedEnv clear = no_launcher();
    EXPECT_EQ(detect_launch().launcher, "single");
    EXPECT_EQ(init_world("cpu", {})->backend(), "self");
  }
  {
    ScopedEnv clear = no_launcher();
    ScopedEnv env{
        {"WORLD_SIZE", "4"}, {"RANK", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};
    const LaunchEnv e = detect_launch();
    EXPECT_EQ(e.launcher, "torchrun");
    EXPECT_EQ(e.rank, 2);
    EXPECT_EQ(e.size, 4);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.master_addr, "10.0.0.1");
    EXPECT_EQ(e.master_port, 29500);
    // CPU ranks need mpirun.
    EXPECT_THROW(init_world("cpu", {}), Error);
  }
  {
    ScopedEnv clear = no_launcher();
    ScopedEnv env{{"WORLD_SIZE", "2"}, {"RANK", "5"}};
    EXPECT_THROW(detect_launch(), Error);  // RANK outside WORLD_SIZE
  }
  {
    ScopedEnv clear = no_launcher();
    ScopedEnv env{{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "localhost"}};
    EXPECT_THROW(detect_launch(), Error);  // no MASTER_PORT
  }
  {
    ScopedEnv clear = no_launcher();
    ScopedEnv env{{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_RANK", "1"}};
    const LaunchEnv e = detect_launch();
    EXPECT_EQ(e.launcher, "mpi");
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.size, 3);
  }
}

TEST(TcpStore, HandsValuesBetweenRanks) {
  TcpStore server("127.0.0.1", 0, true, 10.0);
  const int port = server.port();
  std::string got;
  std::thread client([&] {
    TcpStore c("127.0.0.1", port, false, 10.0);
    got = c.get("nccl/world");  // waits until rank 0 sets it
    c.set("reply", std::string("\0binary\xff", 8));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.set("nccl/world", std::string(128, '\x7f'));
  EXPECT_EQ(server.get("reply"), std::string("\0binary\xff", 8));
  client.join();
  EXPECT_EQ(got, std::string(128, '\x7f'));
}

TEST(TcpStore, AMissingKeyOrServerTimesOutWithAClearError) {
  TcpStore server("127.0.0.1", 0, true, 0.3);
  try {
    server.get("never");
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'never' did not arrive within 0.3 s"), std::string::npos) << e.what();
  }
  // Nobody serves port 1: the client gives up after its timeout.
  EXPECT_THROW(TcpStore("127.0.0.1", 1, false, 0.3), Error);  // port 1: nobody serves it
}
