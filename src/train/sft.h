// Chat / SFT data: a JSONL file, one example per line, {"prompt": "...", "response": "..."} (both strings, UTF-8;
// other fields are ignored; blank lines are skipped). Each example becomes [BOS] prompt response [EOS] in the run's
// tokenizer, and the examples are packed one after another into one token stream, so windows, the held-out split
// and batch sampling work as for plain text. The loss mask (TokenData::loss_mask) marks the tokens that are
// training targets: the response's tokens and its EOS. Every other target (BOS, the prompt) is ignored by the loss
// (kIgnoreTarget, −1 in the model's i32 targets). Windows may span two examples; attention is not reset between
// them (as for plain text).
// The tokenizer is a parameter (SftTokenizer): the byte tokenizer (byte_sft_tokenizer) or the run's tokenizer
// (sft_tokenizer: byte or SentencePiece); any tokenizer with an encode function and BOS / EOS ids plugs in the same
// way.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "train/dataset.h"

namespace fp8train::train {

struct SftTokenizer {
  std::function<std::vector<Token>(std::string_view)> encode;  // text → tokens (no specials)
  Token bos = kBos;
  Token eos = kEos;
  uint32_t vocab_size = kByteVocabSize;
  bool byte_tokens = true;  // tokens are bytes (bits per token = bits per byte)
};

// The byte tokenizer (train/tokenizer.h): bytes, BOS 256, EOS 257.
SftTokenizer byte_sft_tokenizer();

// A run's tokenizer (borrowed: it must outlive the result). Error when it has no BOS or EOS id (a foreign
// SentencePiece model without them).
SftTokenizer sft_tokenizer(const Tokenizer& tokenizer);

// Reads `path` (format above). Errors name the file and line: missing/empty file, a line that is not a JSON
// object, a missing or non-string "prompt" / "response", text that is not valid UTF-8, an empty response, no
// example at all.
TokenData load_sft_data(const std::string& path, const SftTokenizer& tokenizer);

}  // namespace fp8train::train
