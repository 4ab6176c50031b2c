// `fp8train tokenizer train | encode | export-hf`, `fp8train tokenize` and `--tokenizer` through the built CLI
// (FP8TRAIN_CLI), on a very small model and 60 kB of the embedded corpus:
//   - a trained SentencePiece model drives train, is saved in the run and its checkpoints (model.vocab_size
//     follows it), and eval / generate / resume of a checkpoint use it without the flag;
//   - training on token shards resumes bit for bit (the real model's losses of steps 4..6);
//   - a corrupt tokenizer model, a --tokenizer that is not the checkpoint's, a --vocab-size that is not the
//     tokenizer's, a truncated shard and shards of another tokenizer each give one line "fp8train: error: ..."
//     and a non-zero exit.
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

#include "train/corpus.h"

#include "../common/cli_runner.h"

namespace fs = std::filesystem;
using fp8train::test::CliResult;
using fp8train::test::jsonl;
using fp8train::test::slurp;

namespace {

class TokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = fs::path(::testing::TempDir()) / ("fp8train_tokenizer_cli_" + std::to_string(::getpid()));
    fs::remove_all(work_);
    fs::create_directories(work_);
    std::ofstream(work_ / "text.txt") << fp8train::train::generate_corpus(7, 60000);
    std::ofstream(work_ / "tiny.json") << R"({
      "preset": "tiny",
      "model": {"hidden_size": 32, "n_layers": 2, "n_dense_layers": 1, "n_heads": 2, "q_lora_rank": 16,
                "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
                "num_experts_per_tok": 2, "mtp_depth": 1},
      "train": {"steps": 6, "batch_size": 4, "micro_batch_size": 2, "seq_len": 32, "eval_every": 3,
                "eval_batches": 1, "final_eval_windows": 4, "log_every": 1, "threads": 1, "device": "cpu"},
      "optim": {"warmup_steps": 2}
    })";
  }
  void TearDown() override { fs::remove_all(work_); }

  CliResult run(const std::string& args) {
    return fp8train::test::run_cli(FP8TRAIN_CLI, args, work_, "cd '" + work_.string() + "' && ");
  }
  void ok(const std::string& args) {
    const CliResult r = run(args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  }
  void expect_one_line_error(const std::string& args, const std::string& needle) {
    const CliResult r = run(args);
    EXPECT_GT(r.exit_code, 0) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("fp8train: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
    EXPECT_EQ(r.err.find(".cc("), std::string::npos) << "a source location in: " << r.err;
  }
  std::vector<double> losses(const fs::path& run_dir) {
    std::vector<double> out;
    std::istringstream in(slurp(run_dir / "metrics.jsonl"));
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) out.push_back(nlohmann::json::parse(l)["loss"].get<double>());
    return out;
  }
  fs::path work_;
};

}  // namespace

TEST_F(TokenizerCli, TrainedTokenizerTravelsWithTheRunAndItsCheckpoints) {
  ok("tokenizer train --data text.txt --vocab 400 --out tok.model --threads 1");
  ok("tokenizer train --data text.txt --vocab 380 --out other.model --threads 1");
  ok("train --config tiny.json --data text.txt --tokenizer tok.model --out run");
  EXPECT_EQ(slurp(work_ / "run" / "tokenizer.model"), slurp(work_ / "tok.model"));
  EXPECT_EQ(slurp(work_ / "run" / "checkpoints" / "step-00000006" / "tokenizer.model"), slurp(work_ / "tok.model"));
  const auto config = nlohmann::json::parse(slurp(work_ / "run" / "config.json"));
  EXPECT_EQ(config["model"]["vocab_size"], 400);
  EXPECT_EQ(config["data"]["tokenizer"], "tok.model");
  // eval and generate take the checkpoint's tokenizer (the model file may be gone).
  fs::rename(work_ / "tok.model", work_ / "moved.model");
  CliResult r = run("eval --checkpoint run --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).contains("bits_per_token"));
  r = run("generate --checkpoint run --prompt 'The small' --max-new-tokens 8 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("The small", 0), 0u);
  ok("generate --checkpoint run --tokenizer moved.model --max-new-tokens 2");  // the same model: accepted
  expect_one_line_error("generate --checkpoint run --tokenizer other.model", "is not the one checkpoint");
  expect_one_line_error("eval --checkpoint run --tokenizer other.model", "is not the one checkpoint");
  expect_one_line_error("train --resume run --steps 8 --tokenizer other.model", "is not the one checkpoint");
  expect_one_line_error("train --config tiny.json --tokenizer moved.model --vocab-size 500 --out r2",
                        "'model.vocab_size' = 500 differs from the tokenizer's 400 ids");
  EXPECT_FALSE(fs::exists(work_ / "r2"));
  // A corrupt model: one clear line wherever it is read.
  const std::string model = slurp(work_ / "moved.model");
  std::ofstream(work_ / "bad.model", std::ios::binary) << model.substr(0, model.size() / 3);
  expect_one_line_error("train --config tiny.json --tokenizer bad.model --out r3", "is not a valid SentencePiece");
  expect_one_line_error("tokenizer encode --tokenizer bad.model --text hi", "is not a valid SentencePiece");
  expect_one_line_error("tokenize --tokenizer bad.model --data text.txt --out s", "is not a valid SentencePiece");
  EXPECT_FALSE(fs::exists(work_ / "r3"));
  EXPECT_FALSE(fs::exists(work_ / "s"));
  // export-hf of the checkpoint's tokenizer writes what AutoTokenizer loads.
  ok("tokenizer export-hf --checkpoint run --out hf");
  EXPECT_EQ(slurp(work_ / "hf" / "tokenizer.model"), model);
  EXPECT_EQ(nlohmann::json::parse(slurp(work_ / "hf" / "tokenizer_config.json"))["tokenizer_class"], "LlamaTokenizer");
}

TEST_F(TokenizerCli, ShardsTrainResumeBitForBitAndBadShardsAreRefused) {
  ok("tokenizer train --data text.txt --vocab 400 --out tok.model --threads 1");
  ok("tokenize --tokenizer tok.model --data text.txt --out shards --shard-tokens 5000");
  ok("tokenize --verify shards");
  EXPECT_TRUE(fs::exists(work_ / "shards" / "shard-00001.bin"));
  // The shard directory brings its tokenizer: no --tokenizer needed.
  ok("train --config tiny.json --data shards --save-every 3 --out full");
  EXPECT_EQ(slurp(work_ / "full" / "tokenizer.model"), slurp(work_ / "tok.model"));
  ok("train --resume full/checkpoints/step-00000003 --out resumed");
  const std::vector<double> a = losses(work_ / "full"), b = losses(work_ / "resumed");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a[i + 3], b[i]) << "step " << i + 4;
  // Shards of the byte tokenizer do not fit a SentencePiece run.
  ok("tokenize --data text.txt --out byte-shards");
  expect_one_line_error("train --config tiny.json --data byte-shards --tokenizer tok.model --out r4",
                        "were made with another tokenizer");
  // A truncated shard.
  const fs::path shard = work_ / "shards" / "shard-00001.bin";
  const std::string bytes = slurp(shard);
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 1);
  expect_one_line_error("train --config tiny.json --data shards --out r5", "is truncated");
  expect_one_line_error("eval --checkpoint full", "is truncated");
  EXPECT_FALSE(fs::exists(work_ / "r4"));
  EXPECT_FALSE(fs::exists(work_ / "r5"));
}
