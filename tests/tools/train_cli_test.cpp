// `fp8train train | eval | generate` end to end through the built CLI (FP8TRAIN_CLI), on a very small
// MLA + MoE + MTP model and a 20 kB slice of the embedded corpus, so every case takes a few seconds:
//   - train writes metrics.jsonl (one line per step, the documented keys), eval.jsonl, checkpoints, report.html;
//   - eval and generate read the checkpoint;
//   - resuming from step 3 reproduces the uninterrupted run's step 4..6 losses bit for bit (real model);
//   - the MTP weight and router-bias speed schedules switch at their step (loss_mtp, the router biases);
//   - bad inputs (missing file, bad JSON, unknown key, out-of-range value, truncated checkpoint, non-UTF-8 data,
//     unknown preset, an existing run directory) each give exactly one line "fp8train: error: ..." naming the
//     problem (a human sentence: no source location, no raw bytes), and a non-zero exit;
//   - a run's life cycle: a resume writes where the user pointed, a rejected resume writes nothing, a finished
//     run says it is complete, a stopped run can be resumed, warnings for settings that change a run, the
//     final checkpoint before the final evaluation, checkpoint retention, --help with defaults, SIGTERM stopping a
//     run with a checkpoint.
// FP8TRAIN_CLI_UNDER_TEST (environment) runs the cases against another build of the CLI, e.g. an installed one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "train/safetensors.h"
#include "train/token_file.h"

#include "../common/cli_runner.h"

namespace fs = std::filesystem;
using fp8train::test::CliResult;
using fp8train::test::jsonl;
using fp8train::test::slurp;

namespace {

std::string cli_path() {
  const char* other = std::getenv("FP8TRAIN_CLI_UNDER_TEST");
  return other && *other ? other : FP8TRAIN_CLI;
}

// Every file under `dir` (relative path -> bytes): what a command must leave untouched.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = slurp(e.path());
  return files;
}

// The safetensors header's __metadata__ of a file.
nlohmann::json safetensors_metadata(const fs::path& p) {
  const std::string bytes = slurp(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return nlohmann::json::parse(bytes.substr(8, n)).value("__metadata__", nlohmann::json::object());
}

std::vector<std::string> checkpoint_steps(const fs::path& run) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_train_cli_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
    // A model small enough for seconds-long runs that still has every part: MLA, 1 dense + 1 MoE block, MTP.
    std::ofstream(work_ / "tiny.json") << R"({
      "preset": "tiny",
      "model": {"hidden_size": 32, "n_layers": 2, "n_dense_layers": 1, "n_heads": 2, "q_lora_rank": 16,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
                "num_experts_per_tok": 2, "mtp_depth": 1},
      "data": {"corpus_bytes": 20000},
      "train": {"steps": 6, "batch_size": 4, "micro_batch_size": 2, "seq_len": 32, "eval_every": 3,
                "eval_batches": 1, "log_every": 1, "threads": 1, "device": "cpu"},
      "optim": {"warmup_steps": 2}
    })";
  }
  void TearDown() override { fs::remove_all(work_); }

  // Runs the CLI with `args` (in directory `cwd` when given; `env` is prefixed, e.g. "FP8TRAIN_DEBUG=1").
  CliResult run(const std::string& args, const fs::path& cwd = {}, const std::string& env = "") {
    const std::string cd = cwd.empty() ? "" : "cd '" + cwd.string() + "' && ";
    return fp8train::test::run_cli(cli_path(), args, work_, cd + env + (env.empty() ? "" : " "));
  }

  // Asserts a clean failure: non-zero exit, exactly one line on stderr, containing `needle`.
  void expect_one_line_error(const std::string& args, const std::string& needle) {
    const CliResult r = run(args);
    EXPECT_GT(r.exit_code, 0) << args;
    const auto lines = r.err_lines();
    ASSERT_EQ(lines.size(), 1u) << args << "\nstderr:\n" << r.err;
    EXPECT_EQ(lines[0].rfind("fp8train: error: ", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
    expect_human_sentence(lines[0]);
  }

  // An error line a user reads: no internal check text or source location, no raw control or binary bytes.
  static void expect_human_sentence(const std::string& line) {
    EXPECT_EQ(line.find("[check"), std::string::npos) << line;
    EXPECT_EQ(line.find(".cpp:"), std::string::npos) << line;
    EXPECT_EQ(line.find("[at "), std::string::npos) << line;
    EXPECT_EQ(fp8train::printable_text(line), line) << "control characters or invalid UTF-8 in: " << line;
  }

  std::string train_args(const std::string& out) const {
    return "train --config '" + (work_ / "tiny.json").string() + "' --out '" + (work_ / out).string() + "'";
  }

  fs::path work_;
};

}  // namespace

