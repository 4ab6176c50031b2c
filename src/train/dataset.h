// Training data: loading (UTF-8 text through a tokenizer, a token file, or a directory of token shards, which is
// memory-mapped, never read whole), the train/held-out split, seeded random batch sampling with a saveable state,
// and the fixed evaluation windows. The data is one token stream (TokenSequence); the held-out part is its tail.
//   a sequence window = seq_len + 1 consecutive tokens: inputs are the first seq_len, targets the last seq_len
//   batches: inputs/targets [batch, seq_len] row-major, as Token
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/rng.h"
#include "train/token_sequence.h"
#include "train/tokenizer.h"

namespace fp8train::train {

struct TokenData {
  TokenSequence tokens;
  uint32_t vocab_size = kByteVocabSize;  // tokens are < vocab_size
  bool byte_tokens = true;               // tokens are bytes (so bits per token = bits per byte)
  std::string source;                    // "embedded corpus (seed 1, 3000000 bytes)" or the file path
  std::string fingerprint;               // set for shards (from their index); empty: hash the tokens
  // Which tokens are training targets (SFT data, train/sft.h): 1 = predict it, 0 = its target is ignored by the
  // loss. Empty: every token is a target (plain text, token files, shards).
  std::vector<uint8_t> loss_mask;
};

// A target the loss ignores (−1 once the model reads targets as i32): the prompt tokens of SFT data.
inline constexpr Token kIgnoreTarget = ~Token{0};

// Reads `path`: a directory of token shards (token_shards.h; they must have been made with `tokenizer`), a token
// file (token_file.h) when it starts with the magic, otherwise UTF-8 text (validated: a non-UTF-8 file is an
// error naming the byte offset) encoded with `tokenizer` (encode_text). Throws Error for a missing or empty file.
TokenData load_token_data(const std::string& path, const Tokenizer& tokenizer);
TokenData load_token_data(const std::string& path);  // with the byte tokenizer

// A text's ids: the text is encoded in pieces of whole lines (about 4 KiB each, in parallel), which equals encoding
// it at once for the byte tokenizer and for fp8train's SentencePiece models (no piece holds a newline, no dummy
// prefix); a foreign model with a dummy prefix gets one at the start of every piece.
std::vector<Token> encode_text(const Tokenizer& tokenizer, std::string_view text);

// The embedded procedural corpus (corpus.h), tokenized (with `tokenizer` when given, else bytes).
TokenData embedded_corpus_data(uint64_t seed, size_t bytes, const Tokenizer* tokenizer = nullptr);

// The last `eval_fraction` of the tokens (at least one window of seq_len+1) is held out; both parts must hold
// at least one window, else Error with the sizes.
// A loss mask (TokenData::loss_mask, same length as the tokens) is split the same way.
struct TrainEvalSplit {
  std::vector<Token> train;
  std::vector<Token> eval;
  std::vector<uint8_t> train_mask, eval_mask;  // empty without a loss mask
};
TrainEvalSplit split_train_eval(const std::vector<Token>& tokens, double eval_fraction, int64_t seq_len,
                                const std::vector<uint8_t>& loss_mask = {});
// The same split as views of a sequence (the tokens are not copied; the loss mask, when given, is).
struct TokenSplit {
  TokenSequence train;
  TokenSequence eval;
  std::vector<uint8_t> train_mask, eval_mask;  // empty without a loss mask
};
TokenSplit split_tokens(const TokenSequence& tokens, double eval_fraction, int64_t seq_len,
                        const std::vector<uint8_t>& loss_mask = {});

// Draws windows at uniformly random offsets from a seeded Rng. The state (Rng state and windows drawn) is all
// a checkpoint needs to continue the exact same sequence of batches.
class BatchSampler {
 public:
  struct State {
    uint64_t rng_state = 0;
    int64_t windows_drawn = 0;
  };

  // loss_mask: null or one entry per token (TokenData::loss_mask), borrowed (it must outlive the sampler); a target
  // whose entry is 0 is kIgnoreTarget.
  BatchSampler(const std::vector<Token>& tokens, int64_t seq_len, uint64_t seed,
               const std::vector<uint8_t>* loss_mask = nullptr);  // borrows `tokens`
  BatchSampler(TokenSequence tokens, int64_t seq_len, uint64_t seed, const std::vector<uint8_t>* loss_mask = nullptr);

  // inputs/targets are resized to [batch, seq_len].
  void next(int64_t batch, std::vector<Token>& inputs, std::vector<Token>& targets);

  State state() const { return {rng_.state(), windows_drawn_}; }
  void set_state(const State& s) {
    rng_.set_state(s.rng_state);
    windows_drawn_ = s.windows_drawn;
  }
  int64_t seq_len() const { return seq_len_; }

 private:
  TokenSequence tokens_;
  const std::vector<uint8_t>* mask_;
  int64_t seq_len_;
  std::vector<Token> window_;
  Rng rng_;
  int64_t windows_drawn_ = 0;
};

// Start offsets of up to `max_windows` non-overlapping windows of seq_len+1 tokens (consecutive windows share
// their boundary token so every token after the first is predicted exactly once), from the beginning.
// max_windows <= 0: as many as fit.
std::vector<int64_t> eval_window_starts(size_t token_count, int64_t seq_len, int64_t max_windows);

}  // namespace fp8train::train
