// The CUDA kernels' fast E5M6 codec (src/ops/cuda/e5m6_fast.h, FP8T_HD so the host can run it) against the
// reference codec of numerics/formats.h, on the CPU so CI checks it without a GPU: every 61st float32 bit
// pattern (70 million, all exponents and both signs), the range predicate's edges, and the 12-bit packer
// against the masking one.
// The GPU test (tests/cuda/encoder_kernels.cu) checks all 2^32 inputs on the device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "numerics/formats.h"
#include "ops/cuda/e5m6_fast.h"

using namespace fp8train;
namespace d = fp8train::ops::cuda::detail;

namespace {
float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint64_t check(uint32_t u, int64_t& in_unsat) {
  const float x = from_bits(u);
  if (!d::e5m6_unsaturated_range(x)) return 0;
  ++in_unsat;
  return d::e5m6_encode_unsaturated(x) != num::e5m6_encode(x);
}
}  // namespace

TEST(E5M6Fast, EncoderEqualsTheReferenceInItsRange) {
  int64_t in_unsat = 0;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 61) bad += check(static_cast<uint32_t>(i), in_unsat);
  // Edges of the ranges: 2^-14 (smallest E5M6 normal), 65024 (largest finite), their neighbours, Inf, NaN.
  for (uint32_t edge : {0x38800000u, 0x477E0000u, 0x477F0000u, 0x477FFFFFu, 0x7F800000u, 0x7FC00000u, 0u})
    for (uint32_t sign : {0u, 0x80000000u})
      for (int delta = -2; delta <= 2; ++delta) bad += check((edge + delta) | sign, in_unsat);
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(in_unsat, 8000000);  // the sweep really exercised the kernel's fast path
  EXPECT_FALSE(d::e5m6_unsaturated_range(from_bits(0x477E0001u)));  // just above 65024: may saturate
  EXPECT_TRUE(d::e5m6_unsaturated_range(65024.0f));
  EXPECT_FALSE(d::e5m6_unsaturated_range(0.0f));
}

TEST(E5M6Fast, DecoderEqualsTheReferenceOnEveryCode) {
  for (uint32_t c = 0; c < 4096; ++c) {
    const float got = d::e5m6_decode_fast(static_cast<uint16_t>(c)), want = num::e5m6_decode(static_cast<uint16_t>(c));
    EXPECT_EQ(num::float_bits(got), num::float_bits(want)) << c;
  }
}

TEST(E5M6Fast, TwelveBitPackerEqualsTheReferencePacker) {
  uint64_t state = 12345;
  for (int trial = 0; trial < 20000; ++trial) {
    uint16_t codes[8];
    uint32_t codes32[8];
    for (int i = 0; i < 8; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      codes32[i] = codes[i] = static_cast<uint16_t>((state >> 40) & 0xFFF);
    }
    uint32_t want[3], got[3];
    num::e5m6_pack8(codes, want);
    num::e5m6_pack8_12bit(codes32, got);
    ASSERT_EQ(got[0], want[0]) << trial;
    ASSERT_EQ(got[1], want[1]) << trial;
    ASSERT_EQ(got[2], want[2]) << trial;
  }
}