TEST_F(TrainCli, TrainsEvaluatesAndGenerates) {
  const CliResult r = run(train_args("a") + " --save-every 3");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("optim.moment_dtype"), std::string::npos) << "the resolved config table is printed";
  const auto metrics = jsonl(work_ / "a" / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 6u);
  for (const auto& m : metrics) {
    EXPECT_EQ(m.size(), 11u) << m.dump();
    EXPECT_TRUE(m["loss_mtp"].get<double>() > 0) << "the MTP module contributes";
    // No schedules given: the constants (model.mtp_lambda's default, the tiny preset's model.bias_update_speed).
    EXPECT_EQ(m["mtp_lambda"].get<double>(), 0.3) << m.dump();
    EXPECT_EQ(m["bias_update_speed"].get<double>(), 0.01) << m.dump();
    EXPECT_TRUE(m["max_expert_load_ratio"].get<double>() >= 1.0);
  }
  EXPECT_EQ(jsonl(work_ / "a" / "eval.jsonl").size(), 2u);
  const std::string report = slurp(work_ / "a" / "report.html");
  EXPECT_NE(report.find("Per-expert load: layers.1.moe"), std::string::npos) << "MoE layers are named in the report";
  EXPECT_NE(report.find("Per-expert load: mtp.0"), std::string::npos) << "the MTP block's MoE too";
  EXPECT_TRUE(fs::exists(work_ / "a" / "checkpoints" / "step-00000003" / "model.safetensors"));
  EXPECT_EQ(slurp(work_ / "a" / "checkpoints" / "latest"), "step-00000006\n");

  const CliResult e = run("eval --checkpoint '" + (work_ / "a").string() + "' --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_GT(j["bits_per_byte"].get<double>(), 0.0);
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()), 1e-9);
  // On a file given explicitly.
  std::ofstream(work_ / "text.txt") << "The small cat sleeps. 12+30=42\n(([]))\ncount 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n";
  const CliResult e2 = run("eval --checkpoint '" + (work_ / "a").string() + "' --data '" + (work_ / "text.txt").string() + "' --seq-len 16");
  ASSERT_EQ(e2.exit_code, 0) << e2.err;
  EXPECT_NE(e2.out.find("bits per byte"), std::string::npos) << e2.out;

  const CliResult g = run("generate --checkpoint '" + (work_ / "a").string() + "' --prompt 'The ' --max-new-tokens 20 --seed 3");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("The ", 0), 0u) << g.out;
  EXPECT_GT(g.out.size(), 4u);
}

// The schedules reach the real model: from step 4 of 6 (0.5 of the run), λ = 0 removes the MTP loss and γ = 0
// freezes the router biases (the step-3 and step-6 checkpoints hold the same ones).
TEST_F(TrainCli, SchedulesSwitchTheMtpWeightAndTheRouterBiasSpeed) {
  const CliResult r =
      run(train_args("s") + " --save-every 3 --mtp-lambda-schedule 0.3,0@0.5 --bias-update-speed-schedule 0.01,0@0.5");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto metrics = jsonl(work_ / "s" / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 6u);
  for (const auto& m : metrics) {
    const bool second = m["step"].get<int64_t>() > 3;
    EXPECT_EQ(m["mtp_lambda"].get<double>(), second ? 0.0 : 0.3) << m.dump();
    EXPECT_EQ(m["bias_update_speed"].get<double>(), second ? 0.0 : 0.01) << m.dump();
    if (second)
      EXPECT_EQ(m["loss_mtp"].get<double>(), 0.0) << m.dump();
    else
      EXPECT_GT(m["loss_mtp"].get<double>(), 0.0) << m.dump();
  }
  const auto router_biases = [&](const char* step) {
    const fp8train::train::StFile f = fp8train::train::decode_safetensors(
        slurp(work_ / "s" / "checkpoints" / step / "model.safetensors"), "model.safetensors");
    std::map<std::string, std::vector<float>> biases;
    for (const auto& t : f.tensors)
      if (t.name.find(".gate.bias") != std::string::npos) biases[t.name] = fp8train::train::st_to_f32(t);
    return biases;
  };
  const auto at3 = router_biases("step-00000003"), at6 = router_biases("step-00000006");
  ASSERT_FALSE(at3.empty());
  EXPECT_EQ(at3, at6);
  bool moved = false;  // ... which steps 1-3 (γ = 0.01) did move away from zero
  for (const auto& [name, values] : at3)
    for (float v : values) moved = moved || v != 0.0f;
  EXPECT_TRUE(moved);
  // The schedules are saved with the run's config, so a resume keeps them.
  const nlohmann::json config = nlohmann::json::parse(slurp(work_ / "s" / "config.json"));
  EXPECT_EQ(config["train"]["mtp_lambda_schedule"], "0.3,0@0.5");
  EXPECT_EQ(config["train"]["bias_update_speed_schedule"], "0.01,0@0.5");
  // A bad schedule is one sentence naming the key and the piece.
  expect_one_line_error(train_args("bad") + " --mtp-lambda-schedule 0.3,0.1@1.5",
                        "config key 'train.mtp_lambda_schedule': piece '0.1@1.5': the start must be in [0, 1)");
}

