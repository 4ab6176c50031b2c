// Data loading, splitting and sampling (see dataset.h).
#include "train/dataset.h"

#include <fmt/format.h>

#include "common/error.h"
#include "train/atomic_file.h"
#include "train/corpus.h"
#include "train/token_file.h"

namespace fp8train::train {

TokenData load_token_data(const std::string& path) {
  const std::string bytes = read_file(path);
  FP8T_CHECK(!bytes.empty(), "data file '{}' is empty", path);
  TokenData data;
  data.source = path;
  if (looks_like_token_file(bytes)) {
    TokenFile f = decode_token_file(bytes, "'" + path + "'");
    data.tokens = std::move(f.tokens);
    data.vocab_size = f.vocab_size;
    data.byte_tokens = false;
    return data;
  }
  validate_utf8(bytes, "data file '" + path + "'");
  data.tokens = encode_bytes(bytes);
  return data;
}

TokenData embedded_corpus_data(uint64_t seed, size_t bytes) {
  TokenData data;
  data.tokens = encode_bytes(generate_corpus(seed, bytes));
  data.source = fmt::format("embedded corpus (seed {}, {} bytes)", seed, data.tokens.size());
  return data;
}

TrainEvalSplit split_train_eval(const std::vector<Token>& tokens, double eval_fraction, int64_t seq_len,
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
  TrainEvalSplit s;
  const size_t train_count = tokens.size() - eval_count;
  s.train.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(train_count));
  s.eval.assign(tokens.begin() + static_cast<std::ptrdiff_t>(train_count), tokens.end());
  if (!loss_mask.empty()) {
    s.train_mask.assign(loss_mask.begin(), loss_mask.begin() + static_cast<std::ptrdiff_t>(train_count));
    s.eval_mask.assign(loss_mask.begin() + static_cast<std::ptrdiff_t>(train_count), loss_mask.end());
  }
  return s;
}

BatchSampler::BatchSampler(const std::vector<Token>& tokens, int64_t seq_len, uint64_t seed,
                           const std::vector<uint8_t>* loss_mask)
    : tokens_(tokens), mask_(loss_mask && !loss_mask->empty() ? loss_mask : nullptr), seq_len_(seq_len), rng_(seed) {
  FP8T_CHECK(!mask_ || mask_->size() == tokens.size(), "the loss mask has {} entries for {} tokens", mask_->size(),
             tokens.size());
  FP8T_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  FP8T_CHECK(tokens.size() >= static_cast<size_t>(seq_len) + 1,
             "{} training tokens are fewer than one window of seq_len + 1 = {}", tokens.size(), seq_len + 1);
}

void BatchSampler::next(int64_t batch, std::vector<Token>& inputs, std::vector<Token>& targets) {
  FP8T_CHECK(batch >= 1, "batch size must be at least 1, got {}", batch);
  const size_t t = static_cast<size_t>(seq_len_);
  inputs.resize(static_cast<size_t>(batch) * t);
  targets.resize(static_cast<size_t>(batch) * t);
  const uint64_t starts = tokens_.size() - t;  // number of valid window starts
  for (int64_t b = 0; b < batch; ++b) {
    const size_t start = static_cast<size_t>(rng_.uniform(starts));
    for (size_t i = 0; i < t; ++i) {
      inputs[static_cast<size_t>(b) * t + i] = tokens_[start + i];
      targets[static_cast<size_t>(b) * t + i] =
          mask_ && (*mask_)[start + i + 1] == 0 ? kIgnoreTarget : tokens_[start + i + 1];
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
