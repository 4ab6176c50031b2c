// The quantization kernels may encode FP8 with the hardware conversion (Encoder::Hardware) or with the
// software encoders the CPU reference uses (Encoder::Software). This test proves they are the same function:
// all 2^32 float32 inputs (finite, subnormal, ±0, ±Inf, every NaN), in both byte positions of the packed
// pair, for E4M3 and E5M2 (satfinite, NVIDIA NaN), and the INT8 round-to-nearest-even path against
// num::int8_encode_rne, and the fast E5M6 codec (e5m6_fast.h) against num::e5m6_encode / e5m6_decode.
// A control count (E4M3 bytes vs E5M2 bytes, which differ for most inputs) proves the loop really ran.
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.h"

namespace fp8train::gputest {
cudaError_t run_encoder_exhaustive(unsigned long long* counts, uint32_t* first);

TEST(EncoderExhaustive, HardwareFp8AndInt8EncodersEqualTheSoftwareEncodersOnAllFloat32Inputs) {
  DeviceArray<unsigned long long> counts(std::vector<unsigned long long>(9, 0));
  DeviceArray<uint32_t> first(std::vector<uint32_t>(9, 0xFFFFFFFFu));
  ASSERT_EQ(run_encoder_exhaustive(counts.get(), first.get()), cudaSuccess);
  const auto c = counts.download();
  const auto f = first.download();
  const char* names[8] = {"e4m3 low byte", "e4m3 high byte", "e5m2 low byte", "e5m2 high byte", "int8 low",
                          "int8 high",     "e5m6 encode",    "e5m6 decode"};
  EXPECT_GT(c[8], 1ull << 30) << "control count too small: the exhaustive loop did not run over all inputs";
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c[i], 0ull) << names[i] << ": " << c[i] << " mismatching inputs, first float bits 0x" << std::hex
                          << f[i];
}

}  // namespace fp8train::gputest