TEST_F(TrainCli, ResumeFromStepThreeReproducesTheUninterruptedRunBitForBit) {
  ASSERT_EQ(run(train_args("full") + " --save-every 3").exit_code, 0);
  const CliResult r = run("train --resume '" + (work_ / "full" / "checkpoints" / "step-00000003").string() +
                          "' --out '" + (work_ / "resumed").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto full = jsonl(work_ / "full" / "metrics.jsonl");
  auto resumed = jsonl(work_ / "resumed" / "metrics.jsonl");
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    full[i + 3].erase("tokens_per_s");  // wall-clock dependent
    resumed[i].erase("tokens_per_s");
    EXPECT_EQ(resumed[i].dump(), full[i + 3].dump()) << "step " << i + 4;
  }
  // Same final weights, byte for byte.
  EXPECT_EQ(slurp(work_ / "resumed" / "checkpoints" / "step-00000006" / "master.safetensors"),
            slurp(work_ / "full" / "checkpoints" / "step-00000006" / "master.safetensors"));
}

TEST_F(TrainCli, BadInputsGiveOneClearLine) {
  expect_one_line_error(train_args("x") + " --data '" + (work_ / "missing.txt").string() + "'", "does not exist");
  std::ofstream(work_ / "bad.json") << "{\"train\": {\"steps\": 3,}";
  expect_one_line_error("train --config '" + (work_ / "bad.json").string() + "'", "is not valid JSON");
  std::ofstream(work_ / "unknown.json") << R"({"optim": {"lrr": 0.1}})";
  expect_one_line_error("train --config '" + (work_ / "unknown.json").string() + "'", "unknown config key 'optim.lrr'");
  expect_one_line_error(train_args("x") + " --lr -1", "'optim.lr' must be in");
  expect_one_line_error("train --preset huge", "unknown preset 'huge'");
  expect_one_line_error("train --config '" + (work_ / "missing.json").string() + "'", "does not exist");
  std::ofstream(work_ / "latin1.txt", std::ios::binary) << "caf\xE9 au lait";
  expect_one_line_error(train_args("x") + " --data '" + (work_ / "latin1.txt").string() + "'",
                        "is not valid UTF-8: byte offset 3");
  // A truncated checkpoint, for resume and for eval.
  ASSERT_EQ(run(train_args("t")).exit_code, 0);
  const fs::path model = work_ / "t" / "checkpoints" / "step-00000006" / "model.safetensors";
  fs::resize_file(model, fs::file_size(model) / 2);
  expect_one_line_error("train --resume '" + (work_ / "t").string() + "'", "truncated");
  expect_one_line_error("eval --checkpoint '" + (work_ / "t").string() + "'", "truncated");
  expect_one_line_error("eval --checkpoint '" + (work_ / "nowhere").string() + "'", "does not exist");
  // Training into a directory that already holds a run is refused (no silent overwrite).
  expect_one_line_error(train_args("t"), "already holds a run");
}

// ---- a run's life cycle ------------------------------------------------------------------------------------

