// Chat / SFT data (train/sft.h): the token stream and loss mask of a JSONL file, errors naming the line, the
// sampler and the evaluation ignoring prompt targets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/error_of.h"
#include "common/error.h"
#include "train/dataset.h"
#include "train/sft.h"
#include "train/trainer.h"

using namespace fp8train;
using namespace fp8train::train;

namespace {
namespace fs = std::filesystem;

using test_util::error_of;

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("fp8train-sft-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << text;
  return dir / name;
}

// A TrainableModel stand-in that records the targets it is asked to score.
struct RecordingModel : TrainableModel {
  std::vector<Token> seen;
  optim::ParamArenas arenas;
  const optim::ParamArenas& parameters() override { return arenas; }
  std::vector<NamedTensor> state() override { return {}; }
  int64_t vocab_size() const override { return kByteVocabSize; }
  MicroBatchResult forward_backward(const Token*, const Token*, int64_t, int64_t, double) override { return {}; }
  void after_step() override {}
  void discard_step() override {}
  double eval_loss_sum(const Token*, const Token* targets, int64_t batch, int64_t seq_len) override {
    double sum = 0;
    for (int64_t i = 0; i < batch * seq_len; ++i) {
      seen.push_back(targets[i]);
      if (targets[i] != kIgnoreTarget) sum += 1.0;  // a loss of 1 nat per scored target
    }
    return sum;
  }
  std::vector<float> next_token_logits(const Token*, int64_t, int64_t) override { return {}; }
};

}  // namespace

TEST(Sft, PacksExamplesWithBosEosAndMasksAllButTheResponse) {
  const fs::path p = write_temp("a.jsonl",
                                "{\"prompt\": \"ab\", \"response\": \"c\"}\n\n{\"response\": \"xy\", "
                                "\"prompt\": \"\", \"id\": 7}\n");
  const TokenData d = load_sft_data(p.string(), byte_sft_tokenizer());
  const std::vector<Token> want = {kBos, 'a', 'b', 'c', kEos, kBos, 'x', 'y', kEos};
  const std::vector<uint8_t> mask = {0, 0, 0, 1, 1, 0, 1, 1, 1};
  EXPECT_EQ(d.tokens.to_vector(), want);
  EXPECT_EQ(d.loss_mask, mask);
  EXPECT_TRUE(d.byte_tokens);
  EXPECT_NE(d.source.find("2 examples"), std::string::npos) << d.source;
}

TEST(Sft, TheTokenizerIsAParameter) {
  SftTokenizer t;
  t.encode = [](std::string_view s) { return std::vector<Token>(s.size(), 5); };  // every character -> token 5
  t.bos = 1;
  t.eos = 2;
  t.vocab_size = 10;
  t.byte_tokens = false;
  const TokenData d = load_sft_data(write_temp("b.jsonl", R"({"prompt":"pq","response":"r"})").string(), t);
  EXPECT_EQ(d.tokens.to_vector(), (std::vector<Token>{1, 5, 5, 5, 2}));
  EXPECT_EQ(d.vocab_size, 10u);
  EXPECT_FALSE(d.byte_tokens);
}

TEST(Sft, BadFilesAreRefusedNamingTheLine) {
  const SftTokenizer t = byte_sft_tokenizer();
  auto err = [&](const std::string& text) {
    return error_of([&] { load_sft_data(write_temp("e.jsonl", text).string(), t); });
  };
  EXPECT_NE(err("{\"prompt\":\"a\",\"response\":\"b\"}\nnot json\n").find("line 2: not a JSON object"),
            std::string::npos);
  EXPECT_NE(err("{\"prompt\":\"a\"}").find("\"response\" is missing"), std::string::npos);
  EXPECT_NE(err("{\"prompt\":1,\"response\":\"b\"}").find("\"prompt\" is missing or not a string"), std::string::npos);
  EXPECT_NE(err("{\"prompt\":\"a\",\"response\":\"\"}").find("response is empty"), std::string::npos);
  EXPECT_NE(err("\n \n").find("holds no example"), std::string::npos);
  EXPECT_NE(err("").find("is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { load_sft_data("/nonexistent/sft.jsonl", t); }), "");
}

TEST(Sft, SamplerAndEvaluationIgnoreMaskedTargets) {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += R"({"prompt":"question )" + std::to_string(i) +
            R"(","response":"answer"})"
            "\n";
  const TokenData d = load_sft_data(write_temp("c.jsonl", text).string(), byte_sft_tokenizer());
  const TokenSplit split = split_tokens(d.tokens, 0.2, 16, d.loss_mask);
  ASSERT_EQ(split.train_mask.size(), split.train.size());
  ASSERT_EQ(split.eval_mask.size(), split.eval.size());
  BatchSampler sampler(split.train, 16, 3, &split.train_mask);
  std::vector<Token> in, tg;
  int64_t ignored = 0, scored = 0;
  for (int rep = 0; rep < 20; ++rep) {
    sampler.next(4, in, tg);
    for (size_t i = 0; i < tg.size(); ++i) {
      if (tg[i] == kIgnoreTarget) {
        ++ignored;
      } else {
        ++scored;
        // A scored target is a response byte or EOS, never a prompt byte or BOS.
        EXPECT_TRUE(tg[i] == kEos || std::string("answer").find(static_cast<char>(tg[i])) != std::string::npos)
            << tg[i];
      }
    }
  }
  EXPECT_GT(ignored, 0);
  EXPECT_GT(scored, 0);
  // Evaluation counts only the scored targets: with a loss of 1 per scored target the mean is exactly 1.
  RecordingModel m;
  const auto starts = eval_window_starts(split.eval.size(), 16, 0);
  EXPECT_DOUBLE_EQ(evaluate_loss(m, split.eval, starts, 16, 2, {}, split.eval_mask), 1.0);
  int64_t masked = 0;
  for (Token t : m.seen) masked += t == kIgnoreTarget;
  EXPECT_GT(masked, 0);
}
