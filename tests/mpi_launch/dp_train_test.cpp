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

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<nlohmann::json> jsonl(const fs::path& p) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

class DpTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    // OpenMPI refuses root without these (CI containers); harmless otherwise. ctest sets them too.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    work_ = fs::temp_directory_path() /
            fmt::format("fp8train_dp_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(), getpid());
    fs::remove_all(work_);
    fs::create_directories(work_);
    std::ofstream(work_ / "tiny.json") << R"({
      "preset": "tiny",
      "model": {"hidden_size": 32, "n_layers": 2, "n_dense_layers": 1, "n_heads": 2, "q_lora_rank": 16,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
                "num_experts_per_tok": 2, "mtp_depth": 1},
      "data": {"corpus_bytes": 20000},
      "train": {"steps": 4, "batch_size": 4, "micro_batch_size": 1, "seq_len": 32, "eval_every": 0,
                "eval_batches": 1, "final_eval_windows": 4, "log_every": 1, "threads": 1, "device": "cpu",
                "recipe": "fp32"},
      "optim": {"warmup_steps": 2}
    })";
  }
  void TearDown() override { fs::remove_all(work_); }

  // `ranks` = 0: the CLI alone; otherwise under mpiexec with that many ranks. `env`: "NAME=value ..." prefix.
  CliRun run(int ranks, const std::string& args, const std::string& env = "") {
    const fs::path out = work_ / "stdout.txt", err = work_ / "stderr.txt";
    const std::string launcher =
        ranks == 0 ? std::string() : fmt::format("'{}' -n {} --oversubscribe ", FP8TRAIN_MPIEXEC, ranks);
    const std::string cmd = fmt::format("cd '{}' && {} {}'{}' train --config tiny.json {} > '{}' 2> '{}'",
                                        work_.string(), env, launcher, FP8TRAIN_CLI, args, out.string(), err.string());
    const auto start = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  fs::path work_;
};

// The total loss of every step of a run.
std::vector<double> losses(const fs::path& run) {
  std::vector<double> l;
  for (const nlohmann::json& row : jsonl(run / "metrics.jsonl")) l.push_back(row.at("loss").get<double>());
  return l;
}

}  // namespace

// Tolerance: N ranks add the same micro-batch gradients as one rank, only grouped differently — one rank
// accumulates every micro-batch into its FP32 gradient arena in turn, N ranks accumulate their own block and then
// add the N partial sums in rank order — so the two differ by FP32 rounding of the sums (relative ~1e-7 per
// element). Step 1's loss comes from the same initial weights and is identical; later steps move weights that
// differ by rounding, so losses agree to ~1e-8 relative over a few steps (measured: 1e-9). 1e-6 leaves margin,
// while a wrong reduction (a rank's gradient lost, counted twice, or mis-scaled) moves the loss by more than 1e-3.
TEST_F(DpTrain, RanksTrainLikeOneRankOnTheSameGlobalBatch) {
  const CliRun one = run(0, "--out one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::vector<double> want = losses(work_ / "one");
  ASSERT_EQ(want.size(), 4u);
  for (int ranks : {2, 4}) {
    const std::string dir = fmt::format("dp{}", ranks);
    const CliRun r = run(ranks, fmt::format("--dp {} --out {}", ranks, dir));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(fmt::format("distributed: {} ranks (mpi), layout dp {} x ep 1 x pp 1", ranks, ranks)),
              std::string::npos)
        << r.out;
    // Rank 0 alone prints: one "done:" line.
    EXPECT_EQ(r.out.find("done:"), r.out.rfind("done:")) << r.out;
    const std::vector<double> got = losses(work_ / dir);
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
  const CliRun straight = run(2, "--dp 2 --save-every 2 --keep-last 0 --out straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const std::vector<double> want = losses(work_ / "straight");
  ASSERT_EQ(want.size(), 4u);
  // From the step-2 checkpoint on 2 ranks: steps 3 and 4 bit for bit.
  const CliRun two = run(2, "--dp 2 --resume straight/checkpoints/step-00000002 --out r2");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const std::vector<double> got = losses(work_ / "r2");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], want[2]);
  EXPECT_EQ(got[1], want[3]);
  // The same checkpoint on one rank (the optimizer's shards re-cut): it runs, says the rank count changed, and
  // stays within the rounding tolerance of RanksTrainLikeOneRankOnTheSameGlobalBatch.
  const CliRun one = run(0, "--resume straight/checkpoints/step-00000002 --out r1");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("parallel.dp"), std::string::npos) << one.out;
  const std::vector<double> one_l = losses(work_ / "r1");
  ASSERT_EQ(one_l.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(one_l[i], want[i + 2], 1e-6 * std::abs(want[i + 2])) << "step " << i + 3;
  // And a one-rank checkpoint resumes on 2 ranks.
  ASSERT_EQ(run(0, "--save-every 2 --keep-last 0 --out single").exit_code, 0);
  const CliRun up = run(2, "--dp 2 --resume single/checkpoints/step-00000002 --out up");
  ASSERT_EQ(up.exit_code, 0) << up.err;
  EXPECT_EQ(losses(work_ / "up").size(), 2u);
}

TEST_F(DpTrain, AHungRankFailsTheRunWithinTheTimeoutNamingIt) {
  const CliRun r = run(2, "--dp 2 --dist-timeout 5 --out hang", "FP8TRAIN_TEST_FAULT=hang:1:1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60.0) << "the run must not wait for the hung rank";
  EXPECT_NE(r.err.find("fp8train: error: rank 0 of 2:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not complete within 5 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 does not answer"), std::string::npos) << r.err;
}

TEST_F(DpTrain, ARankThatExitsMidStepFailsTheRun) {
  const CliRun r = run(2, "--dp 2 --dist-timeout 20 --out exit", "FP8TRAIN_TEST_FAULT=exit:1:2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 60.0);
  EXPECT_NE(r.err.find("rank 1 exit in step 2"), std::string::npos) << r.err;
}

TEST_F(DpTrain, RefusesLayoutsItCannotRun) {
  CliRun r = run(0, "--dp 2 --out x");
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