TEST_F(TrainCli, ResumeWritesIntoTheRunTheUserPointedAt) {
  ASSERT_EQ(run(train_args("orig") + " --save-every 3").exit_code, 0);
  const auto original = snapshot(work_ / "orig");
  fs::copy(work_ / "orig", work_ / "copy", fs::copy_options::recursive);
  // Resuming the copy from its step-3 checkpoint continues the copy, not the run recorded in the checkpoint.
  const CliResult r = run("train --resume '" + (work_ / "copy" / "checkpoints" / "step-00000003").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(snapshot(work_ / "orig"), original) << "the original run was modified";
  EXPECT_EQ(jsonl(work_ / "copy" / "metrics.jsonl").size(), 6u);
  EXPECT_EQ(nlohmann::json::parse(slurp(work_ / "copy" / "config.json"))["train"]["out"],
            (work_ / "copy").string());
  // A moved run, resumed from another working directory with a relative path: written into the moved run only.
  fs::rename(work_ / "copy", work_ / "moved");
  fs::create_directories(work_ / "elsewhere");
  const CliResult m = run("train --resume ../moved/checkpoints/step-00000003", work_ / "elsewhere");
  ASSERT_EQ(m.exit_code, 0) << m.out << m.err;
  EXPECT_TRUE(fs::is_empty(work_ / "elsewhere")) << "a partial run was created in the working directory";
  EXPECT_FALSE(fs::exists(work_ / "copy")) << "the run's old location was recreated";
  EXPECT_EQ(snapshot(work_ / "orig"), original);
  int resumed = 0;
  for (const auto& e : jsonl(work_ / "moved" / "events.jsonl")) resumed += e["event"] == "resumed";
  EXPECT_EQ(resumed, 2);
  EXPECT_EQ(jsonl(work_ / "moved" / "metrics.jsonl").size(), 6u);
}

TEST_F(TrainCli, ResumingAFinishedRunSaysItIsCompleteAndHowToExtendIt) {
  ASSERT_EQ(run(train_args("done")).exit_code, 0);
  const auto before = snapshot(work_ / "done");
  for (int attempt = 0; attempt < 2; ++attempt) {
    const CliResult r = run("train --resume '" + (work_ / "done").string() + "'");
    EXPECT_EQ(r.exit_code, 1);
    const auto lines = r.err_lines();
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find("is complete (6 of 6 steps)"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("--steps"), std::string::npos) << "says how to extend it: " << lines[0];
    expect_human_sentence(lines[0]);
  }
  EXPECT_EQ(snapshot(work_ / "done"), before) << "a refused resume changed the run (events, config, logs)";
  // Extending it: more steps continue from the final checkpoint.
  const CliResult r = run("train --resume '" + (work_ / "done").string() + "' --steps 8");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(jsonl(work_ / "done" / "metrics.jsonl").size(), 8u);
}

TEST_F(TrainCli, ARejectedResumeWritesNothing) {
  ASSERT_EQ(run(train_args("r") + " --save-every 3").exit_code, 0);
  const auto before = snapshot(work_ / "r");
  const std::string step3 = (work_ / "r" / "checkpoints" / "step-00000003").string();
  expect_one_line_error("train --resume '" + step3 + "' --hidden-size 48", "shape");
  const std::string moments = nlohmann::json::parse(slurp(work_ / "r" / "config.json"))["optim"]["moment_dtype"];
  expect_one_line_error("train --resume '" + step3 + "' --moment-dtype " + (moments == "bf16" ? "fp32" : "bf16"),
                        "moments");
  EXPECT_EQ(snapshot(work_ / "r"), before) << "a rejected resume modified the run";
  expect_one_line_error("train --resume '" + step3 + "' --hidden-size 48 --out '" + (work_ / "fresh").string() + "'",
                        "shape");
  EXPECT_FALSE(fs::exists(work_ / "fresh")) << "a rejected resume left a run folder behind";
}

TEST_F(TrainCli, TheRecipeDecidesTheOptimizerMoments) {
  // recipe spec -> AdamW moment dtype, whatever the command (compare uses the same rule: compare_cli_test.cpp)
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"fp32", "fp32"}, {"bf16", "fp32"}, {"bf16:moments=bf16", "bf16"}, {"fp8-deepseek", "bf16"},
      {"fp8-deepseek:moments=fp32", "fp32"}};
  int i = 0;
  for (const auto& [recipe, moments] : cases) {
    SCOPED_TRACE(recipe);
    const std::string dir = fmt::format("m{}", i++);
    const CliResult r = run(train_args(dir) + " --steps 1 --recipe " + recipe);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(nlohmann::json::parse(slurp(work_ / dir / "config.json"))["optim"]["moment_dtype"], moments);
    EXPECT_EQ(safetensors_metadata(work_ / dir / "checkpoints" / "step-00000001" / "optimizer.safetensors")["moment_dtype"],
              moments);
  }
  // An explicit --moment-dtype overrides the recipe's default, but contradicting the recipe's own ":moments=" is
  // an error, not a silent choice.
  ASSERT_EQ(run(train_args("explicit") + " --steps 1 --recipe bf16 --moment-dtype bf16").exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(slurp(work_ / "explicit" / "config.json"))["optim"]["moment_dtype"], "bf16");
  expect_one_line_error(train_args("conflict") + " --recipe bf16:moments=bf16 --moment-dtype fp32", "moments=bf16");
  EXPECT_FALSE(fs::exists(work_ / "conflict"));
}

