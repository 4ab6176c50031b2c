// The byte tokenizer: token = byte value (0..255) plus three specials, vocabulary 259.
//   BOS = 256, EOS = 257, PAD = 258
// Text is UTF-8; validate_utf8 enforces RFC 3629 (no overlong forms, no surrogates, nothing above U+10FFFF,
// no truncated sequence) and names the byte offset of the first problem. Bits-per-byte equals bits-per-token
// for this tokenizer, since every token of a text is one byte.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp8train::train {

using Token = uint32_t;

inline constexpr Token kBos = 256;
inline constexpr Token kEos = 257;
inline constexpr Token kPad = 258;
inline constexpr uint32_t kByteVocabSize = 259;

// Throws Error "<what> is not valid UTF-8: byte offset N (0xXX): <reason>" at the first bad byte.
void validate_utf8(std::string_view bytes, const std::string& what);

// Bytes to tokens (no specials added). Does not validate; call validate_utf8 for text from outside.
std::vector<Token> encode_bytes(std::string_view bytes);

// Tokens to bytes; specials are dropped (they have no byte form). Tokens >= 259 throw Error.
std::string decode_tokens(const std::vector<Token>& tokens);

}  // namespace fp8train::train
