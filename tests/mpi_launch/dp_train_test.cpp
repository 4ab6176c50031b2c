// `mpiexec -np N fp8train train --dp N` end to end on CPU ranks (ctest label `mpi`), on a very small MLA + MoE + MTP
// model so each run takes seconds:
//   - N-rank data parallelism (ZeRO-1) trains like one rank on the same global batch (the tolerance is below);
//   - only rank 0 writes the run directory and prints;
//   - a 2-rank run resumed from its checkpoint continues bit for bit; the same checkpoint resumes on 1 rank
//     (the optimizer's shards are re-cut);
//   - a rank that exits or hangs mid-step makes the run fail within the collective timeout, naming the ranks;
//   - refusals: a layout that does not match the ranks launched, pipeline parallelism on a model with fewer blocks
//     than DualPipeV's 2 x pp stages (pp_train_test.cpp tests --pp itself), too
//     few micro-batches for the ranks, CPU ranks from the torchrun-style environment.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mpi_train_fixture.h"

namespace fs = std::filesystem;
using fp8train::test::jsonl;
using fp8train::test::LaunchRun;
using fp8train::test::slurp;

namespace {

class DpTrain : public fp8train::test::MpiTrainTest {
 protected:
  void SetUp() override { prepare("dp", {.n_layers = 2, .batch_size = 4}); }
};

}  // namespace

// Tolerance: N ranks add the same micro-batch gradients as one rank, only grouped differently — one rank
// accumulates every micro-batch into its FP32 gradient arena in turn, N ranks accumulate their own block and then
// add the N partial sums in rank order — so the two differ by FP32 rounding of the sums (relative ~1e-7 per
// element). Step 1's loss comes from the same initial weights and is identical; later steps move weights that
// differ by rounding, so losses agree to ~1e-8 relative over a few steps (measured: 1e-9). 1e-6 leaves margin,
// while a wrong reduction (a rank's gradient lost, counted twice, or mis-scaled) moves the loss by more than 1e-3.
TEST_F(DpTrain, RanksTrainLikeOneRankOnTheSameGlobalBatch) {
  const LaunchRun one = run(0, "--out one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::vector<double> want = losses("one");
  ASSERT_EQ(want.size(), 4u);
  for (int ranks : {2, 4}) {
    const std::string dir = fmt::format("dp{}", ranks);
    const LaunchRun r = run(ranks, fmt::format("--dp {} --out {}", ranks, dir));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(fmt::format("distributed: {} ranks (mpi), layout dp {} x ep 1 x pp 1", ranks, ranks)),
              std::string::npos)
        << r.out;
    // Rank 0 alone prints: one "done:" line.
    EXPECT_EQ(r.out.find("done:"), r.out.rfind("done:")) << r.out;
    const std::vector<double> got = losses(dir);
    ASSERT_EQ(got.size(), want.size());
    // Step 1 starts from the same weights: only the step's loss sum is grouped differently (in FP64).
    EXPECT_NEAR(got[0], want[0], 1e-12 * want[0]);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i])) << ranks << " ranks, step " << i + 1;
    // Checkpoint: written once, by rank 0, with the number of ranks recorded.
    const nlohmann::json state =
        nlohmann::json::parse(slurp(work_ / dir / "checkpoints" / "step-00000004" / "state.json"));
    EXPECT_EQ(state.at("dp_ranks").get<int>(), ranks);
  }
}

TEST_F(DpTrain, ResumeContinuesBitForBitAndOnOtherRankCounts) {
  // On one rank the optimizer's shards are re-cut.
  expect_checkpoints_load_on_any_layout("--dp 2", "--dp 2", "parallel.dp");
}

// --dp-overlap on (each gradient bucket reduce-scattered during the last micro-batch's backward, on a worker
// thread) and off (every bucket after the backward) add the same numbers in the same order: the losses,
// gradient norms, traffic and the checkpoint's weights and moments are identical. 3 ranks cut buckets unevenly.
TEST_F(DpTrain, OverlapOnAndOffAreBitIdentical) {
  for (int ranks : {2, 3}) {
    const std::string on = fmt::format("on{}", ranks), off = fmt::format("off{}", ranks);
    const LaunchRun a = run(ranks, fmt::format("--dp {} --dp-overlap on --out {}", ranks, on));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out.find("ZeRO-1: gradients reduced after the backward"), std::string::npos) << a.out;
    const LaunchRun b = run(ranks, fmt::format("--dp {} --dp-overlap off --out {}", ranks, off));
    ASSERT_EQ(b.exit_code, 0) << b.err;
    const std::vector<nlohmann::json> ma = jsonl(work_ / on / "metrics.jsonl"),
                                      mb = jsonl(work_ / off / "metrics.jsonl");
    ASSERT_EQ(ma.size(), 4u);
    ASSERT_EQ(mb.size(), ma.size());
    for (size_t i = 0; i < ma.size(); ++i)
      for (const char* key : {"loss", "grad_norm", "dp_bytes_sent", "dp_bytes_received"})
        EXPECT_EQ(ma[i].at(key), mb[i].at(key)) << ranks << " ranks, step " << i + 1 << ", " << key;
    // On: every bucket was launched during the backward (the embedding's last); off: none.
    for (size_t i = 0; i < ma.size(); ++i) {
      EXPECT_GT(ma[i].at("dp_buckets").get<int>(), 2 * 2) << "at least one per block";
      EXPECT_EQ(ma[i].at("dp_buckets_overlapped"), ma[i].at("dp_buckets"));
      EXPECT_EQ(mb[i].at("dp_buckets"), ma[i].at("dp_buckets"));
      EXPECT_EQ(mb[i].at("dp_buckets_overlapped").get<int>(), 0);
    }
    for (const char* file : {"master.safetensors", "optimizer.safetensors"}) {
      const std::string x = slurp(work_ / on / "checkpoints" / "step-00000004" / file);
      EXPECT_FALSE(x.empty()) << file;
      EXPECT_TRUE(x == slurp(work_ / off / "checkpoints" / "step-00000004" / file)) << ranks << " ranks: " << file;
    }
  }
}

