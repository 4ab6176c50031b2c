// Procedural corpus generator (see corpus.h). Each generator appends one line; the mix weights favour
// sentences and arithmetic, the two kinds with the most to learn.
#include "train/corpus.h"

#include <fmt/format.h>

#include <array>
#include <iterator>
#include <string_view>

#include "train/rng.h"

namespace fp8train::train {
namespace {

template <size_t N>
std::string_view pick(Rng& rng, const std::array<std::string_view, N>& words) {
  return words[rng.uniform(N)];
}

int uniform_int(Rng& rng, int lo, int hi) {  // inclusive bounds
  return lo + static_cast<int>(rng.uniform(static_cast<uint64_t>(hi - lo + 1)));
}

void arithmetic_line(Rng& rng, std::string& out) {
  switch (rng.uniform(4)) {
    case 0: {
      const int a = uniform_int(rng, 0, 99), b = uniform_int(rng, 0, 99);
      fmt::format_to(std::back_inserter(out), "{}+{}={}", a, b, a + b);
      break;
    }
    case 1: {
      int a = uniform_int(rng, 0, 99), b = uniform_int(rng, 0, 99);
      if (a < b) std::swap(a, b);
      fmt::format_to(std::back_inserter(out), "{}-{}={}", a, b, a - b);
      break;
    }
    case 2: {
      const int a = uniform_int(rng, 0, 12), b = uniform_int(rng, 0, 12);
      fmt::format_to(std::back_inserter(out), "{}*{}={}", a, b, a * b);
      break;
    }
    default: {
      const int a = uniform_int(rng, 0, 9), b = uniform_int(rng, 0, 9), c = uniform_int(rng, 0, 9);
      fmt::format_to(std::back_inserter(out), "({}+{})*{}={}", a, b, c, (a + b) * c);
      break;
    }
  }
}

void bracket_line(Rng& rng, std::string& out) {
  static constexpr char kOpen[] = "([{<";
  static constexpr char kClose[] = ")]}>";
  const int pairs = uniform_int(rng, 1, 12);
  constexpr int kMaxDepth = 6;
  std::string stack;
  int opened = 0;
  while (opened < pairs || !stack.empty()) {
    const bool can_open = opened < pairs && static_cast<int>(stack.size()) < kMaxDepth;
    if (can_open && (stack.empty() || rng.uniform(2) == 0)) {
      const int k = static_cast<int>(rng.uniform(4));
      out.push_back(kOpen[k]);
      stack.push_back(kClose[k]);
      ++opened;
    } else {
      out.push_back(stack.back());
      stack.pop_back();
    }
  }
}

// Grammar: S → NP [that Vt NP] VP "." ; VP → Vi | Vt NP | Vi Prep NP. The verb agrees with the head noun of
// the subject, so after a relative clause the model must remember the subject's number.
struct Noun {
  std::string_view singular, plural;
};
constexpr std::array<Noun, 10> kNouns{{{"cat", "cats"}, {"dog", "dogs"}, {"bird", "birds"}, {"child", "children"},
                                       {"teacher", "teachers"}, {"robot", "robots"}, {"farmer", "farmers"},
                                       {"fox", "foxes"}, {"sailor", "sailors"}, {"mouse", "mice"}}};
struct Verb {
  std::string_view singular, plural;
};
constexpr std::array<Verb, 6> kIntransitive{
    {{"sleeps", "sleep"}, {"runs", "run"}, {"sings", "sing"}, {"waits", "wait"}, {"laughs", "laugh"}, {"hides", "hide"}}};
constexpr std::array<Verb, 6> kTransitive{
    {{"sees", "see"}, {"likes", "like"}, {"follows", "follow"}, {"helps", "help"}, {"finds", "find"}, {"watches", "watch"}}};
constexpr std::array<std::string_view, 8> kAdjectives{"small", "big", "red", "old", "happy", "quiet", "green", "quick"};
constexpr std::array<std::string_view, 5> kPrepositions{"near", "behind", "under", "with", "beside"};

void noun_phrase(Rng& rng, bool plural, std::string& out) {
  if (plural) {
    static constexpr std::array<std::string_view, 4> kDet{"the", "some", "many", "two"};
    out += pick(rng, kDet);
  } else {
    static constexpr std::array<std::string_view, 3> kDet{"the", "a", "one"};
    out += pick(rng, kDet);
  }
  if (rng.uniform(2) == 0) {
    out += ' ';
    out += pick(rng, kAdjectives);
  }
  out += ' ';
  const Noun& n = kNouns[rng.uniform(kNouns.size())];
  out += plural ? n.plural : n.singular;
}

void sentence(Rng& rng, std::string& out) {
  const size_t start = out.size();
  const bool plural = rng.uniform(2) == 0;
  noun_phrase(rng, plural, out);
  if (rng.uniform(3) == 0) {  // relative clause with its own, independent number
    const bool inner_plural = rng.uniform(2) == 0;
    out += " that ";
    const Verb& v = kTransitive[rng.uniform(kTransitive.size())];
    out += plural ? v.plural : v.singular;
    out += ' ';
    noun_phrase(rng, inner_plural, out);
  }
  out += ' ';
  switch (rng.uniform(3)) {
    case 0: {
      const Verb& v = kIntransitive[rng.uniform(kIntransitive.size())];
      out += plural ? v.plural : v.singular;
      break;
    }
    case 1: {
      const Verb& v = kTransitive[rng.uniform(kTransitive.size())];
      out += plural ? v.plural : v.singular;
      out += ' ';
      noun_phrase(rng, rng.uniform(2) == 0, out);
      break;
    }
    default: {
      const Verb& v = kIntransitive[rng.uniform(kIntransitive.size())];
      out += plural ? v.plural : v.singular;
      out += ' ';
      out += pick(rng, kPrepositions);
      out += ' ';
      noun_phrase(rng, rng.uniform(2) == 0, out);
      break;
    }
  }
  out += '.';
  out[start] = static_cast<char>(out[start] - 'a' + 'A');  // every noun phrase starts with a lower-case word
}

void sentence_line(Rng& rng, std::string& out) {
  sentence(rng, out);
  if (rng.uniform(2) == 0) {
    out += ' ';
    sentence(rng, out);
  }
}

void sequence_line(Rng& rng, std::string& out) {
  const int length = uniform_int(rng, 3, 8);
  switch (rng.uniform(3)) {
    case 0: {
      int x = uniform_int(rng, 0, 90);
      out += "count";
      for (int i = 0; i < length; ++i) fmt::format_to(std::back_inserter(out), " {}", x++);
      break;
    }
    case 1: {
      int x = uniform_int(rng, length, 99);
      out += "down";
      for (int i = 0; i < length; ++i) fmt::format_to(std::back_inserter(out), " {}", x--);
      break;
    }
    default: {
      std::string word;
      for (int i = 0; i < length; ++i) word.push_back(static_cast<char>('a' + rng.uniform(26)));
      fmt::format_to(std::back_inserter(out), "copy {} {}", word, word);
      break;
    }
  }
}

}  // namespace

std::string generate_corpus(uint64_t seed, size_t min_bytes) {
  Rng rng(derive_seed(seed, 0xC0705));
  std::string out;
  out.reserve(min_bytes + 128);
  while (out.size() < min_bytes) {
    const uint64_t kind = rng.uniform(20);  // 7 sentences : 6 arithmetic : 4 brackets : 3 sequences
    if (kind < 7) sentence_line(rng, out);
    else if (kind < 13) arithmetic_line(rng, out);
    else if (kind < 17) bracket_line(rng, out);
    else sequence_line(rng, out);
    out.push_back('\n');
  }
  return out;
}

}  // namespace fp8train::train
