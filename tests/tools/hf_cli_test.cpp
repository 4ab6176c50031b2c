// `fp8train export --format hf`, `train --init-from` and `logits` end to end through the built CLI (FP8TRAIN_CLI)
// on a very small model (seconds):
//   - export writes config.json / generation_config.json / model.safetensors and the tokenizer's files, leaves no
//     temporary behind, refuses an existing --out, and writes nothing when the checkpoint is corrupt;
//   - train --init-from takes the model's shape from the directory, starts from its weights (the first step's
//     loss equals the exported model's held-out level, far below a fresh model's), and refuses --resume with it;
//   - a foreign config (llama, YaRN, softmax scores, no query compression), a model flag that changes a shape, and
//     bad logits input each give one line "fp8train: error: ..." naming the problem, and a non-zero exit.
// The weights' bit-exact round trip is tests/train/hf_format_test.cpp; transformers itself is
// tests/python/test_hf_export.py.
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

std::string q(const fs::path& p) { return fmt::format("'{}'", p.string()); }

class HfCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_hf_cli_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
    std::ofstream(work_ / "tiny.json") << R"({
      "preset": "tiny",
      "model": {"hidden_size": 32, "n_layers": 2, "n_dense_layers": 1, "n_heads": 2, "q_lora_rank": 16,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
                "num_experts_per_tok": 2, "mtp_depth": 1},
      "data": {"corpus_bytes": 20000},
      "train": {"steps": 30, "batch_size": 4, "seq_len": 32, "eval_every": 0, "eval_batches": 1,
                "final_eval_windows": 8, "log_every": 1, "threads": 1, "device": "cpu", "recipe": "fp32"},
      "optim": {"warmup_steps": 2, "lr": 0.01}
    })";
    const CliResult r = run(fmt::format("train --config {} --out {}", q(work_ / "tiny.json"), q(work_ / "a")));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const CliResult e =
        run(fmt::format("export --format hf --checkpoint {} --out {}", q(work_ / "a"), q(work_ / "hf")));
    ASSERT_EQ(e.exit_code, 0) << e.out << e.err;
  }
  static void TearDownTestSuite() { fs::remove_all(work_); }

  static CliResult run(const std::string& args) { return fp8train::test::run_cli(FP8TRAIN_CLI, args, work_); }

  static void expect_one_line_error(const std::string& args, const std::string& needle) {
    const CliResult r = run(args);
    EXPECT_GT(r.exit_code, 0) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr:\n" << r.err;
    EXPECT_EQ(r.err.rfind("fp8train: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
  }

  // A copy of the export with config.json edited.
  static fs::path edited_export(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path dir = work_ / name;
    fs::remove_all(dir);
    fs::copy(work_ / "hf", dir);
    nlohmann::json c = nlohmann::json::parse(slurp(dir / "config.json"));
    edit(c);
    std::ofstream(dir / "config.json") << c.dump(2);
    return dir;
  }

  static std::string short_run(const std::string& out) {
    return fmt::format(
        "train --preset tiny --steps 1 --batch-size 4 --seq-len 32 --final-eval-windows 4 --corpus-bytes 20000 "
        "--threads 1 --recipe fp32 --out {}",
        q(work_ / out));
  }

  static fs::path work_;
};
fs::path HfCli::work_;

}  // namespace

