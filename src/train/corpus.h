// The embedded default corpus: procedurally generated text with structure a small model can learn, so
// `fp8train train` needs no data file. One item per line ('\n'), four kinds mixed at random:
//   arithmetic  "47+38=85", "91-17=74", "7*8=56", "(3+4)*5=35"   — results always correct
//   brackets    "([{}]<>)"                                        — balanced, nested up to depth 6
//   sentences   "The small cats that see a dog sleep near the old farmer."
//               — a small grammar with subject–verb agreement carried across a relative clause
//   sequences   "count 14 15 16 17", "down 9 8 7 6", "copy qzkv qzkv" — counting and copying
// The text is plain ASCII (valid UTF-8) and a pure function of (seed, size): the same bytes on every
// machine, since it uses only the integer Rng.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fp8train::train {

// At least `min_bytes` bytes of whole lines (it stops after the line that crosses min_bytes).
std::string generate_corpus(uint64_t seed, size_t min_bytes);

}  // namespace fp8train::train
