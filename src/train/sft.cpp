// Chat / SFT data (see sft.h).
#include "train/sft.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "train/atomic_file.h"

namespace fp8train::train {

SftTokenizer byte_sft_tokenizer() {
  SftTokenizer t;
  t.encode = [](std::string_view text) { return encode_bytes(text); };
  return t;
}

SftTokenizer sft_tokenizer(const Tokenizer& tokenizer) {
  SftTokenizer t;
  t.encode = [&tokenizer](std::string_view text) { return encode_text(tokenizer, text); };
  t.bos = tokenizer.bos_id();
  t.eos = tokenizer.eos_id();
  t.vocab_size = tokenizer.vocab_size();
  t.byte_tokens = tokenizer.is_byte();
  FP8T_CHECK(t.bos < t.vocab_size && t.eos < t.vocab_size,
             "the {} has no {} id, which SFT data needs (each example is [BOS] prompt response [EOS])",
             tokenizer.describe(), t.bos < t.vocab_size ? "EOS" : "BOS");
  return t;
}

TokenData load_sft_data(const std::string& path, const SftTokenizer& tokenizer) {
  FP8T_CHECK(static_cast<bool>(tokenizer.encode), "SFT data '{}': no tokenizer given", path);
  const std::string bytes = read_file(path);
  FP8T_CHECK(!bytes.empty(), "SFT data file '{}' is empty", path);
  TokenData data;
  data.vocab_size = tokenizer.vocab_size;
  data.byte_tokens = tokenizer.byte_tokens;
  std::vector<Token> tokens;
  int64_t examples = 0, response_tokens = 0;
  size_t line_no = 0;
  for (size_t begin = 0; begin < bytes.size();) {
    size_t end = bytes.find('\n', begin);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view line(bytes.data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("SFT data '{}' line {}", path, line_no);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    FP8T_CHECK(!j.is_discarded() && j.is_object(),
               "{}: not a JSON object (expected {{\"prompt\": \"...\", \"response\": \"...\"}})", where);
    for (const char* field : {"prompt", "response"})
      FP8T_CHECK(j.contains(field) && j[field].is_string(), "{}: field \"{}\" is missing or not a string", where,
                 field);
    const std::string prompt = j["prompt"].get<std::string>(), response = j["response"].get<std::string>();
    validate_utf8(prompt, where + " \"prompt\"");
    validate_utf8(response, where + " \"response\"");
    FP8T_CHECK(!response.empty(), "{}: the response is empty (it is what the model learns)", where);
    const std::vector<Token> p = tokenizer.encode(prompt), r = tokenizer.encode(response);
    // [BOS] prompt response [EOS]; the mask says which tokens are targets: the response and its EOS.
    tokens.push_back(tokenizer.bos);
    data.loss_mask.push_back(0);
    tokens.insert(tokens.end(), p.begin(), p.end());
    data.loss_mask.insert(data.loss_mask.end(), p.size(), 0);
    tokens.insert(tokens.end(), r.begin(), r.end());
    data.loss_mask.insert(data.loss_mask.end(), r.size(), 1);
    tokens.push_back(tokenizer.eos);
    data.loss_mask.push_back(1);
    ++examples;
    response_tokens += static_cast<int64_t>(r.size()) + 1;
  }
  FP8T_CHECK(examples > 0, "SFT data file '{}' holds no example (one JSON object per line)", path);
  for (Token t : tokens)
    FP8T_CHECK(t < data.vocab_size, "SFT data '{}': the tokenizer produced token {}, outside its vocabulary of {}",
               path, t, data.vocab_size);
  const size_t token_count = tokens.size();
  data.tokens = TokenSequence(std::move(tokens));
  data.source = fmt::format("{} (SFT: {} examples, {} of {} tokens are response targets)", path, examples,
                            response_tokens, token_count);
  return data;
}

}  // namespace fp8train::train
