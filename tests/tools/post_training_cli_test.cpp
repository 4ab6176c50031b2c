// Post-training through the built CLI (FP8TRAIN_CLI) on a very small MLA + MoE + MTP model, seconds per case:
//   - SFT: train --sft on a JSONL file of prompt/response pairs, eval --sft scores the response tokens only;
//   - the weight EMA: saved in checkpoints, continued bit for bit by a resume, evaluated with eval --ema (and
//     refused, in one line, for a checkpoint without one);
//   - distillation: a student trained with --teacher logs its loss components, and ends measurably closer to the
//     teacher (held-out KL) than the same run with the KL term's weight at 0.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/cli_runner.h"

namespace fs = std::filesystem;
using fp8train::test::CliResult;
using fp8train::test::jsonl;
using fp8train::test::slurp;

namespace {

class PostTrainingCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_post_cli_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
    std::ofstream(work_ / "tiny.json") << R"({
      "preset": "tiny",
      "model": {"hidden_size": 32, "n_layers": 2, "n_dense_layers": 1, "n_heads": 2, "q_lora_rank": 16,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
                "num_experts_per_tok": 2, "mtp_depth": 1},
      "data": {"corpus_bytes": 20000},
      "train": {"steps": 6, "batch_size": 4, "micro_batch_size": 2, "seq_len": 32, "eval_every": 3,
                "eval_batches": 1, "final_eval_windows": 16, "log_every": 1, "threads": 1, "device": "cpu"},
      "optim": {"warmup_steps": 2}
    })";
  }
  void TearDown() override { fs::remove_all(work_); }

  CliResult run(const std::string& args) {
    const char* other = std::getenv("FP8TRAIN_CLI_UNDER_TEST");
    return fp8train::test::run_cli(other && *other ? other : FP8TRAIN_CLI, args, work_);
  }
  std::string train_args(const std::string& out) const {
    return "train --config '" + (work_ / "tiny.json").string() + "' --out '" + (work_ / out).string() + "'";
  }
  nlohmann::json eval_json(const std::string& args) {
    const CliResult r = run("eval " + args + " --json --threads 1 --device cpu");
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.out << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }

  fs::path work_;
};

}  // namespace

TEST_F(PostTrainingCli, SftTrainsAndEvaluatesOnResponsesOnly) {
  {
    std::ofstream f(work_ / "chat.jsonl");
    for (int i = 0; i < 300; ++i)
      f << nlohmann::json{{"prompt", fmt::format("Q: {} + {} =", i, i % 7)},
                          {"response", fmt::format(" {}", i + i % 7)}}
               .dump()
        << "\n";
  }
  const std::string data = (work_ / "chat.jsonl").string();
  const CliResult r = run(train_args("sft") + " --sft '" + data + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SFT: 300 examples"), std::string::npos) << r.out;
  const nlohmann::json config = nlohmann::json::parse(slurp(work_ / "sft" / "config.json"));
  EXPECT_EQ(config["data"]["format"], "sft");
  const nlohmann::json e =
      eval_json("--checkpoint '" + (work_ / "sft").string() + "' --sft '" + data + "' --seq-len 32");
  ASSERT_TRUE(e.contains("tokens"));
  // Only response tokens are scored: far fewer than the windows' positions (prompts are ~3x the responses).
  const nlohmann::json all =
      eval_json("--checkpoint '" + (work_ / "sft").string() + "' --data '" + data + "' --seq-len 32");
  EXPECT_GT(e["tokens"].get<int64_t>(), 0);
  EXPECT_LT(e["tokens"].get<int64_t>() * 2, all["tokens"].get<int64_t>());
  EXPECT_TRUE(std::isfinite(e["loss"].get<double>()));
  EXPECT_NE(e["loss"].get<double>(), all["loss"].get<double>());
  // A malformed file: one line naming the file's line, non-zero exit.
  std::ofstream(work_ / "bad.jsonl") << "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"a\"}\n";
  const CliResult bad = run(train_args("bad") + " --sft '" + (work_ / "bad.jsonl").string() + "'");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(work_ / "bad"));
}