TEST_F(TrainCli, TheFinalCheckpointIsSavedBeforeTheFinalEvaluationWhoseSizeIsASetting) {
  const CliResult r = run(train_args("f") + " --final-eval-windows 3");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> log;
  std::istringstream in(slurp(work_ / "f" / "train.log"));
  for (std::string l; std::getline(in, l);) log.push_back(l);
  auto index_of = [&](const std::string& needle) {
    for (size_t i = 0; i < log.size(); ++i)
      if (log[i].find(needle) != std::string::npos) return static_cast<ptrdiff_t>(i);
    return static_cast<ptrdiff_t>(-1);
  };
  const ptrdiff_t saved = index_of("step 6: final checkpoint saved");
  const ptrdiff_t started = index_of("step 6: final evaluation");
  const ptrdiff_t evaluated = index_of("step 6: held-out loss");
  ASSERT_GE(saved, 0) << slurp(work_ / "f" / "train.log");
  ASSERT_GE(started, 0) << "the final evaluation announces itself: " << slurp(work_ / "f" / "train.log");
  ASSERT_GE(evaluated, 0);
  EXPECT_LT(saved, started);
  EXPECT_LT(started, evaluated);
  EXPECT_NE(log[static_cast<size_t>(evaluated)].find("(3 windows of 32 tokens)"), std::string::npos)
      << log[static_cast<size_t>(evaluated)];
  // 0: the final evaluation uses the periodic evaluation's windows (eval_batches 1 x micro-batch 2 = 2).
  ASSERT_EQ(run(train_args("f0") + " --final-eval-windows 0").exit_code, 0);
  EXPECT_NE(slurp(work_ / "f0" / "train.log").find("step 6: held-out loss"), std::string::npos);
  EXPECT_NE(slurp(work_ / "f0" / "train.log").find("(2 windows of 32 tokens)"), std::string::npos);
}

TEST_F(TrainCli, ARunStoppedByNonFiniteStepsLeavesACheckpointToResumeFrom) {
  // A learning rate of 10 without clipping blows the tiny model up within two steps.
  const CliResult r = run(train_args("nan") + " --lr 10 --final-lr 1 --grad-clip 0 --max-bad-steps 1 --steps 30");
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("training stopped at step"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("--resume"), std::string::npos) << "says how to continue: " << lines[0];
  expect_human_sentence(lines[0]);
  ASSERT_TRUE(fs::exists(work_ / "nan" / "checkpoints" / "latest")) << "no checkpoint to resume from";
  EXPECT_TRUE(fs::exists(work_ / "nan" / "report.html"));
  // Training into it again points at --resume; resuming (with a saner learning rate) gets going.
  expect_one_line_error(train_args("nan"), "--resume");
  const CliResult again = run("train --resume '" + (work_ / "nan").string() + "' --lr 1e-4 --final-lr 1e-5 --grad-clip 1");
  EXPECT_NE(again.out.find("resumed from"), std::string::npos) << again.out << again.err;
  // A folder holding a run without any checkpoint says so instead of suggesting --resume.
  fs::remove_all(work_ / "nan" / "checkpoints");
  expect_one_line_error(train_args("nan"), "no checkpoint");
}

