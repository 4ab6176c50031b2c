// The SentencePiece tokenizer and its training (tokenizer.h), on Debian's libsentencepiece.
// Training settings, and why: identity normalization (the text's bytes are what the model sees; no NFKC),
// add_dummy_prefix=false and remove_extra_whitespaces=false (no text is added or dropped, so decode(encode(x)) ==
// x and a file's encoding is the concatenation of its lines'), byte_fallback=true (characters outside the
// vocabulary become their UTF-8 bytes instead of UNK), ids 0..3 = UNK, BOS, EOS, PAD.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fmt/format.h>

#include <unordered_map>

#include "common/error.h"
#include "train/atomic_file.h"
#include "train/tokenizer.h"

namespace fp8train::train {
namespace {

// SentencePiece's reason without its source location: "./src/x.cc(580) [check] Vocabulary size is ..." gives
// "Vocabulary size is ...".
std::string reason(const sentencepiece::util::Status& status) {
  std::string m = status.error_message() ? status.error_message() : "";
  const size_t cut = m.rfind("] ");
  if (cut != std::string::npos) m = m.substr(cut + 2);
  while (!m.empty() && (m.back() == ' ' || m.back() == '\n')) m.pop_back();
  return m.empty() ? "no reason given" : m;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string bytes, const std::string& what) : bytes_(std::move(bytes)) {
    FP8T_CHECK(!bytes_.empty(), "{} is empty, not a SentencePiece model", what);
    const sentencepiece::util::Status status = sp_.LoadFromSerializedProto(bytes_);
    FP8T_CHECK(status.ok(), "{} is not a valid SentencePiece model (a corrupt, truncated or foreign file)", what);
    const int n = sp_.GetPieceSize();
    FP8T_CHECK(n >= 2, "{} has a vocabulary of {} pieces, too few to train on", what, n);
    vocab_ = static_cast<uint32_t>(n);
    eos_ = sp_.eos_id() >= 0 ? static_cast<Token>(sp_.eos_id()) : vocab_;  // vocab_: the model has no EOS
    bos_ = sp_.bos_id() >= 0 ? static_cast<Token>(sp_.bos_id()) : vocab_;
  }

  std::string kind() const override { return "sentencepiece"; }
  uint32_t vocab_size() const override { return vocab_; }

  std::vector<Token> encode(std::string_view text) const override {
    std::vector<int> ids;
    const sentencepiece::util::Status status = sp_.Encode(text, &ids);
    FP8T_CHECK(status.ok(), "SentencePiece could not encode a text of {} bytes: {}", text.size(), reason(status));
    return std::vector<Token>(ids.begin(), ids.end());
  }

  std::string decode(const std::vector<Token>& ids) const override {
    std::vector<int> in;
    in.reserve(ids.size());
    for (Token t : ids) {
      FP8T_CHECK(t < vocab_, "token {} is outside the SentencePiece tokenizer's vocabulary of {}", t, vocab_);
      in.push_back(static_cast<int>(t));
    }
    std::string out;
    const sentencepiece::util::Status status = sp_.Decode(in, &out);
    FP8T_CHECK(status.ok(), "SentencePiece could not decode {} ids: {}", ids.size(), reason(status));
    return out;
  }

  Token eos_id() const override { return eos_; }
  Token bos_id() const override { return bos_; }
  bool samplable(Token id) const override {
    if (id >= vocab_) return false;
    if (id == eos_) return true;
    const int i = static_cast<int>(id);
    return !sp_.IsControl(i) && !sp_.IsUnknown(i) && !sp_.IsUnused(i);
  }
  const std::string& model_bytes() const override { return bytes_; }

 private:
  std::string bytes_;
  sentencepiece::SentencePieceProcessor sp_;
  uint32_t vocab_ = 0;
  Token eos_ = 0;
  Token bos_ = 0;
};

// The training sentences: every line (without its newline) of every input file, in order.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& files) : files_(files) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (true) {
      if (pos_ < text_.size()) {
        const size_t end = std::min(text_.find('\n', pos_), text_.size());
        line_.assign(text_, pos_, end - pos_);
        pos_ = end + 1;
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (line_.empty()) continue;
        return;
      }
      if (next_file_ >= files_.size()) {
        done_ = true;
        return;
      }
      const std::string& path = files_[next_file_++];
      text_ = read_file(path);
      validate_utf8(text_, "tokenizer training file '" + path + "'");
      pos_ = 0;
    }
  }

  const std::vector<std::string>& files_;
  size_t next_file_ = 0;
  std::string text_, line_;
  size_t pos_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> sentencepiece_tokenizer(const std::string& model_bytes, const std::string& what) {
  return std::make_unique<SentencePieceTokenizer>(model_bytes, what);
}

std::string train_sentencepiece(const TokenizerTrainOptions& o) {
  FP8T_CHECK(!o.inputs.empty(), "tokenizer training needs at least one --data file");
  FP8T_CHECK(o.model_type == "bpe" || o.model_type == "unigram", "--model-type must be bpe or unigram, got '{}'",
             o.model_type);
  // 4 specials + 256 byte pieces come first; fewer ids leave no room for a single learned piece.
  FP8T_CHECK(o.vocab_size > 260 && o.vocab_size <= (1u << 24),
             "--vocab must be in [261, 16777216] (4 specials and 256 byte-fallback pieces come first), got {}",
             o.vocab_size);
  FP8T_CHECK(o.threads >= 1, "--threads must be at least 1, got {}", o.threads);
  // Read (and validate) every file before SentencePiece starts, so bad input fails with our message.
  for (const std::string& path : o.inputs) validate_utf8(read_file(path), "tokenizer training file '" + path + "'");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"byte_fallback", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      {"num_threads", std::to_string(o.threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"minloglevel", "2"},  // SentencePiece's progress log is long; errors still come back as a status
  };
  LineIterator lines(o.inputs);
  std::string model;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  FP8T_CHECK(status.ok(), "SentencePiece training failed: {}", reason(status));
  FP8T_CHECK(!model.empty(), "SentencePiece training produced no model");
  return model;
}

}  // namespace fp8train::train
