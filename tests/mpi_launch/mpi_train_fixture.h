// The shared harness of the `mpiexec fp8train train` tests (label `mpi`): a work directory per test holding a very
// small MLA + MoE + MTP config (tiny.json), the CLI run alone or under mpiexec with N oversubscribed ranks, and what
// the tests read back (per-step losses, the final held-out loss).
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../common/cli_runner.h"

namespace fp8train::test {

struct LaunchRun {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

// The model and batch the tests vary; everything else is fixed (4 routed experts top-2, MTP depth 1, 32-token
// sequences, one sequence per micro-batch, 4 steps, fp32 recipe, CPU, one thread).
struct TinyRun {
  int n_layers = 2;
  int batch_size = 4;
  bool routing_groups = false;  // 2 expert groups, 1 per token (node-limited routing layouts)
};

class MpiTrainTest : public ::testing::Test {
 protected:
  // Makes a fresh work directory (named after `tag`, the test and the process) with tiny.json for `m`.
  void prepare(const std::string& tag, const TinyRun& m) {
    // OpenMPI refuses root without these (CI containers); harmless otherwise. ctest sets them too.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    work_ = std::filesystem::temp_directory_path() /
            fmt::format("fp8train_{}_{}_{}", tag, ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                        getpid());
    std::filesystem::remove_all(work_);
    std::filesystem::create_directories(work_);
    const std::string groups = m.routing_groups ? R"(, "n_group": 2, "topk_group": 1)" : "";
    std::ofstream(work_ / "tiny.json") << fmt::format(R"({{
      "preset": "tiny",
      "model": {{"hidden_size": 32, "n_layers": {}, "n_dense_layers": 1, "n_heads": 2, "q_lora_rank": 16,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
                "num_experts_per_tok": 2{}, "mtp_depth": 1}},
      "data": {{"corpus_bytes": 20000}},
      "train": {{"steps": 4, "batch_size": {}, "micro_batch_size": 1, "seq_len": 32, "eval_every": 0,
                "eval_batches": 1, "final_eval_windows": 4, "log_every": 1, "threads": 1, "device": "cpu",
                "recipe": "fp32"}},
      "optim": {{"warmup_steps": 2}}
    }})",
                                                      m.n_layers, groups, m.batch_size);
  }
  void TearDown() override { std::filesystem::remove_all(work_); }

  // `fp8train train --config tiny.json ARGS` in the work directory: alone (`ranks` = 0) or under mpiexec with that
  // many ranks. `env`: a "NAME=value ..." prefix.
  LaunchRun run(int ranks, const std::string& args, const std::string& env = "") {
    const std::filesystem::path out = work_ / "stdout.txt", err = work_ / "stderr.txt";
    const std::string launcher =
        ranks == 0 ? std::string() : fmt::format("'{}' -n {} --oversubscribe ", FP8TRAIN_MPIEXEC, ranks);
    const std::string cmd = fmt::format("cd '{}' && {} {}'{}' train --config tiny.json {} > '{}' 2> '{}'",
                                        work_.string(), env, launcher, FP8TRAIN_CLI, args, out.string(), err.string());
    const auto start = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    LaunchRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // The total loss of every step of the run in work_/`run`.
  std::vector<double> losses(const std::string& run) const {
    std::vector<double> l;
    for (const nlohmann::json& row : jsonl(work_ / run / "metrics.jsonl")) l.push_back(row.at("loss").get<double>());
    return l;
  }

  double final_eval(const std::string& run) const {
    return nlohmann::json::parse(slurp(work_ / run / "summary.json")).at("final held-out loss").get<double>();
  }

  // Checkpoints across layouts: a 2-rank run under `flags` saving at step 2, resumed from that checkpoint on 2 ranks
  // with `resume_flags`, repeats steps 3 and 4 bit for bit (and prints `same_layout_says`, when given); resumed on
  // one rank it runs, reports that `layout_key` changed and stays within 1e-6 of the 2-rank run (sums grouped
  // differently); and a one-rank checkpoint resumes on 2 ranks under `flags` within 1e-6 of the one-rank run.
  void expect_checkpoints_load_on_any_layout(const std::string& flags, const std::string& resume_flags,
                                             const std::string& layout_key, const std::string& same_layout_says = "",
                                             int ranks = 2) {
    const LaunchRun straight = run(ranks, flags + " --save-every 2 --keep-last 0 --out straight");
    ASSERT_EQ(straight.exit_code, 0) << straight.err;
    const std::vector<double> want = losses("straight");
    ASSERT_EQ(want.size(), 4u);
    const LaunchRun same = run(ranks, resume_flags + " --resume straight/checkpoints/step-00000002 --out same");
    ASSERT_EQ(same.exit_code, 0) << same.err;
    if (!same_layout_says.empty()) {
      EXPECT_NE(same.out.find(same_layout_says), std::string::npos) << same.out;
    }
    const std::vector<double> got = losses("same");
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], want[2]);
    EXPECT_EQ(got[1], want[3]);
    const LaunchRun one = run(0, "--resume straight/checkpoints/step-00000002 --out one");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_NE(one.out.find(layout_key), std::string::npos) << one.out;  // the layout change is reported
    const std::vector<double> one_l = losses("one");
    ASSERT_EQ(one_l.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(one_l[i], want[i + 2], 1e-6 * std::abs(want[i + 2])) << "step " << i + 3;
    ASSERT_EQ(run(0, "--save-every 2 --keep-last 0 --out single").exit_code, 0);
    const LaunchRun up = run(ranks, flags + " --resume single/checkpoints/step-00000002 --out up");
    ASSERT_EQ(up.exit_code, 0) << up.err;
    const std::vector<double> single = losses("single"), up_l = losses("up");
    ASSERT_EQ(up_l.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(up_l[i], single[i + 2], 1e-6 * std::abs(single[i + 2]));
  }

  std::filesystem::path work_;
};

}  // namespace fp8train::test
