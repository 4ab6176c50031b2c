// The SentencePiece tokenizer (trained here on the embedded corpus), TokenSequence views, and token shards:
// encoding is lossless and piecewise encoding equals encoding at once; a corrupt model is refused; shards hold
// exactly the tokens of their text, in uint16 when the vocabulary fits; truncated, foreign and mismatched shards
// and an existing output directory are refused, and a failed write leaves nothing behind; training on shards
// equals training on the same tokens in memory, saves the tokenizer in the run and its checkpoints, and a resume
// continues bit for bit at the sampler's position. SFT data is encoded with a SentencePiece tokenizer (its BOS and
// EOS ids) and keeps its loss mask through the split and the sampler.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "../common/error_of.h"
#include "common/error.h"
#include "toy_model.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "train/metrics.h"
#include "train/sft.h"
#include "train/token_shards.h"
#include "train/tokenizer.h"
#include "train/trainer.h"

using namespace fp8train;
using namespace fp8train::train;
using fp8train::train::testing::BigramModel;
namespace fs = std::filesystem;

namespace {

using test_util::error_of;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("fp8train-tok-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A BPE model of 400 ids trained once on 60 kB of the embedded corpus (saved under the temp directory).
const Tokenizer& sp() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    const fs::path dir = fs::temp_directory_path() / ("fp8train-tok-model-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string text = (dir / "train.txt").string();
    write_file_atomic(text, generate_corpus(11, 60000));
    TokenizerTrainOptions o;
    o.inputs = {text};
    o.vocab_size = 400;
    o.threads = 1;
    auto t = sentencepiece_tokenizer(train_sentencepiece(o), "test model");
    fs::remove_all(dir);
    return t;
  }();
  return *tok;
}

}  // namespace