TEST_F(PostTrainingCli, EmaIsCheckpointedResumedBitExactAndEvaluated) {
  ASSERT_EQ(run(train_args("a") + " --ema-decay 0.9 --save-every 3 --keep-last 0").exit_code, 0);
  const fs::path a3 = work_ / "a" / "checkpoints" / "step-00000003", a6 = work_ / "a" / "checkpoints" / "step-00000006";
  ASSERT_TRUE(fs::exists(a3 / "ema.safetensors"));
  ASSERT_TRUE(fs::exists(a6 / "ema.safetensors"));
  // Resuming from step 3 continues the EMA bit for bit.
  const CliResult r = run("train --resume '" + a3.string() + "' --out '" + (work_ / "b").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path b6 = work_ / "b" / "checkpoints" / "step-00000006";
  EXPECT_EQ(slurp(b6 / "master.safetensors"), slurp(a6 / "master.safetensors"));
  EXPECT_EQ(slurp(b6 / "ema.safetensors"), slurp(a6 / "ema.safetensors"));
  EXPECT_NE(slurp(a6 / "ema.safetensors"), slurp(a3 / "ema.safetensors"));
  // eval --ema evaluates other weights than the masters.
  const nlohmann::json master = eval_json("--checkpoint '" + a6.string() + "' --max-windows 8");
  const nlohmann::json ema = eval_json("--checkpoint '" + a6.string() + "' --max-windows 8 --ema");
  EXPECT_EQ(ema["weights"], "ema");
  EXPECT_TRUE(std::isfinite(ema["loss"].get<double>()));
  EXPECT_NE(ema["loss"].get<double>(), master["loss"].get<double>());
  // export --ema writes the EMA weights: the same config, other tensors than the masters' export.
  const CliResult ex_master = run("export --checkpoint '" + a6.string() + "' --out '" + (work_ / "hf").string() + "'");
  ASSERT_EQ(ex_master.exit_code, 0) << ex_master.err;
  const CliResult ex_ema =
      run("export --ema --checkpoint '" + a6.string() + "' --out '" + (work_ / "hf_ema").string() + "'");
  ASSERT_EQ(ex_ema.exit_code, 0) << ex_ema.err;
  EXPECT_EQ(slurp(work_ / "hf_ema" / "config.json"), slurp(work_ / "hf" / "config.json"));
  EXPECT_NE(slurp(work_ / "hf_ema" / "model.safetensors"), slurp(work_ / "hf" / "model.safetensors"));
  // A checkpoint without an EMA: one clear line.
  ASSERT_EQ(run(train_args("plain") + " --steps 1").exit_code, 0);
  const CliResult none = run("eval --checkpoint '" + (work_ / "plain").string() + "' --ema --threads 1 --device cpu");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("holds no weight EMA"), std::string::npos) << none.err;
  const CliResult none_export = run("export --ema --checkpoint '" + (work_ / "plain").string() + "' --out '" +
                                    (work_ / "hf_none").string() + "'");
  EXPECT_NE(none_export.exit_code, 0);
  EXPECT_NE(none_export.err.find("holds no weight EMA"), std::string::npos) << none_export.err;
  EXPECT_FALSE(fs::exists(work_ / "hf_none"));
  // Turning the EMA on at a resume: it starts from the checkpoint's weights, with a warning saying so.
  const CliResult late = run("train --resume '" + (work_ / "plain").string() + "' --steps 2 --ema-decay 0.9");
  ASSERT_EQ(late.exit_code, 0) << late.out << late.err;
  EXPECT_NE(late.out.find("the checkpoint holds no weight EMA"), std::string::npos) << late.out;
  EXPECT_TRUE(fs::exists(work_ / "plain" / "checkpoints" / "step-00000002" / "ema.safetensors"));
}

TEST_F(PostTrainingCli, DistillationMovesTheStudentTowardTheTeacher) {
  // The teacher: another seed and another corpus, trained a little longer, so its distribution is its own.
  ASSERT_EQ(run(train_args("teacher") + " --steps 12 --seed 5 --lr 0.02").exit_code, 0);
  const std::string teacher = (work_ / "teacher").string();
  auto student = [&](const std::string& out, const std::string& weight) {
    const CliResult r = run(train_args(out) + " --steps 8 --teacher '" + teacher + "' --distill-weight " + weight +
                            " --distill-top-k 8");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return jsonl(work_ / out / "eval.jsonl").back()["eval_distill_kl"].get<double>();
  };
  const double with = student("distilled", "4"), without = student("baseline", "0");
  const auto metrics = jsonl(work_ / "distilled" / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 8u);
  for (const auto& m : metrics) {
    ASSERT_TRUE(m.contains("loss_distill") && m.contains("distill_kl")) << m.dump();
    // total = main + distill + mtp + balance
    EXPECT_NEAR(m["loss"].get<double>(),
                m["loss_main"].get<double>() + m["loss_distill"].get<double>() + m["loss_mtp"].get<double>() +
                    m["loss_balance"].get<double>(),
                1e-6);
    EXPECT_NEAR(m["loss_distill"].get<double>(), 4 * m["distill_kl"].get<double>(), 1e-6);
  }
  EXPECT_GT(without, 0.0);
  EXPECT_LT(with, 0.8 * without) << "held-out KL to the teacher: distilled " << with << ", baseline " << without;
}
