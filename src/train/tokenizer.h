// Tokenizers. The byte tokenizer (the default): token = byte value (0..255) plus three specials, vocabulary 259.
//   BOS = 256, EOS = 257, PAD = 258
// The subword tokenizer is a SentencePiece model (tokenizer_sp.cpp, Debian's libsentencepiece): BPE trained by
// `fp8train tokenizer train`, with identity normalization, no dummy prefix, no whitespace folding and byte
// fallback, so every UTF-8 text encodes losslessly (decode(encode(text)) == text) and the encoding of a text is
// the concatenation of the encodings of its lines (no piece holds a newline). Both implement `Tokenizer`; a
// run, a checkpoint and a shard directory keep the SentencePiece model's bytes ("tokenizer.model") so they are
// decoded later with the tokenizer they were made with.
// Text is UTF-8; validate_utf8 enforces RFC 3629 (no overlong forms, no surrogates, nothing above U+10FFFF,
// no truncated sequence) and names the byte offset of the first problem. Bits-per-byte equals bits-per-token
// for this tokenizer, since every token of a text is one byte.
#pragma once
#include <cstdint>
#include <memory>
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

// What training, evaluation, generation and the shard writer need of a tokenizer.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;     // "byte" or "sentencepiece"
  virtual uint32_t vocab_size() const = 0;  // every id is < vocab_size
  // Text (valid UTF-8; callers validate text from outside) to ids, no specials added.
  virtual std::vector<Token> encode(std::string_view text) const = 0;
  // Ids to text; specials are dropped. Throws Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<Token>& ids) const = 0;
  virtual Token eos_id() const = 0;
  virtual Token bos_id() const = 0;  // vocab_size() when the model has none
  // Whether generation may sample the id: text-carrying pieces and EOS (never BOS, PAD, UNK or unused ids).
  virtual bool samplable(Token id) const = 0;
  // The model file's bytes (empty for the byte tokenizer, which needs none).
  virtual const std::string& model_bytes() const = 0;
  // "byte", or "sentencepiece:<FNV-1a 64 of the model bytes>": equal exactly when two tokenizers encode alike.
  std::string fingerprint() const;
  bool is_byte() const { return kind() == "byte"; }
  // "byte tokenizer (259 ids)" / "sentencepiece tokenizer (4096 ids)".
  std::string describe() const;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

// A SentencePiece model from its serialized bytes; `what` names it in errors. Throws Error (one sentence naming
// `what`) when the bytes are not a valid SentencePiece model.
std::unique_ptr<Tokenizer> sentencepiece_tokenizer(const std::string& model_bytes, const std::string& what);
// ... from a file (Error naming the path when it is missing, unreadable or not a SentencePiece model).
std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path);

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // UTF-8 text files; each line is one training sentence
  uint32_t vocab_size = 4096;
  std::string model_type = "bpe";  // bpe or unigram
  int threads = 2;
  int64_t max_sentences = 0;  // train on a random sample of this many lines (0: all)
};
// Trains a SentencePiece model with fp8train's settings (see the top of this file); returns its bytes.
// Throws Error for unreadable or non-UTF-8 input and with SentencePiece's own reason when training fails
// (e.g. a vocabulary too large for the data).
std::string train_sentencepiece(const TokenizerTrainOptions& options);

}  // namespace fp8train::train
