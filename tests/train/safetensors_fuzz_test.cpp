// Randomized mutation fuzzing of the safetensors reader: thousands of mutated, truncated and extended
// versions of valid files. Every input must either parse into a self-consistent file or throw
// fp8train::Error — no crash, no other exception type, no hang (the whole run is timed). Cheap enough for
// CI (well under a second) and meant to be run under ASan/UBSan too (scripts/test.sh --asan).
// FP8TRAIN_FUZZ_ITERATIONS=N runs N iterations instead of the CI default.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "train/rng.h"
#include "train/safetensors.h"

using namespace fp8train;
using namespace fp8train::train;

namespace {

std::vector<std::string> seed_files() {
  std::vector<std::string> seeds;
  StFile a;
  a.metadata = {{"format", "pt"}};
  for (int i = 0; i < 4; ++i) {
    StTensor t{fmt::format("layers.{}.w", i), i % 2 ? StDtype::BF16 : StDtype::F32, {3, i + 1}, {}};
    t.data.assign(t.element_count() * st_dtype_size(t.dtype), static_cast<char>(i + 1));
    a.tensors.push_back(t);
  }
  a.tensors.push_back({"empty", StDtype::I64, {0}, {}});
  a.tensors.push_back({"codes", StDtype::F8_E4M3, {5}, std::string(5, '\x7e')});
  seeds.push_back(encode_safetensors(a));
  StFile b;
  b.tensors.push_back({"x", StDtype::U8, {1}, "z"});
  seeds.push_back(encode_safetensors(b));
  seeds.push_back(encode_safetensors(StFile{}));
  return seeds;
}

// Tokens that push the JSON parser and the validator into their edge cases.
const char* const kSplices[] = {"{", "}", "[", "]", "\"", ",", ":", "0", "-1", "1e309", "18446744073709551615",
                                "99999999999999999999", "null", "true", "\"F8_E5M2\"", "\"__metadata__\"", "\\u0000",
                                "\\", "\xff", " ", "[0,0]", "[]", "{}", "\"shape\":[1,2,3]"};

std::string mutate(const std::string& in, Rng& rng) {
  std::string s = in;
  const int edits = 1 + static_cast<int>(rng.uniform(4));
  for (int e = 0; e < edits; ++e) {
    if (s.empty()) s.push_back('x');
    // Bias positions toward the header, where the interesting structure lives.
    const size_t header_end = std::min<size_t>(s.size(), 8 + 200);
    const size_t pos = rng.uniform(3) == 0 ? rng.uniform(s.size()) : rng.uniform(header_end);
    switch (rng.uniform(8)) {
      case 0: s[pos] = static_cast<char>(s[pos] ^ (1 << rng.uniform(8))); break;
      case 1: s[pos] = static_cast<char>(rng.uniform(256)); break;
      case 2: s.resize(rng.uniform(s.size() + 1)); break;                            // truncate
      case 3: s.insert(pos, kSplices[rng.uniform(std::size(kSplices))]); break;       // splice a token
      case 4: s.erase(pos, 1 + rng.uniform(8)); break;                               // delete a range
      case 5: s.append(rng.uniform(16), static_cast<char>(rng.uniform(256))); break;  // trailing bytes
      case 6: {  // rewrite the header length near its true value, or wildly
        uint64_t n = 0;
        for (int i = 0; i < 8 && i < static_cast<int>(s.size()); ++i)
          n |= static_cast<uint64_t>(static_cast<unsigned char>(s[static_cast<size_t>(i)])) << (8 * i);
        n = rng.uniform(2) ? n + rng.uniform(17) - 8 : rng.next_u64() >> rng.uniform(64);
        for (int i = 0; i < 8 && i < static_cast<int>(s.size()); ++i)
          s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
        break;
      }
      default: {  // replace a digit run inside the header with another number
        const size_t digit = s.find_first_of("0123456789", std::min(pos, s.size()));
        if (digit != std::string::npos && digit < header_end)
          s.replace(digit, 1, std::to_string(rng.next_u64() >> rng.uniform(64)));
        break;
      }
    }
  }
  return s;
}

}  // namespace

TEST(SafetensorsFuzz, MutatedFilesParseOrFailCleanly) {
  long iterations = 20000;
  if (const char* env = std::getenv("FP8TRAIN_FUZZ_ITERATIONS")) iterations = std::atol(env);
  const std::vector<std::string> seeds = seed_files();
  Rng rng(20261121);
  long parsed = 0, refused = 0;
  const auto start = std::chrono::steady_clock::now();
  for (long it = 0; it < iterations; ++it) {
    const std::string input = mutate(seeds[rng.uniform(seeds.size())], rng);
    try {
      const StFile f = decode_safetensors(input, "fuzz input");
      // A successful parse must describe a file that round-trips exactly through our writer and reader.
      size_t bytes = 0;
      for (const StTensor& t : f.tensors) {
        ASSERT_EQ(t.data.size(), t.element_count() * st_dtype_size(t.dtype)) << "iteration " << it;
        bytes += t.data.size();
      }
      ASSERT_LE(bytes, input.size());
      const StFile again = decode_safetensors(encode_safetensors(f), "re-encoded");
      ASSERT_EQ(again.tensors.size(), f.tensors.size());
      ASSERT_EQ(again.metadata, f.metadata);
      ++parsed;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL() << "iteration " << it << ": a non-Error exception escaped the reader: " << e.what();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("safetensors fuzz: %ld inputs, %ld parsed, %ld refused, %.2f s\n", iterations, parsed, refused, seconds);
  EXPECT_EQ(parsed + refused, iterations);
  EXPECT_GT(refused, iterations / 2);  // the mutations really do break files...
  EXPECT_GT(parsed, 0);                // ...and some (data-byte flips) leave them valid
  EXPECT_LT(seconds, 60.0) << "the reader must not hang on hostile input";
}
