// Hugging Face tokenizer files (tokenizer_hf.h).
#include "train/tokenizer_hf.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "train/atomic_file.h"

namespace fp8train::train {
namespace {

// The length an exported tokenizer accepts before warning; fp8train's models have no such limit of their own.
constexpr int64_t kModelMaxLength = 1000000;

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The byte-level pre-tokenizer's alphabet: byte b is shown as a printable code point (bytes that are printable
// Latin-1 as themselves, the rest as 256 + n in byte order), the mapping the ByteLevel pre-tokenizer and
// decoder of the tokenizers library use.
std::string byte_level_char(int b) {
  auto printable = [](int x) {
    return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
  };
  uint32_t cp = static_cast<uint32_t>(b);
  if (!printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!printable(x)) ++n;
    cp = 256 + static_cast<uint32_t>(n);
  }
  std::string s;
  append_utf8(s, cp);
  return s;
}

nlohmann::ordered_json added_token(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& j) {
  write_file_atomic(path.string(), j.dump(2) + "\n");
}

}  // namespace

std::vector<std::string> write_hf_tokenizer_files(const Tokenizer& tokenizer, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const fs::path d(dir);
  nlohmann::ordered_json config;
  config["add_bos_token"] = false;
  config["add_eos_token"] = false;
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = kModelMaxLength;
  config["split_special_tokens"] = true;  // "<s>" in a text is text, as fp8train encodes it
  if (tokenizer.is_byte()) {
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level_char(b)] = b;
    const nlohmann::ordered_json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    nlohmann::ordered_json tj;
    tj["version"] = "1.0";
    tj["truncation"] = nullptr;
    tj["padding"] = nullptr;
    tj["added_tokens"] = {added_token(kBos, "<bos>"), added_token(kEos, "<eos>"), added_token(kPad, "<pad>")};
    tj["normalizer"] = nullptr;
    tj["pre_tokenizer"] = byte_level;
    tj["post_processor"] = nullptr;
    tj["decoder"] = byte_level;
    tj["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", vocab},
                   {"merges", nlohmann::ordered_json::array()}};
    write_json(d / "tokenizer.json", tj);
    config["tokenizer_class"] = "PreTrainedTokenizerFast";
    config["bos_token"] = "<bos>";
    config["eos_token"] = "<eos>";
    config["pad_token"] = "<pad>";
    write_json(d / "tokenizer_config.json", config);
    return {"tokenizer.json", "tokenizer_config.json"};
  }
  FP8T_CHECK(tokenizer.kind() == "sentencepiece", "no Hugging Face export for the {} tokenizer", tokenizer.kind());
  sentencepiece::SentencePieceProcessor sp;
  const sentencepiece::util::Status status = sp.LoadFromSerializedProto(tokenizer.model_bytes());
  FP8T_CHECK(status.ok(), "the tokenizer's SentencePiece model does not load: {}", status.ToString());
  // A model with a dummy prefix (e.g. Llama's) encodes "a" as "▁a": the HF tokenizer must then prepend the space.
  std::vector<std::string> pieces;
  FP8T_CHECK(sp.Encode("a", &pieces).ok(), "the tokenizer's SentencePiece model cannot encode a probe text");
  const bool dummy_prefix = !pieces.empty() && pieces.front().rfind("\xE2\x96\x81", 0) == 0;
  write_file_atomic((d / "tokenizer.model").string(), tokenizer.model_bytes());
  config["tokenizer_class"] = "LlamaTokenizer";
  config["legacy"] = true;
  config["add_prefix_space"] = dummy_prefix;
  auto special = [&](const char* key, int id) {
    if (id >= 0 && id < sp.GetPieceSize()) config[key] = sp.IdToPiece(id);
  };
  special("bos_token", sp.bos_id());
  special("eos_token", sp.eos_id());
  special("unk_token", sp.unk_id());
  special("pad_token", sp.pad_id());
  write_json(d / "tokenizer_config.json", config);
  return {"tokenizer.model", "tokenizer_config.json"};
}

}  // namespace fp8train::train
