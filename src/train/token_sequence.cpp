// TokenSequence (token_sequence.h).
#include "train/token_sequence.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace fp8train::train {

TokenSequence::TokenSequence(std::vector<Token> tokens) {
  auto owned = std::make_shared<const std::vector<Token>>(std::move(tokens));
  const void* data = owned->data();
  const size_t n = owned->size();
  append(std::move(owned), data, 4, n);
}

TokenSequence TokenSequence::view(const std::vector<Token>& tokens) {
  TokenSequence s;
  s.append(nullptr, tokens.data(), 4, tokens.size());
  return s;
}

void TokenSequence::append(std::shared_ptr<const void> owner, const void* data, uint32_t width, size_t count) {
  FP8T_CHECK(width == 2 || width == 4, "token width must be 2 or 4 bytes, got {}", width);
  if (count == 0) return;
  segments_.push_back({std::move(owner), static_cast<const unsigned char*>(data), width, count, size_});
  size_ += count;
}

void TokenSequence::set_limit(uint32_t limit, std::string source) {
  limit_ = limit;
  source_ = std::move(source);
}

Token TokenSequence::operator[](size_t i) const {
  Token t;
  copy(i, 1, &t);
  return t;
}

void TokenSequence::copy(size_t offset, size_t count, Token* out) const {
  FP8T_CHECK(offset <= size_ && count <= size_ - offset, "tokens [{}, {}) are outside a sequence of {} tokens", offset,
             offset + count, size_);
  if (count == 0) return;
  // The segment holding `offset`: the last one whose begin <= offset.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), offset,
                             [](size_t o, const Segment& s) { return o < s.begin; });
  size_t seg = static_cast<size_t>(it - segments_.begin()) - 1;
  size_t done = 0;
  while (done < count) {
    const Segment& s = segments_[seg];
    const size_t at = offset + done - s.begin;
    const size_t n = std::min(count - done, s.count - at);
    if (s.width == 4) {
      std::memcpy(out + done, s.data + at * 4, n * 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s.data + (at + i) * 2, 2);
        out[done + i] = v;
      }
    }
    if (limit_ != 0)
      for (size_t i = 0; i < n; ++i)
        FP8T_CHECK(out[done + i] < limit_,
                   "{}: token {} at position {} is not below the vocabulary size {} (corrupt data?)", source_,
                   out[done + i], offset + done + i, limit_);
    done += n;
    ++seg;
  }
}

TokenSequence TokenSequence::slice(size_t begin, size_t end) const {
  FP8T_CHECK(begin <= end && end <= size_, "slice [{}, {}) of a sequence of {} tokens", begin, end, size_);
  TokenSequence out;
  out.limit_ = limit_;
  out.source_ = source_;
  for (const Segment& s : segments_) {
    const size_t lo = std::max(begin, s.begin), hi = std::min(end, s.begin + s.count);
    if (lo >= hi) continue;
    out.append(s.owner, s.data + (lo - s.begin) * s.width, s.width, hi - lo);
  }
  return out;
}

std::vector<Token> TokenSequence::to_vector() const {
  std::vector<Token> v(size_);
  copy(0, size_, v.data());
  return v;
}

}  // namespace fp8train::train
