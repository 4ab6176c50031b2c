// TokenSequence: a read-only, random-access run of tokens that is the concatenation of segments, each a
// contiguous array of little-endian uint16 or uint32 ids owned elsewhere (a std::vector, or a memory-mapped
// shard file kept alive by a shared handle). Copies and slices are cheap (they share the segments), so the
// train/held-out split and the sampler take views, never copies, of data that may be larger than memory.
// Windows may cross segment boundaries: the data is one token stream in segment order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/tokenizer.h"

namespace fp8train::train {

class TokenSequence {
 public:
  TokenSequence() = default;
  explicit TokenSequence(std::vector<Token> tokens);            // owns them
  static TokenSequence view(const std::vector<Token>& tokens);  // borrows: `tokens` must outlive it

  // Appends `count` ids of `width` bytes (2 or 4) at `data`; `owner` keeps the memory alive.
  void append(std::shared_ptr<const void> owner, const void* data, uint32_t width, size_t count);
  // Ids read are checked to be below `limit` (0: unchecked), naming `source` in the error: data from files
  // (shards) could hold a corrupt id that would otherwise index past the embedding table.
  void set_limit(uint32_t limit, std::string source);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Token operator[](size_t i) const;
  // out[0..count) = tokens [offset, offset + count); Error when that range is not inside the sequence.
  void copy(size_t offset, size_t count, Token* out) const;
  // The tokens [begin, end) as a view sharing the segments.
  TokenSequence slice(size_t begin, size_t end) const;
  std::vector<Token> to_vector() const;

 private:
  struct Segment {
    std::shared_ptr<const void> owner;
    const unsigned char* data = nullptr;
    uint32_t width = 4;
    size_t count = 0;
    size_t begin = 0;  // position of the segment's first token in the sequence
  };
  std::vector<Segment> segments_;
  size_t size_ = 0;
  uint32_t limit_ = 0;
  std::string source_;
};

}  // namespace fp8train::train