TEST_F(HfCli, ExportWritesTheDirectoryAtomically) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(work_ / "hf")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  // The byte tokenizer's Hugging Face files come with the weights (train/tokenizer_hf.h).
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                             "tokenizer.json", "tokenizer_config.json"}));
  for (const auto& e : fs::directory_iterator(work_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  const nlohmann::json c = nlohmann::json::parse(slurp(work_ / "hf" / "config.json"));
  EXPECT_EQ(c["model_type"], "deepseek_v3");
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["max_position_embeddings"], 32);

  expect_one_line_error(fmt::format("export --format hf --checkpoint {} --out {}", q(work_ / "a"), q(work_ / "hf")),
                        "already exists");
  expect_one_line_error(fmt::format("export --format onnx --checkpoint {} --out {}", q(work_ / "a"), q(work_ / "x")),
                        "unknown --format 'onnx'");
  // A corrupt checkpoint: refused, and no output directory appears.
  fs::copy(work_ / "a", work_ / "corrupt", fs::copy_options::recursive);
  const fs::path step = work_ / "corrupt" / "checkpoints" / slurp(work_ / "a" / "checkpoints" / "latest").substr(0, 13);
  fs::resize_file(step / "master.safetensors", 100);
  expect_one_line_error(
      fmt::format("export --format hf --checkpoint {} --out {}", q(work_ / "corrupt"), q(work_ / "hf-corrupt")),
      "master.safetensors");
  EXPECT_FALSE(fs::exists(work_ / "hf-corrupt"));
}

TEST_F(HfCli, InitFromStartsFromTheExportedWeights) {
  const CliResult fresh = run(fmt::format("{} --config {}", short_run("fresh"), q(work_ / "tiny.json")));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  const CliResult r = run(fmt::format("{} --init-from {}", short_run("b"), q(work_ / "hf")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("initial weights: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("init-from"), std::string::npos) << "the config table names the source";
  const nlohmann::json config = nlohmann::json::parse(slurp(work_ / "b" / "config.json"));
  EXPECT_EQ(config["model"]["hidden_size"], 32) << "the shape comes from the directory, not the tiny preset";
  // The first step's loss: the trained model's, well below a fresh model's (ln 259 ≈ 5.56).
  const double trained = jsonl(work_ / "b" / "metrics.jsonl").at(0)["loss_main"].get<double>();
  const double untrained = jsonl(work_ / "fresh" / "metrics.jsonl").at(0)["loss_main"].get<double>();
  EXPECT_LT(trained, untrained - 1.0) << trained << " vs " << untrained;

  expect_one_line_error(fmt::format("{} --init-from {} --resume {}", short_run("c"), q(work_ / "hf"), q(work_ / "a")),
                        "cannot be combined with --resume");
  expect_one_line_error(fmt::format("{} --init-from {} --hidden-size 64", short_run("d"), q(work_ / "hf")),
                        "has shape");
  expect_one_line_error(fmt::format("{} --init-from {}", short_run("e"), q(work_ / "nowhere")), "does not exist");
}

TEST_F(HfCli, ForeignConfigsAreRefused) {
  const auto refuse = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                          const std::string& needle) {
    const fs::path dir = edited_export(name, edit);
    expect_one_line_error(fmt::format("{} --init-from {}", short_run("r-" + name), q(dir)), needle);
    EXPECT_FALSE(fs::exists(work_ / ("r-" + name) / "checkpoints")) << name;
  };
  refuse(
      "llama", [](nlohmann::json& c) { c["model_type"] = "llama"; }, "model_type is 'llama'");
  refuse(
      "yarn",
      [](nlohmann::json& c) {
        c["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}};
      },
      "'yarn'");
  refuse(
      "softmax", [](nlohmann::json& c) { c["scoring_func"] = "softmax"; }, "scoring_func 'softmax'");
  refuse(
      "noq", [](nlohmann::json& c) { c["q_lora_rank"] = nullptr; }, "q_lora_rank is null");
}

TEST_F(HfCli, LogitsDumpsEveryPosition) {
  const CliResult r = run(fmt::format("logits --checkpoint {} --tokens 72,105,33", q(work_ / "a")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].size(), 259u);
  expect_one_line_error(fmt::format("logits --checkpoint {} --tokens 72,999", q(work_ / "a")),
                        "outside the vocabulary");
  expect_one_line_error(fmt::format("logits --checkpoint {} --tokens 72,x", q(work_ / "a")), "not a token id");
}