// SIGTERM (a scheduler preempting the job) stops a run like Ctrl-C: after the current step, with a checkpoint to
// resume from and one error line saying so.
TEST_F(TrainCli, SigtermStopsAfterTheStepWithACheckpoint) {
  const fs::path out = work_ / "term.out", err = work_ / "term.err", metrics = work_ / "term" / "metrics.jsonl";
  const std::string cmd = "exec '" + cli_path() + "' " + train_args("term") + " --steps 100000 > '" + out.string() +
                          "' 2> '" + err.string() + "'";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // wait for the first step's metrics row (at most 60 s), then ask the run to stop
  bool stepped = false;
  for (int i = 0; i < 600 && !stepped; ++i) {
    stepped = fs::exists(metrics) && slurp(metrics).find('\n') != std::string::npos;
    if (!stepped) ::usleep(100000);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) ::usleep(100000);
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the run did not stop within 60 s of SIGTERM";
  }
  ASSERT_TRUE(stepped) << slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by a signal, not stopped: " << slurp(err);
  EXPECT_EQ(WEXITSTATUS(status), 1) << slurp(err);
  const std::string e = slurp(err);
  EXPECT_NE(e.find("interrupted at step"), std::string::npos) << e;
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  ASSERT_TRUE(fs::exists(work_ / "term" / "checkpoints" / "latest")) << e;
  const std::vector<nlohmann::json> rows = jsonl(metrics);
  ASSERT_FALSE(rows.empty());
  EXPECT_LT(rows.back().at("step").get<int64_t>(), 100000);
}

TEST_F(TrainCli, EvalAndGenerateDoNotNeedTheOptimizerState) {
  ASSERT_EQ(run(train_args("inf")).exit_code, 0);
  fs::remove(work_ / "inf" / "checkpoints" / "step-00000006" / "optimizer.safetensors");
  const CliResult e = run("eval --checkpoint '" + (work_ / "inf").string() + "' --json");
  EXPECT_EQ(e.exit_code, 0) << e.err;
  const CliResult g = run("generate --checkpoint '" + (work_ / "inf").string() + "' --max-new-tokens 5");
  EXPECT_EQ(g.exit_code, 0) << g.err;
  // Resuming does need it, and says which file is missing.
  expect_one_line_error("train --resume '" + (work_ / "inf").string() + "' --steps 8", "optimizer.safetensors is missing");
}

TEST_F(TrainCli, ARunShorterThanItsWarmupSaysSo) {
  const CliResult r = run(train_args("short") + " --steps 3 --warmup-steps 30");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("warning: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optim.warmup_steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak learning rate"), std::string::npos) << r.out;
  // The normal run says nothing of the kind.
  const CliResult n = run(train_args("normal"));
  EXPECT_EQ(n.out.find("warning: "), std::string::npos) << n.out;
}

TEST_F(TrainCli, ResumingWithChangedSettingsWarns) {
  ASSERT_EQ(run(train_args("base") + " --save-every 3").exit_code, 0);
  const std::string step3 = (work_ / "base" / "checkpoints" / "step-00000003").string();
  // The same settings: no warning.
  const CliResult same = run("train --resume '" + step3 + "' --out '" + (work_ / "same").string() + "'");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(same.out.find("warning: "), std::string::npos) << same.out;
  const CliResult r = run("train --resume '" + step3 + "' --out '" + (work_ / "changed").string() +
                          "' --seed 7 --steps 8 --recipe fp32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"train.seed", "train.steps", "train.recipe"})
    EXPECT_NE(r.out.find(std::string("warning: ") + "resuming with '" + key + "'"), std::string::npos)
        << key << "\n" << r.out;
  EXPECT_NE(r.out.find("learning-rate schedule"), std::string::npos) << "--steps changes the schedule: " << r.out;
  int warnings = 0;
  for (const auto& e : jsonl(work_ / "changed" / "events.jsonl")) warnings += e["event"] == "warning";
  EXPECT_GE(warnings, 3);
  // Different data under the same settings is noticed too (the data's fingerprint is in the checkpoint).
  std::ofstream(work_ / "text.txt") << std::string(20000, 'a');
  const CliResult d = run("train --resume '" + step3 + "' --out '" + (work_ / "data").string() + "' --data '" +
                          (work_ / "text.txt").string() + "'");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("warning: resuming on different data"), std::string::npos) << d.out;
  // fp8-tensorwise's amax histories travel in the checkpoint (recipe_state.safetensors): a resume continues the run
  // bit for bit and says nothing; resuming another recipe's checkpoint as fp8-tensorwise says they restart.
  EXPECT_EQ(same.out.find("amax histories"), std::string::npos) << same.out;
  ASSERT_EQ(run(train_args("tw") + " --save-every 3 --recipe fp8-tensorwise").exit_code, 0);
  const std::string tw3 = (work_ / "tw" / "checkpoints" / "step-00000003").string();
  EXPECT_TRUE(fs::exists(fs::path(tw3) / "recipe_state.safetensors"));
  const CliResult tw = run("train --resume '" + tw3 + "' --out '" + (work_ / "tw2").string() + "'");
  ASSERT_EQ(tw.exit_code, 0) << tw.err;
  EXPECT_EQ(tw.out.find("amax histories"), std::string::npos) << tw.out;
  std::vector<double> straight, resumed;
  for (const auto& m : jsonl(work_ / "tw" / "metrics.jsonl")) straight.push_back(m["loss"].get<double>());
  for (const auto& m : jsonl(work_ / "tw2" / "metrics.jsonl")) resumed.push_back(m["loss"].get<double>());
  ASSERT_EQ(straight.size(), 6u);
  // the resumed run's own log starts at step 4; the periodic evaluation at step 3 (before the checkpoint) left the
  // histories as training had them
  EXPECT_EQ(resumed, std::vector<double>(straight.begin() + 3, straight.end())) << "fp8-tensorwise resumes exactly";
  const CliResult cross =
      run("train --resume '" + step3 + "' --out '" + (work_ / "cross").string() + "' --recipe fp8-tensorwise");
  ASSERT_EQ(cross.exit_code, 0) << cross.err;
  EXPECT_NE(cross.out.find("warning: the checkpoint holds no recipe state for 'fp8-tensorwise'"), std::string::npos)
      << cross.out;
}

