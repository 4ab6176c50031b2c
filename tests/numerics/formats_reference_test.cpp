// A slow, obviously-correct reference encoder for E4M3, E5M2, E5M6 and BF16, and its agreement with the
// fast encoders of numerics/formats.h.
//
// The reference works from the definitions only, in exact integer arithmetic (no floating-point rounding
// anywhere on its path):
//   - a float32 is split into an exact pair (m, e) with |x| = m * 2^e;
//   - each target format is a table of every non-negative finite value in code order, built from the
//     format's definition (bias, mantissa bits, subnormals), plus one "beyond" entry: the value the code
//     after the largest finite one would have if the exponent range were unbounded (480 for E4M3, 2^16 for
//     E5M2 and E5M6, 2^128 for BF16). Overflow is then decided after rounding: |x| rounds to "beyond"
//     exactly when it would have rounded past the largest finite value;
//   - |x| is placed between its two neighbours by exact comparison (binary search over the table) and
//     rounded to the nearer one by comparing 2|x| with the exact sum of the neighbours; a tie goes to the
//     neighbour whose code is even (round half to even);
//   - then the saturation rule (satfinite: overflow and ±Inf -> ±max; nonsat: E4M3 -> NaN, others -> ±Inf),
//     the NaN rule (NVIDIA 0x7F, or ml_dtypes' sign-kept NaN) and the sign are applied.
// The tests compare it with the fast encoders on 10^7 random float32 patterns whose exponent field is drawn
// uniformly (so every binade, subnormals, Inf and NaN are hit), on every value of every table, every
// midpoint between neighbours and the floats just above and below each (both signs), and optionally
// (FP8TRAIN_LONG_TESTS=1) on all 2^32 float32 bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "numerics/formats.h"

using namespace fp8train::num;

