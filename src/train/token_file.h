// Token files: pre-tokenized training data, little-endian, with a 32-byte header.
//
//   offset  size  field
//   0       8     magic "FP8TTOK\x01"  (the last byte is the format version, 1)
//   8       4     uint32 bytes per token: 2 (uint16 tokens) or 4 (uint32 tokens)
//   12      4     uint32 vocab_size: every token is < vocab_size (>= 1)
//   16      8     uint64 token count N
//   24      8     reserved, zero
//   32      N·w   the tokens
//
// The file size must be exactly 32 + N·w. `fp8train train --data` recognises the magic and otherwise
// treats the file as UTF-8 text for the byte tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "train/tokenizer.h"

namespace fp8train::train {

inline constexpr char kTokenFileMagic[8] = {'F', 'P', '8', 'T', 'T', 'O', 'K', '\x01'};
inline constexpr size_t kTokenFileHeaderBytes = 32;

struct TokenFile {
  uint32_t vocab_size = 0;
  uint32_t bytes_per_token = 0;
  std::vector<Token> tokens;
};

// True when `bytes` starts with the token-file magic.
bool looks_like_token_file(std::string_view bytes);

// Serialises tokens with `bytes_per_token` 2 or 4 (every token must fit and be < vocab_size).
std::string encode_token_file(const std::vector<Token>& tokens, uint32_t vocab_size, uint32_t bytes_per_token);

// Parses and validates a whole token file; `what` names it in errors.
TokenFile decode_token_file(std::string_view bytes, const std::string& what);

// Atomic write / whole-file read of a token file.
void write_token_file(const std::string& path, const std::vector<Token>& tokens, uint32_t vocab_size,
                      uint32_t bytes_per_token);
TokenFile read_token_file(const std::string& path);

}  // namespace fp8train::train
