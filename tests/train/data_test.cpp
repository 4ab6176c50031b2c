// Data layer: UTF-8 validation (offsets and reasons), byte tokenizer, token files (round trip, every
// corruption refused), the embedded corpus (deterministic, structured, correct arithmetic), split, sampling
// with save/restore, evaluation windows.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "../common/error_of.h"
#include "common/error.h"
#include "train/atomic_file.h"
#include "train/corpus.h"
#include "train/dataset.h"
#include "train/token_file.h"
#include "train/tokenizer.h"

using namespace fp8train;
using namespace fp8train::train;

namespace {
using test_util::error_of;
std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("fp8train-data-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}
}  // namespace

TEST(Utf8, AcceptsValidTextAndNamesTheOffsetOfBadBytes) {
  EXPECT_NO_THROW(validate_utf8("plain ascii", "t"));
  EXPECT_NO_THROW(validate_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF", "t"));
  const struct {
    std::string bytes;
    size_t offset;
  } bad[] = {
      {"ab\x80", 2},                 // lone continuation byte
      {"abc\xC3", 3},                // truncated 2-byte sequence
      {"\xC0\xAF", 0},               // overlong
      {"x\xE0\x80\xAF", 1},          // overlong 3-byte: bad second byte
      {"\xED\xA0\x80", 0},           // surrogate U+D800
      {"\xF4\x90\x80\x80", 0},       // above U+10FFFF
      {"\xF5\x80\x80\x80", 0},       // never-used lead byte
      {"ok \xE2\x82", 3},            // truncated at the end
      {"\xE2\x28\xA1", 0},           // bad continuation
      {"\xFF", 0},
  };
  for (const auto& b : bad) {
    const std::string msg = error_of([&] { validate_utf8(b.bytes, "data file 'x'"); });
    EXPECT_NE(msg.find("not valid UTF-8: byte offset " + std::to_string(b.offset) + " "), std::string::npos)
        << "for bytes at offset " << b.offset << ": " << msg;
  }
}

TEST(ByteTokenizer, RoundTripsBytesAndDropsSpecials) {
  const std::string text = "Hi \xC3\xA9\n";
  std::vector<Token> t = encode_bytes(text);
  ASSERT_EQ(t.size(), text.size());
  EXPECT_EQ(t[3], 0xC3u);
  t.insert(t.begin(), kBos);
  t.push_back(kEos);
  EXPECT_EQ(decode_tokens(t), text);
  EXPECT_THROW(decode_tokens({300}), Error);
}

TEST(TokenFile, RoundTripsBothWidthsAndRefusesCorruption) {
  const std::vector<Token> tokens{0, 1, 258, 65535, 7};
  for (uint32_t width : {2u, 4u}) {
    const std::string bytes = encode_token_file(tokens, 65536, width);
    EXPECT_EQ(bytes.size(), kTokenFileHeaderBytes + tokens.size() * width);
    const TokenFile f = decode_token_file(bytes, "t");
    EXPECT_EQ(f.tokens, tokens);
    EXPECT_EQ(f.vocab_size, 65536u);
    EXPECT_EQ(f.bytes_per_token, width);
    EXPECT_THROW(decode_token_file(bytes.substr(0, bytes.size() - 1), "t"), Error);  // truncated
    EXPECT_THROW(decode_token_file(bytes + "x", "t"), Error);                        // trailing data
    std::string bad_width = bytes;
    bad_width[8] = 3;
    EXPECT_THROW(decode_token_file(bad_width, "t"), Error);
    std::string bad_magic = bytes;
    bad_magic[7] = 2;  // unknown version
    EXPECT_THROW(decode_token_file(bad_magic, "t"), Error);
    std::string huge_count = bytes;
    huge_count[23] = '\x7F';  // token count near 2^63: must not overflow into a small size
    EXPECT_THROW(decode_token_file(huge_count, "t"), Error);
  }
  EXPECT_THROW(encode_token_file({5}, 5, 2), Error);       // token not below vocab
  EXPECT_THROW(encode_token_file({1}, 70000, 2), Error);   // vocab too large for uint16
  const std::string small = encode_token_file({1, 2, 3}, 4, 2);
  std::string out_of_vocab = small;
  out_of_vocab[kTokenFileHeaderBytes] = 9;
  EXPECT_NE(error_of([&] { decode_token_file(out_of_vocab, "t"); }).find("position 0"), std::string::npos);
}

TEST(TokenData, LoadsTextAndTokenFilesAndRefusesBadInput) {
  const auto dir = temp_dir("load");
  const std::string text_path = (dir / "a.txt").string();
  write_file_atomic(text_path, "hello\n");
  const TokenData text = load_token_data(text_path);
  EXPECT_TRUE(text.byte_tokens);
  EXPECT_EQ(text.tokens.to_vector(), encode_bytes("hello\n"));
  const std::string tok_path = (dir / "a.tok").string();
  write_token_file(tok_path, {3, 1, 2}, 1000, 2);
  const TokenData tok = load_token_data(tok_path);
  EXPECT_FALSE(tok.byte_tokens);
  EXPECT_EQ(tok.vocab_size, 1000u);
  EXPECT_EQ(tok.tokens.to_vector(), (std::vector<Token>{3, 1, 2}));
  const std::string bad_path = (dir / "bad.txt").string();
  write_file_atomic(bad_path, std::string("abc\xFF", 4));
  EXPECT_NE(error_of([&] { load_token_data(bad_path); }).find("byte offset 3"), std::string::npos);
  EXPECT_NE(error_of([&] { load_token_data((dir / "missing.txt").string()); }).find("does not exist"), std::string::npos);
  write_file_atomic((dir / "empty.txt").string(), "");
  EXPECT_NE(error_of([&] { load_token_data((dir / "empty.txt").string()); }).find("empty"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(EmbeddedCorpus, IsDeterministicStructuredAndCorrect) {
  const std::string a = generate_corpus(1, 200000), b = generate_corpus(1, 200000), c = generate_corpus(2, 200000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GE(a.size(), 200000u);
  EXPECT_EQ(a.back(), '\n');
  EXPECT_NO_THROW(validate_utf8(a, "corpus"));
  std::istringstream lines(a);
  std::string line;
  const std::regex sum(R"((\d+)([-+*])(\d+)=(\d+))"), paren(R"(\((\d)\+(\d)\)\*(\d)=(\d+))");
  int arithmetic = 0, brackets = 0, sentences = 0, sequences = 0, agreement_checked = 0;
  std::set<char> seen_bytes;
  while (std::getline(lines, line)) {
    ASSERT_FALSE(line.empty());
    for (char ch : line) seen_bytes.insert(ch);
    std::smatch m;
    if (std::regex_match(line, m, sum)) {
      const long x = std::stol(m[1]), y = std::stol(m[3]), r = std::stol(m[4]);
      const long expect = m[2] == "+" ? x + y : m[2] == "-" ? x - y : x * y;
      ASSERT_EQ(r, expect) << line;
      ++arithmetic;
    } else if (std::regex_match(line, m, paren)) {
      ASSERT_EQ(std::stol(m[4]), (std::stol(m[1]) + std::stol(m[2])) * std::stol(m[3])) << line;
      ++arithmetic;
    } else if (line.find_first_not_of("()[]{}<>") == std::string::npos) {
      std::string stack;  // balanced and properly nested
      for (char ch : line) {
        const std::string open = "([{<", close = ")]}>";
        if (open.find(ch) != std::string::npos) stack.push_back(close[open.find(ch)]);
        else {
          ASSERT_FALSE(stack.empty()) << line;
          ASSERT_EQ(stack.back(), ch) << line;
          stack.pop_back();
        }
      }
      ASSERT_TRUE(stack.empty()) << line;
      ++brackets;
    } else if (line.rfind("count ", 0) == 0 || line.rfind("down ", 0) == 0 || line.rfind("copy ", 0) == 0) {
      ++sequences;
    } else {
      ASSERT_TRUE(std::isupper(static_cast<unsigned char>(line[0]))) << line;
      ASSERT_EQ(line.back(), '.') << line;
      // Subject–verb agreement when no relative clause follows the subject: "The cats sleep." vs
      // "A red cat sleeps near ...". Plural nouns and plural verb forms are listed here independently.
      const std::regex head(R"(\w+ (?:(?:small|big|red|old|happy|quiet|green|quick) )?(\w+) (\w+) .*|\w+ (?:(?:small|big|red|old|happy|quiet|green|quick) )?(\w+) (\w+)\.)");
      if (std::regex_match(line, m, head)) {
        const std::string noun = m[1].matched ? m[1].str() : m[3].str();
        const std::string verb = m[1].matched ? m[2].str() : m[4].str();
        if (verb != "that") {
          static const std::set<std::string> plural_nouns{"cats", "dogs", "birds", "children", "teachers",
                                                          "robots", "farmers", "foxes", "sailors", "mice"};
          static const std::set<std::string> plural_verbs{"sleep", "run", "sing", "wait", "laugh", "hide",
                                                          "see", "like", "follow", "help", "find", "watch"};
          EXPECT_EQ(plural_nouns.count(noun), plural_verbs.count(verb)) << line;
          ++agreement_checked;
        }
      }
      ++sentences;
    }
  }
  EXPECT_GT(arithmetic, 1000);
  EXPECT_GT(brackets, 1000);
  EXPECT_GT(sentences, 1000);
  EXPECT_GT(sequences, 500);
  EXPECT_GT(agreement_checked, 1000);
  EXPECT_GT(seen_bytes.size(), 40u);  // a real alphabet, not a handful of symbols
}

TEST(Split, HoldsOutTheTailAndChecksSizes) {
  std::vector<Token> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>(i % 256);
  const TrainEvalSplit s = split_train_eval(tokens, 0.1, 16);
  EXPECT_EQ(s.train.size(), 900u);
  EXPECT_EQ(s.eval.size(), 100u);
  EXPECT_EQ(s.eval.front(), tokens[900]);
  EXPECT_THROW(split_train_eval(std::vector<Token>(20), 0.1, 16), Error);
  EXPECT_THROW(split_train_eval(tokens, 1.5, 16), Error);
}

TEST(BatchSampler, IsSeededAndResumesExactly) {
  std::vector<Token> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>((i * 7) % 256);
  BatchSampler a(tokens, 32, 99), b(tokens, 32, 99), c(tokens, 32, 100);
  std::vector<Token> ia, ta, ib, tb, ic, tc;
  a.next(4, ia, ta);
  b.next(4, ib, tb);
  c.next(4, ic, tc);
  EXPECT_EQ(ia, ib);
  EXPECT_NE(ia, ic);
  ASSERT_EQ(ia.size(), 4u * 32u);
  for (size_t r = 0; r < 4; ++r)
    for (size_t i = 0; i + 1 < 32; ++i) EXPECT_EQ(ta[r * 32 + i], ia[r * 32 + i + 1]);  // targets = inputs shifted
  const BatchSampler::State saved = a.state();
  EXPECT_EQ(saved.windows_drawn, 4);
  a.next(3, ia, ta);
  BatchSampler resumed(tokens, 32, 12345);
  resumed.set_state(saved);
  resumed.next(3, ib, tb);
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(ta, tb);
}

TEST(EvalWindows, CoverTheDataWithoutOverlap) {
  EXPECT_EQ(eval_window_starts(100, 10, 0), (std::vector<int64_t>{0, 10, 20, 30, 40, 50, 60, 70, 80}));
  EXPECT_EQ(eval_window_starts(100, 10, 3), (std::vector<int64_t>{0, 10, 20}));
  EXPECT_TRUE(eval_window_starts(5, 10, 0).empty());
}