namespace {

// ---- exact binary numbers ------------------------------------------------------------------------
// A non-negative number m * 2^e, exactly.
struct Exact {
  uint64_t m;
  int e;
};

int bit_length(uint64_t m) { return m == 0 ? 0 : 64 - __builtin_clzll(m); }

// Exact comparison: -1, 0 or 1.
int compare(Exact a, Exact b) {
  if (a.m == 0 || b.m == 0) return (a.m != 0) - (b.m != 0);
  const int top_a = a.e + bit_length(a.m), top_b = b.e + bit_length(b.m);
  if (top_a != top_b) return top_a < top_b ? -1 : 1;
  // Same leading-bit position: shifting the one with the larger exponent down to the smaller exponent
  // gives it the other's bit length (<= 64), so the integers compare exactly.
  uint64_t ma = a.m, mb = b.m;
  if (a.e > b.e) ma <<= (a.e - b.e);
  if (b.e > a.e) mb <<= (b.e - a.e);
  return ma < mb ? -1 : (ma > mb ? 1 : 0);
}

// Exact sum; `ok` is cleared if the aligned sum would not fit in 63 bits (never for adjacent table values).
Exact add(Exact a, Exact b, bool& ok) {
  if (a.m == 0) return b;
  if (b.m == 0) return a;
  const int e = std::min(a.e, b.e);
  const int shift_a = a.e - e, shift_b = b.e - e;
  if (bit_length(a.m) + shift_a > 62 || bit_length(b.m) + shift_b > 62) {
    ok = false;
    return {0, 0};
  }
  return {(a.m << shift_a) + (b.m << shift_b), e};
}

// |x| of a finite float32, exactly.
Exact float_magnitude(uint32_t bits) {
  const uint32_t biased_exp = (bits >> 23) & 0xFF, fraction = bits & 0x7FFFFF;
  if (biased_exp == 0) return {fraction, -149};           // subnormal: fraction * 2^-149
  return {fraction | 0x800000u, static_cast<int>(biased_exp) - 150};  // (2^23 + fraction) * 2^(E-127-23)
}

double to_double(Exact v) { return std::ldexp(static_cast<double>(v.m), v.e); }

// ---- target formats from their definitions -------------------------------------------------------
enum class Kind { E4M3, E5M2, E5M6, BF16 };

struct RefFormat {
  Kind kind;
  const char* name;
  int mantissa_bits;
  int bias;
  uint32_t max_code;   // largest finite magnitude code
  uint32_t sign_bit;   // the code's sign bit
  std::vector<Exact> values;     // values[c] = value of magnitude code c, c = 0 .. max_code + 1 ("beyond")
  std::vector<Exact> pair_sums;  // pair_sums[c] = values[c] + values[c + 1]
  bool sums_exact = true;        // every pair sum fitted in 63 bits (checked by a test)
};

// Value of magnitude code c as the IEEE-style definition gives it, with an unbounded exponent field.
Exact code_value(uint32_t c, int mantissa_bits, int bias) {
  const uint32_t exp_field = c >> mantissa_bits;
  const uint32_t mantissa = c & ((1u << mantissa_bits) - 1u);
  if (exp_field == 0) return {mantissa, 1 - bias - mantissa_bits};  // subnormal: 0.mantissa * 2^(1-bias)
  return {(1u << mantissa_bits) | mantissa, static_cast<int>(exp_field) - bias - mantissa_bits};
}

RefFormat make_format(Kind kind, const char* name, int mantissa_bits, int bias, uint32_t max_code,
                      uint32_t sign_bit) {
  RefFormat f{kind, name, mantissa_bits, bias, max_code, sign_bit, {}, {}, true};
  for (uint32_t c = 0; c <= max_code + 1; ++c) f.values.push_back(code_value(c, mantissa_bits, bias));
  for (uint32_t c = 0; c <= max_code; ++c) f.pair_sums.push_back(add(f.values[c], f.values[c + 1], f.sums_exact));
  return f;
}

const RefFormat& ref_e4m3() {
  static const RefFormat f = make_format(Kind::E4M3, "e4m3", 3, 7, 0x7E, 0x80);
  return f;
}
const RefFormat& ref_e5m2() {
  static const RefFormat f = make_format(Kind::E5M2, "e5m2", 2, 15, 0x7B, 0x80);
  return f;
}
const RefFormat& ref_e5m6() {
  static const RefFormat f = make_format(Kind::E5M6, "e5m6", 6, 15, 0x7BF, 0x800);
  return f;
}
const RefFormat& ref_bf16() {
  static const RefFormat f = make_format(Kind::BF16, "bf16", 7, 127, 0x7F7F, 0x8000);
  return f;
}

// Magnitude code nearest to |x| (finite), ties to the even code; max_code + 1 means "rounds past the
// largest finite value" (overflow).
uint32_t ref_round_magnitude(const RefFormat& f, Exact ax) {
  const uint32_t beyond = f.max_code + 1;
  if (compare(ax, f.values[beyond]) >= 0) return beyond;
  // The last table value <= |x| (values[0] = 0 <= |x|, so there is one).
  const auto above = std::upper_bound(f.values.begin(), f.values.end(), ax,
                                      [](const Exact& x, const Exact& v) { return compare(x, v) < 0; });
  const uint32_t below = static_cast<uint32_t>(above - f.values.begin()) - 1;
  if (compare(ax, f.values[below]) == 0) return below;
  // |x| lies strictly between values[below] and values[below + 1]: compare 2|x| with their sum.
  const int side = compare({ax.m, ax.e + 1}, f.pair_sums[below]);
  if (side < 0) return below;
  if (side > 0) return below + 1;
  return (below & 1u) == 0 ? below : below + 1;
}

// The rounded magnitude of a non-NaN input (max_code + 1 for ±Inf: "past the largest finite value").
// It does not depend on the modes, so the comparison loop computes it once per format and input.
uint32_t ref_magnitude(const RefFormat& f, uint32_t bits) {
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) return f.max_code + 1;  // Inf; for NaN the magnitude is never used
  return ref_round_magnitude(f, float_magnitude(bits));
}

// The full reference encoder, given the input and its ref_magnitude. For BF16 the NaN result is not
// unique (payload kept), so the caller checks NaN inputs of BF16 by property; this returns 0xFFFFFFFF.
uint32_t ref_encode(const RefFormat& f, uint32_t bits, uint32_t mag, Saturation sat, NanMode nan) {
  const bool negative = (bits >> 31) != 0;
  const uint32_t sign = negative ? f.sign_bit : 0u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  const bool is_nan = abs_bits > 0x7F800000u;
  switch (f.kind) {
    case Kind::E4M3:
      if (is_nan) return nan == NanMode::Nvidia ? 0x7Fu : (0x7Fu | sign);
      break;
    case Kind::E5M2:
      if (is_nan) return nan == NanMode::Nvidia ? 0x7Fu : (0x7Eu | sign);
      break;
    case Kind::E5M6:
      if (is_nan) return 0x7E0u | sign;
      break;
    case Kind::BF16:
      if (is_nan) return 0xFFFFFFFFu;
      break;
  }
  if (mag <= f.max_code) return sign | mag;
  // Overflow (or Inf).
  switch (f.kind) {
    case Kind::BF16:
      return sign | 0x7F80u;  // plain IEEE RNE: overflow is Inf
    case Kind::E4M3:
      if (sat == Saturation::SatFinite) return sign | f.max_code;
      return nan == NanMode::Nvidia ? 0x7Fu : (0x7Fu | sign);  // e4m3fn has no Inf: NaN
    case Kind::E5M2:
      return sign | (sat == Saturation::SatFinite ? f.max_code : 0x7Cu);
    case Kind::E5M6:
      return sign | (sat == Saturation::SatFinite ? f.max_code : 0x7C0u);
  }
  return 0;
}

