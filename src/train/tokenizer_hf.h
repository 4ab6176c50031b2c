// Tokenizer files for a Hugging Face model directory: what `transformers.AutoTokenizer.from_pretrained(dir)` loads
// so that it encodes a text to the same ids as fp8train (checked by tests/python/test_tokenizer_oracle.py).
//   SentencePiece: tokenizer.model (the model's bytes) + tokenizer_config.json naming LlamaTokenizer with the
//     settings that reproduce SentencePiece's own encoding: no BOS/EOS added, legacy mode, add_prefix_space as the
//     model's dummy prefix (false for fp8train's models), and split_special_tokens so a text holding "<s>" is
//     encoded as text, as fp8train does. Loading it needs the sentencepiece and protobuf Python packages.
//   Byte tokenizer: tokenizer.json (a byte-level BPE with no merges whose 256 ids are the byte values, and the
//     specials <bos>=256, <eos>=257, <pad>=258) + tokenizer_config.json naming PreTrainedTokenizerFast.
// Files are written atomically; existing files of these names are replaced, other files are left alone.
#pragma once
#include <string>
#include <vector>

#include "train/tokenizer.h"

namespace fp8train::train {

// Writes the files into `dir` (created when missing); returns the names written.
std::vector<std::string> write_hf_tokenizer_files(const Tokenizer& tokenizer, const std::string& dir);

}  // namespace fp8train::train