// The bucket size (--dp-bucket-mib) cuts the collectives and so the shards: 1 KiB buckets split this preset's ready
// groups into more buckets than the default 16 MiB. Every gradient element is still summed over the ranks in rank
// order, so the weights move alike; only the gradient norm's partial sums (one per rank, over its shard) are grouped
// differently, a last-bits difference that reaches the weights only through the clipping factor.
TEST_F(DpTrain, BucketSizeCutsTheCollectivesNotTheSums) {
  const LaunchRun a = run(2, "--dp 2 --dp-overlap on --dp-bucket-mib 0.001 --out small");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const LaunchRun b = run(2, "--dp 2 --dp-overlap on --out default");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const std::vector<nlohmann::json> ma = jsonl(work_ / "small" / "metrics.jsonl"),
                                    mb = jsonl(work_ / "default" / "metrics.jsonl");
  ASSERT_EQ(ma.size(), 4u);
  ASSERT_EQ(mb.size(), ma.size());
  EXPECT_EQ(ma[0].at("loss"), mb[0].at("loss"));
  for (size_t i = 0; i < ma.size(); ++i) {
    for (const char* key : {"loss", "grad_norm"}) {
      const double x = ma[i].at(key).get<double>(), y = mb[i].at(key).get<double>();
      EXPECT_NEAR(x, y, 1e-12 * std::abs(y)) << "step " << i + 1 << ", " << key;
    }
    EXPECT_GT(ma[i].at("dp_buckets").get<int>(), mb[i].at("dp_buckets").get<int>()) << "step " << i + 1;
    EXPECT_EQ(ma[i].at("dp_buckets_overlapped"), ma[i].at("dp_buckets")) << "step " << i + 1;
  }
}

// The interleaved shards of 3 ranks (uneven slices) through a checkpoint: resumed on 3 ranks bit for bit, on one
// rank and from one rank within the stated tolerance.
TEST_F(DpTrain, ThreeRankShardsCheckpointAndResume) {
  expect_checkpoints_load_on_any_layout("--dp 3", "--dp 3", "parallel.dp", "", 3);
}

// (Also with the overlap on: the collective that times out then runs on the worker thread.)
TEST_F(DpTrain, AHungRankFailsTheRunWithinTheTimeoutNamingIt) {
  for (const char* overlap : {"off", "on"}) {
    const LaunchRun r = run(2, fmt::format("--dp 2 --dp-overlap {} --dist-timeout 5 --out hang{}", overlap, overlap),
                            "FP8TRAIN_TEST_FAULT=hang:1:1");
    EXPECT_NE(r.exit_code, 0) << overlap;
    EXPECT_LT(r.seconds, 60.0) << "the run must not wait for the hung rank";
    EXPECT_NE(r.err.find("fp8train: error: rank 0 of 2:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("did not complete within 5 s"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("rank 1 does not answer"), std::string::npos) << r.err;
  }
}

TEST_F(DpTrain, ARankThatExitsMidStepFailsTheRun) {
  for (const char* overlap : {"off", "on"}) {
    const LaunchRun r = run(2, fmt::format("--dp 2 --dp-overlap {} --dist-timeout 20 --out exit{}", overlap, overlap),
                            "FP8TRAIN_TEST_FAULT=exit:1:2");
    EXPECT_NE(r.exit_code, 0) << overlap;
    EXPECT_LT(r.seconds, 60.0);
    EXPECT_NE(r.err.find("rank 1 exit in step 2"), std::string::npos) << r.err;
  }
}

TEST_F(DpTrain, RefusesLayoutsItCannotRun) {
  LaunchRun r = run(0, "--dp 2 --out x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs 2 ranks, but 1 were launched"), std::string::npos) << r.err;
  r = run(0, "--ep 2 --out x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("parallel layout dp 1 x ep 2 x pp 1 needs 2 ranks, but 1 were launched"), std::string::npos)
      << r.err;
  r = run(0, "--pp 2 --out x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("DualPipeV cuts the model into 4 stages of at least one block each"), std::string::npos)
      << r.err;
  r = run(2, "--dp 2 --batch-size 1 --out x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs at least 2 micro-batches per step"), std::string::npos) << r.err;
  r = run(0, "--out x", "WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("CPU ranks communicate over MPI"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(work_ / "x" / "metrics.jsonl"));
}
