// Data loading, splitting and sampling (see dataset.h).
#include "train/dataset.h"

#include <fmt/format.h>

#include "common/error.h"
#include "train/atomic_file.h"
#include "train/corpus.h"
#include "train/token_file.h"
#include "train/token_shards.h"

namespace fp8train::train {

std::vector<Token> encode_text(const Tokenizer& tokenizer, std::string_view text) {
  if (tokenizer.is_byte()) return encode_bytes(text);
  // SentencePiece's encoding time grows faster than the text (0.2 MB/s for 1 MiB at once, 3 MB/s in 4 KiB
  // pieces), so the text goes in pieces of whole lines, encoded in parallel.
  constexpr size_t kPiece = 4096;
  std::vector<size_t> cuts = {0};
  while (cuts.back() < text.size()) {
    const size_t pos = cuts.back();
    size_t end = text.size();
    if (text.size() - pos > kPiece) {
      const size_t nl = text.find('\n', pos + kPiece);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    cuts.push_back(end);
  }
  const int64_t pieces = static_cast<int64_t>(cuts.size()) - 1;
  std::vector<std::vector<Token>> ids(static_cast<size_t>(pieces));
  std::string error;
#pragma omp parallel for schedule(dynamic, 16) if (pieces > 16)
  for (int64_t i = 0; i < pieces; ++i) {
    try {
      ids[static_cast<size_t>(i)] = tokenizer.encode(text.substr(cuts[i], cuts[i + 1] - cuts[i]));
    } catch (const Error& e) {
#pragma omp critical(fp8train_encode_text)
      if (error.empty()) error = e.what();
    }
  }
  FP8T_CHECK(error.empty(), "{}", error);
  size_t total = 0;
  for (const auto& v : ids) total += v.size();
  std::vector<Token> out;
  out.reserve(total);
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

TokenData load_token_data(const std::string& path, const Tokenizer& tokenizer) {
  if (is_token_shard_dir(path)) return open_token_shards(path, &tokenizer);
  const std::string bytes = read_file(path);
  FP8T_CHECK(!bytes.empty(), "data file '{}' is empty", path);
  TokenData data;
  data.source = path;
  if (looks_like_token_file(bytes)) {
    TokenFile f = decode_token_file(bytes, "'" + path + "'");
    data.tokens = TokenSequence(std::move(f.tokens));
    data.vocab_size = f.vocab_size;
    data.byte_tokens = false;
    return data;
  }
  validate_utf8(bytes, "data file '" + path + "'");
  data.tokens = TokenSequence(encode_text(tokenizer, bytes));
  data.vocab_size = tokenizer.vocab_size();
  data.byte_tokens = tokenizer.is_byte();
  return data;
}

TokenData load_token_data(const std::string& path) { return load_token_data(path, *make_byte_tokenizer()); }

TokenData embedded_corpus_data(uint64_t seed, size_t bytes, const Tokenizer* tokenizer) {
  TokenData data;
  const std::string text = generate_corpus(seed, bytes);
  data.tokens = TokenSequence(tokenizer ? encode_text(*tokenizer, text) : encode_bytes(text));
  if (tokenizer) {
    data.vocab_size = tokenizer->vocab_size();
    data.byte_tokens = tokenizer->is_byte();
  }
  data.source = fmt::format("embedded corpus (seed {}, {} bytes)", seed, text.size());
  return data;
}

TrainEvalSplit split_train_eval(const std::vector<Token>& tokens, double eval_fraction, int64_t seq_len,
                                const std::vector<uint8_t>& loss_mask) {
  TokenSplit s = split_tokens(TokenSequence::view(tokens), eval_fraction, seq_len, loss_mask);
  return {s.train.to_vector(), s.eval.to_vector(), std::move(s.train_mask), std::move(s.eval_mask)};
}

TokenSplit split_tokens(const TokenSequence& tokens, double eval_fraction, int64_t seq_len,
                        const std::vector<uint8_t>& loss_mask) {
  FP8T_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(), "the loss mask has {} entries for {} tokens",
             loss_mask.size(), tokens.size());
  FP8T_CHECK(eval_fraction > 0.0 && eval_fraction < 1.0, "eval fraction must be in (0, 1), got {}", eval_fraction);
  FP8T_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  const size_t window = static_cast<size_t>(seq_len) + 1;
  size_t eval_count = static_cast<size_t>(static_cast<double>(tokens.size()) * eval_fraction);
  if (eval_count < window) eval_count = window;
  FP8T_CHECK(tokens.size() >= eval_count + window,
             "the data has {} tokens: too few for a held-out part of {} and training windows of {} (seq_len + 1); "
             "use more data or a shorter sequence length",
             tokens.size(), eval_count, window);
  const size_t train_count = tokens.size() - eval_count;
  TokenSplit s{tokens.slice(0, train_count), tokens.slice(train_count, tokens.size()), {}, {}};
  if (!loss_mask.empty()) {
    s.train_mask.assign(loss_mask.begin(), loss_mask.begin() + static_cast<std::ptrdiff_t>(train_count));
    s.eval_mask.assign(loss_mask.begin() + static_cast<std::ptrdiff_t>(train_count), loss_mask.end());
  }
  return s;
}

BatchSampler::BatchSampler(const std::vector<Token>& tokens, int64_t seq_len, uint64_t seed,
                           const std::vector<uint8_t>* loss_mask)
    : BatchSampler(TokenSequence::view(tokens), seq_len, seed, loss_mask) {}

BatchSampler::BatchSampler(TokenSequence tokens, int64_t seq_len, uint64_t seed, const std::vector<uint8_t>* loss_mask)
    : tokens_(std::move(tokens)),
      mask_(loss_mask && !loss_mask->empty() ? loss_mask : nullptr),
      seq_len_(seq_len),
      rng_(seed) {
  FP8T_CHECK(!mask_ || mask_->size() == tokens_.size(), "the loss mask has {} entries for {} tokens", mask_->size(),
             tokens_.size());
  FP8T_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  FP8T_CHECK(tokens_.size() >= static_cast<size_t>(seq_len) + 1,
             "{} training tokens are fewer than one window of seq_len + 1 = {}", tokens_.size(), seq_len + 1);
}

void BatchSampler::next(int64_t batch, std::vector<Token>& inputs, std::vector<Token>& targets) {
  FP8T_CHECK(batch >= 1, "batch size must be at least 1, got {}", batch);
  const size_t t = static_cast<size_t>(seq_len_);
  inputs.resize(static_cast<size_t>(batch) * t);
  targets.resize(static_cast<size_t>(batch) * t);
  const uint64_t starts = tokens_.size() - t;  // number of valid window starts
  for (int64_t b = 0; b < batch; ++b) {
    const size_t start = static_cast<size_t>(rng_.uniform(starts));
    window_.resize(t + 1);
    tokens_.copy(start, t + 1, window_.data());
    Token* in = inputs.data() + static_cast<size_t>(b) * t;
    Token* tg = targets.data() + static_cast<size_t>(b) * t;
    for (size_t i = 0; i < t; ++i) {
      in[i] = window_[i];
      tg[i] = mask_ && (*mask_)[start + i + 1] == 0 ? kIgnoreTarget : window_[i + 1];
    }
    ++windows_drawn_;
  }
}

std::vector<int64_t> eval_window_starts(size_t token_count, int64_t seq_len, int64_t max_windows) {
  FP8T_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  std::vector<int64_t> starts;
  if (token_count < 2) return starts;
  const int64_t fit = static_cast<int64_t>((token_count - 1) / static_cast<size_t>(seq_len));
  const int64_t count = max_windows > 0 ? std::min(fit, max_windows) : fit;
  for (int64_t w = 0; w < count; ++w) starts.push_back(w * seq_len);
  return starts;
}

}  // namespace fp8train::train
