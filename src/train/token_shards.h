// Token shards: pre-tokenized training data too large to read whole, written by `fp8train tokenize` and
// memory-mapped by training (`--data DIR`). A shard directory holds
//   index.json         {"format": "fp8train-token-shards", "version": 1, "tokenizer": fingerprint,
//                       "vocab_size": V, "dtype": "uint16"|"uint32", "tokens": total,
//                       "shards": [{"file": "shard-00000.bin", "tokens": N, "fnv1a64": hex}, ...], "sources": [...]}
//   shard-NNNNN.bin    one shard, little-endian, 64-byte header then the ids:
//     offset size field
//     0      8    magic "FP8TSHRD"
//     8      4    uint32 format version (1)
//     12     4    uint32 bytes per token: 2 (uint16, when the vocabulary fits) or 4 (uint32)
//     16     8    uint64 token count N
//     24     4    uint32 vocab_size (every id is below it)
//     28     4    reserved, zero
//     32     8    uint64 FNV-1a 64 of the tokenizer's fingerprint text (Tokenizer::fingerprint)
//     40     8    uint64 FNV-1a 64 of the N·w payload bytes
//     48     16   reserved, zero
//     64     N·w  the ids
//   tokenizer.model    the SentencePiece model the shards were made with (absent for the byte tokenizer)
// The data is the shards' concatenation in index order (files in the order given, each file's text encoded
// as encode_text does). The directory is written under a temporary name and renamed into place, so it is
// complete or absent. Opening checks every shard's size and header against the index and the tokenizer (a
// truncated, foreign or mismatched shard is an Error naming it) and maps it read-only; ids are range-checked
// as they are read (TokenSequence::set_limit), the payload checksums only by verify_token_shards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/dataset.h"
#include "train/tokenizer.h"

namespace fp8train::train {

inline constexpr char kShardMagic[8] = {'F', 'P', '8', 'T', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct TokenizeOptions {
  std::vector<std::string> inputs;          // UTF-8 text files
  std::string out_dir;                      // must not exist yet
  int64_t shard_tokens = int64_t{1} << 26;  // ids per shard (the last one holds the rest)
};

struct TokenizeStats {
  int64_t files = 0, bytes = 0, tokens = 0, shards = 0;
  uint32_t bytes_per_token = 0;
  double seconds = 0;
};

TokenizeStats tokenize_to_shards(const Tokenizer& tokenizer, const TokenizeOptions& options);

// Whether `path` is a directory holding index.json.
bool is_token_shard_dir(const std::string& path);

// The tokenizer a shard directory was made with: its tokenizer.model, or the byte tokenizer.
std::unique_ptr<Tokenizer> token_shards_tokenizer(const std::string& dir);

// Maps the shards; when `expected` is given, the shards must have been made with it (same fingerprint).
TokenData open_token_shards(const std::string& dir, const Tokenizer* expected);

// Reads every shard's payload and compares it with its recorded checksum; Error naming the first bad shard.
void verify_token_shards(const std::string& dir);

}  // namespace fp8train::train
