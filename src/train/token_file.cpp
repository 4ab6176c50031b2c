// Token-file codec (layout in token_file.h). Values are assembled byte by byte, so the format is
// little-endian whatever the host.
#include "train/token_file.h"

#include <cstring>

#include "common/error.h"
#include "train/atomic_file.h"

namespace fp8train::train {
namespace {

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t get_le(std::string_view in, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  return v;
}

}  // namespace

bool looks_like_token_file(std::string_view bytes) {
  return bytes.size() >= sizeof(kTokenFileMagic) && std::memcmp(bytes.data(), kTokenFileMagic, 8) == 0;
}

std::string encode_token_file(const std::vector<Token>& tokens, uint32_t vocab_size, uint32_t bytes_per_token) {
  FP8T_CHECK(bytes_per_token == 2 || bytes_per_token == 4, "token width must be 2 or 4 bytes, got {}",
             bytes_per_token);
  FP8T_CHECK(vocab_size >= 1, "token file vocabulary size must be at least 1");
  FP8T_CHECK(bytes_per_token == 4 || vocab_size <= 65536, "vocabulary of {} does not fit uint16 tokens", vocab_size);
  std::string out(kTokenFileMagic, sizeof(kTokenFileMagic));
  put_le(out, bytes_per_token, 4);
  put_le(out, vocab_size, 4);
  put_le(out, tokens.size(), 8);
  put_le(out, 0, 8);
  out.reserve(out.size() + tokens.size() * bytes_per_token);
  for (size_t i = 0; i < tokens.size(); ++i) {
    FP8T_CHECK(tokens[i] < vocab_size, "token {} at position {} is not below the vocabulary size {}", tokens[i], i,
               vocab_size);
    put_le(out, tokens[i], static_cast<int>(bytes_per_token));
  }
  return out;
}

TokenFile decode_token_file(std::string_view bytes, const std::string& what) {
  FP8T_CHECK(bytes.size() >= kTokenFileHeaderBytes, "{} is not a token file: {} bytes, the header alone is {}", what,
             bytes.size(), kTokenFileHeaderBytes);
  FP8T_CHECK(looks_like_token_file(bytes), "{} is not a token file (bad magic or unsupported version)", what);
  TokenFile f;
  f.bytes_per_token = static_cast<uint32_t>(get_le(bytes, 8, 4));
  f.vocab_size = static_cast<uint32_t>(get_le(bytes, 12, 4));
  const uint64_t count = get_le(bytes, 16, 8);
  FP8T_CHECK(f.bytes_per_token == 2 || f.bytes_per_token == 4, "{}: token width {} is not 2 or 4", what,
             f.bytes_per_token);
  FP8T_CHECK(f.vocab_size >= 1, "{}: vocabulary size is 0", what);
  FP8T_CHECK(get_le(bytes, 24, 8) == 0, "{}: reserved header field is not zero", what);
  const uint64_t payload = bytes.size() - kTokenFileHeaderBytes;
  FP8T_CHECK(count <= payload / f.bytes_per_token && count * f.bytes_per_token == payload,
             "{}: header says {} tokens of {} bytes but {} bytes follow the header (truncated or trailing data)", what,
             count, f.bytes_per_token, payload);
  f.tokens.resize(count);
  const int w = static_cast<int>(f.bytes_per_token);
  for (uint64_t i = 0; i < count; ++i) {
    const Token t = static_cast<Token>(get_le(bytes, kTokenFileHeaderBytes + i * w, w));
    FP8T_CHECK(t < f.vocab_size, "{}: token {} at position {} is not below the vocabulary size {}", what, t, i,
               f.vocab_size);
    f.tokens[i] = t;
  }
  return f;
}

void write_token_file(const std::string& path, const std::vector<Token>& tokens, uint32_t vocab_size,
                      uint32_t bytes_per_token) {
  write_file_atomic(path, encode_token_file(tokens, vocab_size, bytes_per_token));
}

TokenFile read_token_file(const std::string& path) { return decode_token_file(read_file(path), "'" + path + "'"); }

}  // namespace fp8train::train