TEST_F(TrainCli, EvaluationDoesNotChangeTrainingUnderDelayedScaling) {
  // An evaluation's forward passes push into fp8-tensorwise's amax histories; the trainer puts them back, so how
  // often a run evaluates does not change its training losses.
  ASSERT_EQ(run(train_args("eval3") + " --recipe fp8-tensorwise").exit_code, 0);
  ASSERT_EQ(run(train_args("eval0") + " --recipe fp8-tensorwise --eval-every 0").exit_code, 0);
  std::vector<double> a, b;
  for (const auto& m : jsonl(work_ / "eval3" / "metrics.jsonl")) a.push_back(m["loss"].get<double>());
  for (const auto& m : jsonl(work_ / "eval0" / "metrics.jsonl")) b.push_back(m["loss"].get<double>());
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
}

TEST_F(TrainCli, LateErrorsLeaveNoRunFolderBehind) {
  // A token file whose vocabulary is larger than the model's: refused before anything is created.
  std::vector<uint32_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 1000);
  fp8train::train::write_token_file((work_ / "big.tok").string(), tokens, 1000, 2);
  expect_one_line_error(train_args("late") + " --data '" + (work_ / "big.tok").string() + "'", "vocabulary");
  EXPECT_FALSE(fs::exists(work_ / "late")) << "an empty run folder was left behind";
}