uint32_t ref_encode(const RefFormat& f, uint32_t bits, Saturation sat, NanMode nan) {
  return ref_encode(f, bits, ref_magnitude(f, bits), sat, nan);
}

// ---- comparison of reference and fast encoders on one input --------------------------------------
struct Mismatches {
  uint64_t count = 0;
  std::vector<std::string> examples;  // the first few, for the failure message
  void add(const char* what, uint32_t bits, uint32_t want, uint32_t got) {
    ++count;
    if (examples.size() < 12) {
      char line[160];
      std::snprintf(line, sizeof line, "%s: float bits 0x%08X (%.9g): reference 0x%X, fast 0x%X", what, bits,
                    static_cast<double>(bits_float(bits)), want, got);
      examples.emplace_back(line);
    }
  }
  void merge(const Mismatches& o) {
    count += o.count;
    for (const auto& e : o.examples)
      if (examples.size() < 12) examples.push_back(e);
  }
};

constexpr Saturation kSatModes[] = {Saturation::SatFinite, Saturation::NonSat};
constexpr NanMode kNanModes[] = {NanMode::Nvidia, NanMode::MlDtypes};

void check_one(uint32_t bits, Mismatches& out) {
  const float x = bits_float(bits);
  const RefFormat &e4m3 = ref_e4m3(), &e5m2 = ref_e5m2(), &e5m6 = ref_e5m6(), &bf16 = ref_bf16();
  const uint32_t mag4 = ref_magnitude(e4m3, bits), mag5 = ref_magnitude(e5m2, bits);
  const uint32_t mag6 = ref_magnitude(e5m6, bits), mag16 = ref_magnitude(bf16, bits);
  for (Saturation sat : kSatModes) {
    for (NanMode nan : kNanModes) {
      const uint32_t want4 = ref_encode(e4m3, bits, mag4, sat, nan), got4 = e4m3_encode(x, sat, nan);
      if (want4 != got4) out.add(sat == Saturation::SatFinite ? "e4m3 satfinite" : "e4m3 nonsat", bits, want4, got4);
      const uint32_t want5 = ref_encode(e5m2, bits, mag5, sat, nan), got5 = e5m2_encode(x, sat, nan);
      if (want5 != got5) out.add(sat == Saturation::SatFinite ? "e5m2 satfinite" : "e5m2 nonsat", bits, want5, got5);
    }
    const uint32_t want6 = ref_encode(e5m6, bits, mag6, sat, NanMode::Nvidia), got6 = e5m6_encode(x, sat);
    if (want6 != got6) out.add(sat == Saturation::SatFinite ? "e5m6 satfinite" : "e5m6 nonsat", bits, want6, got6);
  }
  const uint32_t got_bf16 = bf16_encode(x);
  const uint32_t want_bf16 = ref_encode(bf16, bits, mag16, Saturation::NonSat, NanMode::Nvidia);
  if (want_bf16 == 0xFFFFFFFFu) {
    // NaN: the result must be a NaN with the input's sign and its top payload bits, quiet bit set.
    const bool ok = (got_bf16 & 0x7FFFu) > 0x7F80u && (got_bf16 & ~0x40u) == ((bits >> 16) & ~0x40u) &&
                    (got_bf16 & 0x40u) != 0;
    if (!ok) out.add("bf16 NaN", bits, (bits >> 16) | 0x40u, got_bf16);
  } else if (want_bf16 != got_bf16) {
    out.add("bf16", bits, want_bf16, got_bf16);
  }
}

// SplitMix64: a fixed, well-mixed function of the sample index, so the sample set is the same on every run
// and every thread count.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Runs check_one over [0, count) inputs produced by `input(i)`, in parallel, and reports mismatches.
template <typename Input>
Mismatches check_range(uint64_t count, Input input) {
  Mismatches total;
#pragma omp parallel
  {
    Mismatches local;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) check_one(input(static_cast<uint64_t>(i)), local);
#pragma omp critical
    total.merge(local);
  }
  return total;
}