TEST(Tokenizer, SentencePieceIsLosslessAndPiecewiseEncodingEqualsWhole) {
  const Tokenizer& t = sp();
  EXPECT_EQ(t.kind(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 400u);
  EXPECT_EQ(t.eos_id(), 2u);
  EXPECT_FALSE(t.samplable(0));  // UNK
  EXPECT_FALSE(t.samplable(1));  // BOS
  EXPECT_FALSE(t.samplable(3));  // PAD
  EXPECT_TRUE(t.samplable(2));   // EOS ends a generation
  const std::string text = "The small cats  sleep.\n\n\t caf\xC3\xA9 \xF0\x9F\x99\x82 <s> 47+38=85\r\n ";
  const std::vector<Token> ids = t.encode(text);
  EXPECT_LT(ids.size(), text.size());  // subwords: fewer ids than bytes
  EXPECT_EQ(t.decode(ids), text);      // identity normalization, byte fallback, no dummy prefix
  for (Token id : ids) EXPECT_LT(id, t.vocab_size());
  // encode_text cuts texts over 1 MiB after a newline; for these models that changes nothing.
  const std::string big = generate_corpus(5, (size_t{1} << 20) + 300000);
  EXPECT_EQ(encode_text(t, big), t.encode(big));
  EXPECT_EQ(make_byte_tokenizer()->fingerprint(), "byte");
  EXPECT_EQ(t.fingerprint().rfind("sentencepiece:", 0), 0u);
  EXPECT_NE(error_of([&] { t.decode({400}); }).find("outside"), std::string::npos);
}

TEST(Tokenizer, CorruptOrMissingModelsAndBadTrainingInputAreRefused) {
  TempDir dir("bad");
  const std::string& bytes = sp().model_bytes();
  const std::string truncated = (dir.path / "truncated.model").string();
  write_file_atomic(truncated, bytes.substr(0, bytes.size() / 2));
  EXPECT_NE(error_of([&] { load_tokenizer_file(truncated); }).find("is not a valid SentencePiece model"),
            std::string::npos);
  const std::string text = (dir.path / "text.model").string();
  write_file_atomic(text, "hello, I am not a model\n");
  EXPECT_NE(error_of([&] { load_tokenizer_file(text); }).find("is not a valid SentencePiece model"), std::string::npos);
  EXPECT_NE(error_of([&] { load_tokenizer_file((dir.path / "none.model").string()); }).find("does not exist"),
            std::string::npos);
  TokenizerTrainOptions o;
  const std::string bad = (dir.path / "bad.txt").string();
  write_file_atomic(bad, std::string("ab\xFF\n", 4));
  o.inputs = {bad};
  o.vocab_size = 300;
  EXPECT_NE(error_of([&] { train_sentencepiece(o); }).find("byte offset 2"), std::string::npos);
  o.vocab_size = 100;
  EXPECT_NE(error_of([&] { train_sentencepiece(o); }).find("--vocab"), std::string::npos);
  const std::string good = (dir.path / "good.txt").string();
  write_file_atomic(good, generate_corpus(3, 20000));
  o.inputs = {good};
  o.vocab_size = 261;  // above the fixed pieces, below those plus the text's characters: SentencePiece's reason
  const std::string small = error_of([&] { train_sentencepiece(o); });
  EXPECT_NE(small.find("SentencePiece training failed"), std::string::npos) << small;
  EXPECT_EQ(small.find(".cc("), std::string::npos) << small;
}

TEST(Tokenizer, SftDataUsesTheSentencePieceTokenizerAndKeepsItsMask) {
  TempDir dir("sft");
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += R"({"prompt": "the question )" + std::to_string(i) +
            R"( is", "response": "an answer"})"
            "\n";
  const std::string path = (dir.path / "chat.jsonl").string();
  write_file_atomic(path, text);
  const Tokenizer& tok = sp();
  const TokenData d = load_sft_data(path, sft_tokenizer(tok));
  EXPECT_EQ(d.vocab_size, tok.vocab_size());
  EXPECT_FALSE(d.byte_tokens);
  // The first example: [BOS] prompt response [EOS] in the model's ids; only the response and EOS are targets.
  const std::vector<Token> p = tok.encode("the question 0 is"), r = tok.encode("an answer");
  std::vector<Token> want = {tok.bos_id()};
  want.insert(want.end(), p.begin(), p.end());
  want.insert(want.end(), r.begin(), r.end());
  want.push_back(tok.eos_id());
  const std::vector<Token> all = d.tokens.to_vector();
  ASSERT_GE(all.size(), want.size());
  EXPECT_EQ(std::vector<Token>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(want.size())), want);
  ASSERT_EQ(d.loss_mask.size(), all.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(d.loss_mask[i], i > p.size() ? 1 : 0) << i;
  EXPECT_NE(tok.bos_id(), tok.eos_id());

  // The split and the sampler over the token view keep the mask: a target is ignored exactly where it is 0.
  const TokenSplit split = split_tokens(d.tokens, 0.2, 16, d.loss_mask);
  ASSERT_EQ(split.train_mask.size(), split.train.size());
  ASSERT_EQ(split.eval_mask.size(), split.eval.size());
  BatchSampler sampler(split.train, 16, 5, &split.train_mask);
  std::vector<Token> in, tg;
  int64_t ignored = 0, kept = 0;
  for (int k = 0; k < 20; ++k) {
    sampler.next(4, in, tg);
    for (Token t : tg) (t == kIgnoreTarget ? ignored : kept) += 1;
  }
  EXPECT_GT(ignored, 0);
  EXPECT_GT(kept, 0);
  // The byte tokenizer through sft_tokenizer gives what byte_sft_tokenizer gives.
  const std::unique_ptr<Tokenizer> bytes = make_byte_tokenizer();
  EXPECT_EQ(load_sft_data(path, sft_tokenizer(*bytes)).tokens.to_vector(),
            load_sft_data(path, byte_sft_tokenizer()).tokens.to_vector());
}