TEST_F(TrainCli, ErrorLinesAreOneHumanSentence) {
  ASSERT_EQ(run(train_args("m") + " --save-every 3").exit_code, 0);
  // A state.json overwritten with binary: the message names the file and quotes no raw bytes.
  std::ofstream(work_ / "m" / "checkpoints" / "step-00000003" / "state.json", std::ios::binary)
      << std::string("\x01\x02{\xff\xfe\x1b[2J binary");
  const std::string args = "train --resume '" + (work_ / "m" / "checkpoints" / "step-00000003").string() + "'";
  expect_one_line_error(args, "state.json is not valid JSON");
  // The failed check's location is for developers: a second line only with FP8TRAIN_DEBUG set.
  const CliResult d = run(args, {}, "FP8TRAIN_DEBUG=1");
  const auto lines = d.err_lines();
  ASSERT_EQ(lines.size(), 2u) << d.err;
  EXPECT_EQ(lines[1].rfind("fp8train: debug: ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find(".cpp:"), std::string::npos) << lines[1];
}

// CLI11 prints an option's default as "--name TYPE=value" (Debian 12's 2.3) or "--name TYPE [value]" (newer
// releases, the GPU machine's): either form says it.
bool shows_default(const std::string& help, const std::string& option, const std::string& value) {
  return help.find(option + "=" + value) != std::string::npos ||
         help.find(option + " [" + value + "]") != std::string::npos;
}

TEST_F(TrainCli, HelpShowsDefaults) {
  const CliResult t = run("train --help");
  ASSERT_EQ(t.exit_code, 0);
  EXPECT_NE(t.out.find("default 0.003 (small preset; tiny: 0.01, base: 0.001)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("default 0.9"), std::string::npos) << "beta1, the same in every preset: " << t.out;
  EXPECT_TRUE(shows_default(t.out, "--preset TEXT", "small")) << t.out;
  const CliResult e = run("eval --help");
  EXPECT_TRUE(shows_default(e.out, "--batch INT", "8")) << e.out;
  const CliResult g = run("generate --help");
  EXPECT_TRUE(shows_default(g.out, "--temperature FLOAT", "0.8")) << g.out;
  EXPECT_TRUE(shows_default(g.out, "--max-new-tokens INT", "200")) << g.out;
  const CliResult c = run("compare --help");
  EXPECT_TRUE(shows_default(c.out, "--recipes TEXT", "bf16,fp8-deepseek,fp8-tensorwise,int8-blockwise")) << c.out;
  EXPECT_NE(c.out.find("default 0.003 (small preset"), std::string::npos) << c.out;
}

TEST_F(TrainCli, TheReportAndProgressSayWhatTheyShow) {
  const CliResult r = run(train_args("rep"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string report = slurp(work_ / "rep" / "report.html");
  EXPECT_NE(report.find("<th>recipe</th><td>bf16</td>"), std::string::npos) << "the report names the recipe";
  EXPECT_NE(report.find("<th>device</th><td>CPU"), std::string::npos) << "the report names the device";
  const auto summary = nlohmann::json::parse(slurp(work_ / "rep" / "summary.json"));
  EXPECT_EQ(summary["recipe"], "bf16");
  // The progress line's loss says it includes the MTP and balance terms, next to the next-token loss.
  EXPECT_NE(r.out.find("step 6/6 | next-token loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | total (+MTP, balance) "), std::string::npos) << r.out;
}

TEST_F(TrainCli, CheckpointRetentionKeepsTheLastNAndEveryKth) {
  ASSERT_EQ(run(train_args("keep") + " --save-every 1 --keep-last 2 --keep-every 3").exit_code, 0);
  EXPECT_EQ(checkpoint_steps(work_ / "keep"),
            (std::vector<std::string>{"step-00000003", "step-00000005", "step-00000006"}));
  EXPECT_EQ(slurp(work_ / "keep" / "checkpoints" / "latest"), "step-00000006\n");
  ASSERT_EQ(run(train_args("all") + " --save-every 1 --keep-last 0").exit_code, 0);
  EXPECT_EQ(checkpoint_steps(work_ / "all").size(), 6u) << "--keep-last 0 keeps every checkpoint";
}

TEST_F(TrainCli, TheReportPlotsSaturationAndUnderflowAndFitsShortRuns) {
  const CliResult r = run(train_args("fp8") + " --recipe fp8-deepseek --steps 2 --health-every 1 --eval-every 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string report = slurp(work_ / "fp8" / "report.html");
  EXPECT_NE(report.find("FP8 saturation"), std::string::npos);
  EXPECT_NE(report.find("FP8 underflow"), std::string::npos);
  EXPECT_EQ(report.find("bits per token"), std::string::npos) << "byte data is measured per byte";
  EXPECT_NE(report.find("Held-out bits per byte"), std::string::npos);
}

// generate decodes with MLA's latent cache (the default), without it (--no-cache) and speculatively with the MTP
// module as drafter: greedy text is the same all three ways (40 tokens: past the window, so the context restarts
// too); --stats reports speed and the drafts' acceptance rate; a bad --speculative value is one line.
TEST_F(TrainCli, GenerateWithTheLatentCacheAndMtpSpeculationMatchesRecomputation) {
  ASSERT_EQ(run(train_args("gen")).exit_code, 0);
  const std::string base =
      "generate --checkpoint '" + (work_ / "gen").string() + "' --prompt 'The ' --max-new-tokens 40 --temperature 0";
  const CliResult plain = run(base + " --no-cache"), cached = run(base),
                  spec = run(base + " --speculative mtp --stats");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_GT(plain.out.size(), 4u);
  EXPECT_EQ(cached.out, plain.out);
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("drafts accepted"), std::string::npos) << spec.err;
  const CliResult sampled = run("generate --checkpoint '" + (work_ / "gen").string() +
                                "' --max-new-tokens 20 --temperature 0.8 --speculative mtp --seed 5");
  EXPECT_EQ(sampled.exit_code, 0) << sampled.err;
  expect_one_line_error(base + " --speculative tree", "--speculative must be none or mtp");
}
