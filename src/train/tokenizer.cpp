// Byte tokenizer and strict UTF-8 validation (RFC 3629, table 3-7 of the Unicode standard).
#include "train/tokenizer.h"

#include "common/error.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"

namespace fp8train::train {

void validate_utf8(std::string_view bytes, const std::string& what) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  auto fail = [&](size_t offset, const char* reason) {
    FP8T_FAIL("{} is not valid UTF-8: byte offset {} (0x{:02X}): {}", what, offset,
              offset < n ? static_cast<unsigned>(s[offset]) : 0u, reason);
  };
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;   // no overlong 3-byte forms
      if (c == 0xED) hi = 0x9F;   // no UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;   // no overlong 4-byte forms
      if (c == 0xF4) hi = 0x8F;   // nothing above U+10FFFF
    } else if (c >= 0x80 && c <= 0xBF) {
      fail(i, "continuation byte without a lead byte");
    } else {
      fail(i, c == 0xC0 || c == 0xC1 ? "overlong encoding" : "byte never used in UTF-8");
    }
    if (i + len > n) fail(i, "multi-byte sequence truncated by the end of the data");
    for (size_t k = 1; k < len; ++k) {
      const unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
      if (s[i + k] < lo_k || s[i + k] > hi_k) {
        const std::string reason = fmt::format(
            "a {}-byte sequence whose byte {} (0x{:02X}) is not a valid continuation{}", len, k + 1,
            static_cast<unsigned>(s[i + k]),
            s[i + k] >= 0x80 && s[i + k] <= 0xBF ? " (overlong form, surrogate or above U+10FFFF)" : "");
        fail(i, reason.c_str());
      }
    }
    i += len;
  }
}

std::vector<Token> encode_bytes(std::string_view bytes) {
  std::vector<Token> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
  return tokens;
}

std::string decode_tokens(const std::vector<Token>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (Token t : tokens) {
    FP8T_CHECK(t < kByteVocabSize, "token {} is outside the byte tokenizer's vocabulary of {}", t, kByteVocabSize);
    if (t < 256) out.push_back(static_cast<char>(t));
  }
  return out;
}

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "byte"; }
  uint32_t vocab_size() const override { return kByteVocabSize; }
  std::vector<Token> encode(std::string_view text) const override { return encode_bytes(text); }
  std::string decode(const std::vector<Token>& ids) const override { return decode_tokens(ids); }
  Token eos_id() const override { return kEos; }
  Token bos_id() const override { return kBos; }
  bool samplable(Token id) const override { return id < 256 || id == kEos; }
  const std::string& model_bytes() const override { return empty_; }

 private:
  std::string empty_;
};

}  // namespace

std::string Tokenizer::fingerprint() const { return is_byte() ? "byte" : kind() + ":" + fnv1a64_hex(model_bytes()); }

std::string Tokenizer::describe() const { return fmt::format("{} tokenizer ({} ids)", kind(), vocab_size()); }

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return sentencepiece_tokenizer(bytes, "tokenizer model '" + path + "'");
}

}  // namespace fp8train::train