TEST(TokenSequence, CopiesAndSlicesAcrossSegments) {
  const std::vector<Token> a = {1, 2, 3};
  const std::vector<uint16_t> b = {4, 5, 6, 7};
  TokenSequence s = TokenSequence::view(a);
  s.append(nullptr, b.data(), 2, b.size());
  EXPECT_EQ(s.size(), 7u);
  EXPECT_EQ(s.to_vector(), (std::vector<Token>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s.slice(2, 6).to_vector(), (std::vector<Token>{3, 4, 5, 6}));
  EXPECT_EQ(s[3], 4u);
  Token out[3];
  EXPECT_THROW(s.copy(5, 3, out), Error);
  s.set_limit(6, "test data");
  EXPECT_NE(error_of([&] { s.copy(4, 3, out); }).find("token 6 at position 5"), std::string::npos);
}

TEST(TokenShards, HoldTheTextsTokensAndRefuseBadShards) {
  TempDir dir("shards");
  const std::string t1 = (dir.path / "a.txt").string(), t2 = (dir.path / "b.txt").string();
  const std::string text1 = generate_corpus(21, 20000), text2 = generate_corpus(22, 9000);
  write_file_atomic(t1, text1);
  write_file_atomic(t2, text2);
  TokenizeOptions o;
  o.inputs = {t1, t2};
  o.out_dir = (dir.path / "shards").string();
  o.shard_tokens = 1000;
  const TokenizeStats st = tokenize_to_shards(sp(), o);
  std::vector<Token> expected = encode_text(sp(), text1);
  const std::vector<Token> second = encode_text(sp(), text2);
  expected.insert(expected.end(), second.begin(), second.end());
  EXPECT_EQ(st.tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(st.shards, static_cast<int64_t>((expected.size() + 999) / 1000));
  EXPECT_EQ(st.bytes_per_token, 2u);
  EXPECT_EQ(fs::file_size(dir.path / "shards" / "shard-00000.bin"), kShardHeaderBytes + 2000);
  ASSERT_TRUE(is_token_shard_dir(o.out_dir));
  const TokenData d = open_token_shards(o.out_dir, &sp());
  EXPECT_EQ(d.tokens.to_vector(), expected);
  EXPECT_EQ(d.vocab_size, 400u);
  EXPECT_FALSE(d.byte_tokens);
  EXPECT_EQ(token_shards_tokenizer(o.out_dir)->fingerprint(), sp().fingerprint());
  EXPECT_NO_THROW(verify_token_shards(o.out_dir));
  // Same directory again: refused, nothing changed.
  EXPECT_NE(error_of([&] { tokenize_to_shards(sp(), o); }).find("already exists"), std::string::npos);
  // Another tokenizer's run may not read them.
  EXPECT_NE(error_of([&] { open_token_shards(o.out_dir, make_byte_tokenizer().get()); }).find("another tokenizer"),
            std::string::npos);
  // A byte-tokenizer shard directory (uint16 too: 259 ids) holds the bytes.
  TokenizeOptions ob = o;
  ob.out_dir = (dir.path / "bytes").string();
  ob.inputs = {t2};
  tokenize_to_shards(*make_byte_tokenizer(), ob);
  EXPECT_EQ(open_token_shards(ob.out_dir, nullptr).tokens.to_vector(), encode_bytes(text2));
  EXPECT_TRUE(open_token_shards(ob.out_dir, nullptr).byte_tokens);

  const fs::path shard = dir.path / "shards" / "shard-00001.bin";
  const std::string good = read_file(shard.string());
  write_file_atomic(shard.string(), good.substr(0, good.size() - 3));  // truncated
  EXPECT_NE(error_of([&] { open_token_shards(o.out_dir, &sp()); }).find("shard-00001.bin' is truncated"),
            std::string::npos);
  write_file_atomic(shard.string(), good.substr(0, 20));  // truncated inside the header
  EXPECT_NE(error_of([&] { open_token_shards(o.out_dir, &sp()); }).find("truncated"), std::string::npos);
  write_file_atomic(shard.string(), std::string(good.size(), 'x'));  // foreign
  EXPECT_NE(error_of([&] { open_token_shards(o.out_dir, &sp()); }).find("not an fp8train token shard"),
            std::string::npos);
  std::string other_vocab = good;
  other_vocab[24] = 7;  // the header's vocabulary differs from the index's
  write_file_atomic(shard.string(), other_vocab);
  EXPECT_NE(error_of([&] { open_token_shards(o.out_dir, &sp()); }).find("another tokenizer or vocabulary"),
            std::string::npos);
  std::string flipped = good;
  flipped[kShardHeaderBytes + 5] ^= 1;  // a changed id: only the checksum tells
  write_file_atomic(shard.string(), flipped);
  EXPECT_NO_THROW(open_token_shards(o.out_dir, &sp()));
  EXPECT_NE(error_of([&] { verify_token_shards(o.out_dir); }).find("checksum"), std::string::npos);
  fs::remove(shard);
  EXPECT_NE(error_of([&] { open_token_shards(o.out_dir, &sp()); }).find("missing"), std::string::npos);

  // Bad UTF-8 in the second file: an error naming it, and no output or temporary directory left.
  write_file_atomic(t2, "fine\n" + std::string("\xC3(", 2));
  o.out_dir = (dir.path / "never").string();
  EXPECT_NE(error_of([&] { tokenize_to_shards(sp(), o); }).find("b.txt' is not valid UTF-8: byte offset 5"),
            std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find("never"), std::string::npos) << e.path();
}

TEST(TokenShards, TrainingOnShardsEqualsTheTokensInMemoryAndResumesBitForBit) {
  TempDir dir("train");
  const std::string text_path = (dir.path / "a.txt").string();
  write_file_atomic(text_path, generate_corpus(31, 40000));
  TokenizeOptions o;
  o.inputs = {text_path};
  o.out_dir = (dir.path / "shards").string();
  o.shard_tokens = 777;  // windows cross shard boundaries
  tokenize_to_shards(sp(), o);
  const TokenData shards = open_token_shards(o.out_dir, &sp());
  const TokenData text = load_token_data(text_path, sp());
  ASSERT_EQ(shards.tokens.to_vector(), text.tokens.to_vector());

  TrainConfig c = preset_config("tiny");
  c.steps = 8;
  c.batch_size = 4;
  c.seq_len = 16;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.save_every = 3;
  c.lr = 0.05;
  c.warmup_steps = 2;
  auto run = [&](const TokenData& data, BigramModel& m, const fs::path& out, const CheckpointMeta* resume) {
    TrainOptions opt;
    opt.run_dir = out.string();
    opt.resume = resume;
    opt.out = std::tmpfile();
    opt.tokenizer = &sp();
    opt.write_report = false;
    run_training(c, m, data, opt);
    std::fclose(opt.out);
  };
  auto metrics = [](const fs::path& run) {
    std::vector<nlohmann::json> rows = read_jsonl((run / "metrics.jsonl").string());
    for (auto& r : rows) r.erase("tokens_per_s");
    return rows;
  };
  BigramModel a(400), b(400);
  run(shards, a, dir.path / "run-shards", nullptr);
  run(text, b, dir.path / "run-text", nullptr);
  EXPECT_EQ(a.weights(), b.weights());  // same tokens, same batches
  EXPECT_EQ(read_file((dir.path / "run-shards" / "tokenizer.model").string()), sp().model_bytes());
  const CheckpointMeta meta =
      read_checkpoint_meta((dir.path / "run-shards" / "checkpoints" / "step-00000003").string());
  EXPECT_EQ(meta.tokenizer_model, sp().model_bytes());
  EXPECT_GT(meta.state.sampler.windows_drawn, 0);
  // Resume at step 3 on the shards: the rest of the run is the uninterrupted one's, bit for bit.
  BigramModel r(400, /*seed=*/77);
  r.set_step(3);
  run(shards, r, dir.path / "run-resumed", &meta);
  EXPECT_EQ(r.weights(), a.weights());
  const auto full = metrics(dir.path / "run-shards"), resumed = metrics(dir.path / "run-resumed");
  ASSERT_EQ(resumed.size(), 5u);
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_EQ(resumed[i].dump(), full[i + 3].dump());
  // A model whose vocabulary is not the tokenizer's is refused before anything is written.
  BigramModel wrong(500);
  EXPECT_NE(error_of([&] { run(shards, wrong, dir.path / "run-wrong", nullptr); }).find("must be equal"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path / "run-wrong"));
}