std::string describe(const Mismatches& m) {
  std::string s = std::to_string(m.count) + " mismatches";
  for (const auto& e : m.examples) {
    s += "\n  ";
    s += e;
  }
  return s;
}

void push_float_and_neighbours(std::vector<uint32_t>& out, double value) {
  if (!(value <= FLT_MAX)) {  // the BF16 "beyond" value 2^128: its float neighbours are FLT_MAX and Inf
    out.push_back(float_bits(FLT_MAX));
    out.push_back(0x7F800000u);
    return;
  }
  const float f = static_cast<float>(value);
  if (static_cast<double>(f) != value) return;  // not a float32: nothing sits exactly on it
  for (float g : {f, std::nextafter(f, INFINITY), std::nextafter(f, -INFINITY)}) {
    out.push_back(float_bits(g));
    out.push_back(float_bits(-g));
  }
}

// Every table value, every midpoint between neighbours (both include the overflow thresholds: the midpoint
// between max and "beyond", and "beyond" itself), each with its float neighbours, both signs.
std::vector<uint32_t> boundary_inputs() {
  std::vector<uint32_t> inputs;
  for (const RefFormat* f : {&ref_e4m3(), &ref_e5m2(), &ref_e5m6(), &ref_bf16()}) {
    for (const Exact& v : f->values) push_float_and_neighbours(inputs, to_double(v));
    for (const Exact& s : f->pair_sums) push_float_and_neighbours(inputs, to_double({s.m, s.e - 1}));
  }
  // IEEE specials and extremes of float32.
  for (uint32_t b : {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u,
                     0x7FBFFFFFu, 0x7FC00000u, 0x7FFFFFFFu}) {
    inputs.push_back(b);
    inputs.push_back(b | 0x80000000u);
  }
  return inputs;
}

}  // namespace

// The reference itself against hand-checked values of the spec table, so a shared mistake of reference and
// fast encoder cannot hide.
TEST(FormatsReference, ReferenceMatchesSpecTable) {
  auto enc = [](const RefFormat& f, float x, Saturation sat = Saturation::SatFinite,
                NanMode nan = NanMode::Nvidia) { return ref_encode(f, float_bits(x), sat, nan); };
  EXPECT_EQ(enc(ref_e4m3(), 448.0f), 0x7Eu);
  EXPECT_EQ(enc(ref_e4m3(), 464.0f, Saturation::NonSat), 0x7Eu);  // tie 448/480 to even: not an overflow
  EXPECT_EQ(enc(ref_e4m3(), 465.0f, Saturation::NonSat), 0x7Fu);
  EXPECT_EQ(enc(ref_e4m3(), -465.0f, Saturation::NonSat, NanMode::MlDtypes), 0xFFu);
  EXPECT_EQ(enc(ref_e4m3(), 465.0f, Saturation::SatFinite), 0x7Eu);
  EXPECT_EQ(enc(ref_e4m3(), std::ldexp(1.0f, -10)), 0x00u);
  EXPECT_EQ(enc(ref_e4m3(), std::ldexp(1.0f + std::ldexp(1.0f, -13), -10)), 0x01u);
  EXPECT_EQ(enc(ref_e4m3(), 1.0625f), 0x38u);
  EXPECT_EQ(enc(ref_e4m3(), 1.1875f), 0x3Au);
  EXPECT_EQ(enc(ref_e4m3(), -0.0f), 0x80u);
  EXPECT_EQ(enc(ref_e5m2(), 57344.0f), 0x7Bu);
  EXPECT_EQ(enc(ref_e5m2(), 61440.0f, Saturation::SatFinite), 0x7Bu);
  EXPECT_EQ(enc(ref_e5m2(), 61440.0f, Saturation::NonSat), 0x7Cu);
  EXPECT_EQ(enc(ref_e5m2(), 61439.0f, Saturation::NonSat), 0x7Bu);
  EXPECT_EQ(enc(ref_e5m6(), 65024.0f), 0x7BFu);
  EXPECT_EQ(enc(ref_e5m6(), 65280.0f, Saturation::NonSat), 0x7C0u);
  EXPECT_EQ(enc(ref_e5m6(), 65279.0f, Saturation::NonSat), 0x7BFu);
  EXPECT_EQ(enc(ref_bf16(), 1.0f + std::ldexp(1.0f, -8)), 0x3F80u);
  EXPECT_EQ(enc(ref_bf16(), 1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82u);
  EXPECT_EQ(enc(ref_bf16(), FLT_MAX), 0x7F80u);  // above the midpoint (2 - 2^-8) * 2^127: rounds to Inf
  EXPECT_EQ(enc(ref_bf16(), std::ldexp(255.0f, 120)), 0x7F7Fu);  // 1.9921875 * 2^127 = bf16 max
  EXPECT_EQ(enc(ref_bf16(), std::ldexp(1.0f, -149)), 0x0000u);   // far below bf16's 2^-133
}

// The reference tables are well formed (strictly increasing, exact midpoints), and the library's decoders
// give exactly their values.
TEST(FormatsReference, DecodersMatchDefinitions) {
  for (const RefFormat* f : {&ref_e4m3(), &ref_e5m2(), &ref_e5m6(), &ref_bf16()}) {
    EXPECT_TRUE(f->sums_exact) << f->name;
    for (size_t c = 1; c < f->values.size(); ++c) EXPECT_LT(compare(f->values[c - 1], f->values[c]), 0) << f->name;
  }
  for (uint32_t c = 0; c <= ref_e4m3().max_code; ++c) {
    EXPECT_EQ(static_cast<double>(e4m3_decode(static_cast<uint8_t>(c))), to_double(ref_e4m3().values[c])) << c;
    EXPECT_EQ(static_cast<double>(e4m3_decode(static_cast<uint8_t>(c | 0x80))), -to_double(ref_e4m3().values[c]));
  }
  for (uint32_t c = 0; c <= ref_e5m2().max_code; ++c) {
    EXPECT_EQ(static_cast<double>(e5m2_decode(static_cast<uint8_t>(c))), to_double(ref_e5m2().values[c])) << c;
    EXPECT_EQ(static_cast<double>(e5m2_decode(static_cast<uint8_t>(c | 0x80))), -to_double(ref_e5m2().values[c]));
  }
  for (uint32_t c = 0; c <= ref_e5m6().max_code; ++c) {
    EXPECT_EQ(static_cast<double>(e5m6_decode(static_cast<uint16_t>(c))), to_double(ref_e5m6().values[c])) << c;
    EXPECT_EQ(static_cast<double>(e5m6_decode(static_cast<uint16_t>(c | 0x800))), -to_double(ref_e5m6().values[c]));
  }
  for (uint32_t c = 0; c <= ref_bf16().max_code; ++c) {
    EXPECT_EQ(static_cast<double>(bf16_decode(static_cast<uint16_t>(c))), to_double(ref_bf16().values[c])) << c;
  }
  // The "beyond" entries are the overflow thresholds of the definitions.
  EXPECT_EQ(to_double(ref_e4m3().values.back()), 480.0);
  EXPECT_EQ(to_double(ref_e5m2().values.back()), 65536.0);
  EXPECT_EQ(to_double(ref_e5m6().values.back()), 65536.0);
  EXPECT_EQ(to_double(ref_bf16().values.back()), std::ldexp(1.0, 128));
}

// 10^7 random float32 patterns: exponent field uniform over 0..255 (every binade of float32, subnormals,
// Inf/NaN), then fraction and sign uniform.
TEST(FormatsReference, RandomFloatsAgree) {
  constexpr uint64_t kSamples = 10'000'000;
  constexpr uint64_t kSeed = 0x5EED'F8F8'0000'0001ull;
  const auto start = std::chrono::steady_clock::now();
  const Mismatches m = check_range(kSamples, [](uint64_t i) {
    const uint64_t r = splitmix64(kSeed ^ (i * 0xD1B54A32D192ED03ull));
    const uint32_t exponent = static_cast<uint32_t>(r & 0xFF);
    const uint32_t fraction = static_cast<uint32_t>((r >> 8) & 0x7FFFFF);
    const uint32_t sign = static_cast<uint32_t>((r >> 40) & 1);
    return (sign << 31) | (exponent << 23) | fraction;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("samples", std::to_string(kSamples));
  std::printf("reference encoder: %llu random float32 x 4 formats (11 encoder/mode pairs) in %.2f s\n",
              static_cast<unsigned long long>(kSamples), seconds);
  EXPECT_EQ(m.count, 0u) << describe(m);
}

TEST(FormatsReference, BoundaryNeighboursAgree) {
  const std::vector<uint32_t> inputs = boundary_inputs();
  // 4 tables: E4M3 128 entries, E5M2 125, E5M6 1985, BF16 32641, with their midpoints, x3 neighbours x2 signs.
  EXPECT_GT(inputs.size(), 300'000u);
  const Mismatches m = check_range(inputs.size(), [&](uint64_t i) { return inputs[i]; });
  std::printf("reference encoder: %zu boundary inputs\n", inputs.size());
  EXPECT_EQ(m.count, 0u) << describe(m);
}

// All 2^32 float32 bit patterns through all four encoders (every mode): 482 s measured on the shared 2-core
// development machine (2 threads), so only on request:
//   FP8TRAIN_LONG_TESTS=1 build/tests/test_numerics --gtest_filter=FormatsReference.AllFloat32Long
TEST(FormatsReference, AllFloat32Long) {
  const char* flag = std::getenv("FP8TRAIN_LONG_TESTS");
  if (flag == nullptr || std::string(flag) != "1") {
    GTEST_SKIP() << "exhaustive 2^32 check runs only with FP8TRAIN_LONG_TESTS=1";
  }
  const auto start = std::chrono::steady_clock::now();
  const Mismatches m = check_range(uint64_t{1} << 32, [](uint64_t i) { return static_cast<uint32_t>(i); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("reference encoder: all 2^32 float32 inputs in %.1f s\n", seconds);
  EXPECT_EQ(m.count, 0u) << describe(m);
}

// The branch-free encoders the CPU quantizers use (e4m3_encode_fast, e5m2_encode_fast) against the reference
// encoders, over `count` bit patterns; returns the first mismatching pattern, or nullopt.
namespace {
template <class Pattern>
uint64_t fast_encoder_mismatches(uint64_t count, Pattern&& pattern, uint32_t* first) {
  uint64_t bad = 0;
  uint32_t first_bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad)
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
    const uint32_t bits = pattern(static_cast<uint64_t>(i));
    float x;
    std::memcpy(&x, &bits, 4);
    if (e4m3_encode_fast(x) != e4m3_encode(x) || e5m2_encode_fast(x) != e5m2_encode(x)) {
      ++bad;
#pragma omp critical
      first_bad = bits;
    }
  }
  *first = first_bad;
  return bad;
}
}  // namespace

// Every value of the top 20 bits (sign, exponent and the fraction bits that decide E4M3's and E5M2's rounding,
// subnormals included) with 16 patterns of the low 12 bits (which only act as the sticky bit): 2^24 inputs.
TEST(FormatsReference, FastEncodersAgree) {
  constexpr uint32_t kLow[16] = {0x000, 0x001, 0x002, 0x7FF, 0x800, 0x801, 0xFFF, 0xFFE,
                                 0x123, 0x456, 0x789, 0xABC, 0xDEF, 0x3C3, 0x5A5, 0x0F0};
  uint32_t first = 0;
  const uint64_t bad = fast_encoder_mismatches(
      uint64_t{1} << 24, [&](uint64_t i) { return static_cast<uint32_t>(((i >> 4) << 12) | kLow[i & 15]); }, &first);
  EXPECT_EQ(bad, 0u) << "first mismatch at float bits 0x" << std::hex << first;
  // the edges spelled out
  for (float x : {0.0f, -0.0f, 448.0f, 464.0f, 464.01f, 480.0f, 1e30f, -INFINITY, INFINITY, std::ldexp(1.0f, -10),
                  std::ldexp(3.0f, -11), std::ldexp(1.0f, -17), 57344.0f, 61440.0f, 61439.0f, NAN, -NAN}) {
    EXPECT_EQ(e4m3_encode_fast(x), e4m3_encode(x)) << x;
    EXPECT_EQ(e5m2_encode_fast(x), e5m2_encode(x)) << x;
  }
}

//   FP8TRAIN_LONG_TESTS=1 build/tests/test_numerics --gtest_filter=FormatsReference.FastEncodersAllFloat32Long
TEST(FormatsReference, FastEncodersAllFloat32Long) {
  const char* flag = std::getenv("FP8TRAIN_LONG_TESTS");
  if (flag == nullptr || std::string(flag) != "1")
    GTEST_SKIP() << "exhaustive 2^32 check runs only with FP8TRAIN_LONG_TESTS=1";
  uint32_t first = 0;
  const uint64_t bad = fast_encoder_mismatches(
      uint64_t{1} << 32, [](uint64_t i) { return static_cast<uint32_t>(i); }, &first);
  EXPECT_EQ(bad, 0u) << "first mismatch at float bits 0x" << std::hex << first;
}
