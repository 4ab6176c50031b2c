// Quantization: granularities and their scale grids, the exact float32 arithmetic of quant.h for every
// format, ragged edge blocks, zero blocks, power-of-two scales, NaN/Inf propagation, E5M6 packing and
// bytes(), INT8 stochastic rounding (determinism, unbiasedness), BF16, transpose, and bad input.
//   x: [rows, cols] float32 row-major; scales: [ceil(rows/br), ceil(cols/bc)].
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "quant/quant.h"
#include "../common/random_data.h"

using namespace fp8train;
using namespace fp8train::quant;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using fp8train::test_data::randn;

QuantSpec cfg(Format f, Granularity g, ScaleMode m = ScaleMode::Amax) {
  QuantSpec c;
  c.format = f;
  c.granularity = g;
  c.scale_mode = m;
  return c;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// The spec of quant.h step 1–3, written out independently for one block.
struct Expected {
  float scale, inverse;
};
Expected expected_scale(float amax, float fmax, ScaleMode mode) {
  const float eff = std::max(amax, std::ldexp(1.0f, -100));
  if (mode == ScaleMode::Amax) return {eff / fmax, fmax / eff};
  const int k = static_cast<int>(std::ceil(std::log2(static_cast<double>(eff / fmax))));
  return {std::ldexp(1.0f, k), std::ldexp(1.0f, -k)};
}

const Format kScaledFormats[] = {Format::E4M3, Format::E5M2, Format::E5M6, Format::INT8};

}  // namespace

TEST(QuantGranularity, ScaleGridsAndNames) {
  EXPECT_EQ(Granularity::tile_1x128().scale_rows(5), 5);
  EXPECT_EQ(Granularity::tile_1x128().scale_cols(300), 3);
  EXPECT_EQ(Granularity::tile_128x1().scale_rows(300), 3);
  EXPECT_EQ(Granularity::tile_128x1().scale_cols(7), 7);
  EXPECT_EQ(Granularity::block_128x128().scale_rows(129), 2);
  EXPECT_EQ(Granularity::block_128x128().scale_cols(128), 1);
  EXPECT_EQ(Granularity::tensor().scale_rows(1000), 1);
  EXPECT_EQ(Granularity::row_tile(64).name(), "1x64");
  EXPECT_EQ(Granularity::col_tile(32).name(), "32x1");
  EXPECT_EQ(Granularity::block(32).name(), "32x32");
  EXPECT_EQ(Granularity::tensor().name(), "tensor");
  EXPECT_EQ(Granularity::tile_1x128().transposed(), Granularity::tile_128x1());
  EXPECT_EQ(parse_granularity("1x128"), Granularity::tile_1x128());
  EXPECT_EQ(parse_granularity("128X128"), Granularity::block_128x128());
  EXPECT_EQ(parse_granularity("tensor"), Granularity::tensor());
  for (const char* bad : {"", "1x", "x128", "ax2", "0x128", "1x-4", "1x128x1", "per-row"})
    EXPECT_THROW(parse_granularity(bad), Error) << bad;
}

TEST(QuantFormats, NamesBytesAndParsing) {
  for (Format f : {Format::E4M3, Format::E5M2, Format::E5M6, Format::INT8, Format::BF16})
    EXPECT_EQ(parse_format(format_name(f)), f);
  EXPECT_EQ(parse_format("E4M3"), Format::E4M3);
  EXPECT_THROW(parse_format("fp8"), Error);
  EXPECT_THROW(parse_format("e4m3fnuz"), Error);
  EXPECT_EQ(code_bytes(Format::E4M3, 10), 10u);
  EXPECT_EQ(code_bytes(Format::BF16, 10), 20u);
  EXPECT_EQ(code_bytes(Format::E5M6, 16), 24u);
  EXPECT_EQ(code_bytes(Format::E5M6, 17), 36u);
  EXPECT_EQ(format_max(Format::E4M3), 448.0f);
  EXPECT_EQ(format_max(Format::E5M6), 65024.0f);
  EXPECT_EQ(format_max(Format::INT8), 127.0f);
}

TEST(QuantArithmetic, EveryFormatFollowsTheSpecBitForBit) {
  const int64_t rows = 7, cols = 300;
  std::vector<float> x = randn(rows * cols, 1, 3.0f);
  for (int64_t i = 0; i < rows * cols; i += 17) x[static_cast<size_t>(i)] *= 1000.0f;  // wide range per tile
  for (Format f : kScaledFormats) {
    for (ScaleMode mode : {ScaleMode::Amax, ScaleMode::PowerOfTwo}) {
      const QTensor q = quantize(x, rows, cols, cfg(f, Granularity::tile_1x128(), mode));
      ASSERT_EQ(q.rowwise.scales.numel(), rows * 3);
      EXPECT_EQ(q.pow2_scales, mode == ScaleMode::PowerOfTwo);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t sc = 0; sc < 3; ++sc) {
          float amax = 0.0f;
          for (int64_t c = sc * 128; c < std::min(cols, sc * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
          const Expected e = expected_scale(amax, format_max(f), mode);
          ASSERT_EQ(bits(q.scale_ptr()[static_cast<size_t>(r * 3 + sc)]), bits(e.scale));
          for (int64_t c = sc * 128; c < std::min(cols, sc * 128 + 128); ++c) {
            const float v = x[static_cast<size_t>(r * cols + c)] * e.inverse;
            ASSERT_EQ(q.code_at(r, c), encode(f, v)) << format_name(f) << " " << r << "," << c;
          }
        }
      // Dequantized values are code * scale and lie within the format's relative precision.
      const std::vector<float> back = dequantize(q);
      const double rel = f == Format::E4M3 ? 0x1p-4 : f == Format::E5M2 ? 0x1p-3 : f == Format::E5M6 ? 0x1p-7 : 0.0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          ASSERT_EQ(bits(back[i]), bits(q.decoded_at(r, c) * q.scale_of(r, c)));
          if (f == Format::INT8) {
            EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * q.scale_of(r, c) * 1.0001f);
          } else if (std::fabs(x[i]) > 1e-2f * q.scale_of(r, c) * format_max(f)) {
            EXPECT_LE(std::fabs(back[i] - x[i]), rel * std::fabs(x[i]) * 1.0001) << format_name(f);
          }
        }
    }
  }
}

TEST(QuantArithmetic, PowerOfTwoScaleIsTheSmallestThatAvoidsOverflow) {
  const std::vector<float> x = randn(64 * 512, 2, 50.0f);
  for (Format f : kScaledFormats) {
    const QTensor q = quantize(x, 64, 512, cfg(f, Granularity::block(32), ScaleMode::PowerOfTwo));
    for (int64_t br = 0; br < 2; ++br)
      for (int64_t bc = 0; bc < 16; ++bc) {
        float amax = 0.0f;
        for (int64_t r = br * 32; r < br * 32 + 32; ++r)
          for (int64_t c = bc * 32; c < bc * 32 + 32; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * 512 + c)]));
        const float s = q.scale_ptr()[static_cast<size_t>(br * 16 + bc)];
        int e;
        EXPECT_EQ(std::frexp(s, &e), 0.5f) << "not a power of two: " << s;
        EXPECT_LE(amax, s * format_max(f));
        EXPECT_GT(amax, 0.5f * s * format_max(f));
      }
  }
}

TEST(QuantShapes, RaggedEdgeBlocksUseOnlyValidElements) {
  const int64_t rows = 130, cols = 300;  // 128x128 blocks: a 2x3 grid with ragged last row/column
  std::vector<float> x(static_cast<size_t>(rows * cols), 1.0f);
  x[static_cast<size_t>(129 * cols + 299)] = 7.0f;  // the only value of block (1, 2) above 1
  x[static_cast<size_t>(5 * cols + 260)] = 3.0f;    // block (0, 2)
  const QTensor q = quantize(x, rows, cols, cfg(Format::E4M3, Granularity::block_128x128()));
  ASSERT_EQ(q.scale_rows(), 2);
  ASSERT_EQ(q.scale_cols(), 3);
  EXPECT_EQ(q.rowwise.codes.nbytes(), static_cast<size_t>(rows * cols));  // codes beyond the edge are not stored
  EXPECT_EQ(q.scale_ptr()[5], 7.0f / 448.0f);
  EXPECT_EQ(q.scale_ptr()[2], 3.0f / 448.0f);
  EXPECT_EQ(q.scale_ptr()[0], 1.0f / 448.0f);
  EXPECT_EQ(q.scale_ptr()[3], 1.0f / 448.0f);
  EXPECT_EQ(q.value_at(129, 299), 7.0f);
  EXPECT_EQ(q.bytes(), static_cast<size_t>(rows * cols) + 6 * sizeof(float));
  // 1-row and 1-column tensors, and an empty one.
  const QTensor one = quantize(randn(5, 3), 1, 5, cfg(Format::E4M3, Granularity::block_128x128()));
  EXPECT_EQ(one.rowwise.scales.numel(), 1);
  const QTensor empty = quantize(std::vector<float>{}, 0, 5, cfg(Format::E4M3, Granularity::tile_1x128()));
  EXPECT_EQ(empty.rowwise.codes.nbytes(), 0u);
  EXPECT_EQ(empty.rowwise.scales.numel(), 0);
}

TEST(QuantShapes, ZeroBlocksGetAFinitePositiveScaleAndZeroCodes) {
  std::vector<float> x = randn(4 * 256, 3);
  for (int64_t c = 128; c < 256; ++c) x[static_cast<size_t>(2 * 256 + c)] = 0.0f;  // row 2, second tile
  for (Format f : {Format::E4M3, Format::E5M2, Format::E5M6, Format::INT8}) {
    for (ScaleMode mode : {ScaleMode::Amax, ScaleMode::PowerOfTwo}) {
      const QTensor q = quantize(x, 4, 256, cfg(f, Granularity::tile_1x128(), mode));
      const float s = q.scale_ptr()[2 * 2 + 1];
      EXPECT_TRUE(std::isfinite(s) && s > 0.0f) << s;
      EXPECT_EQ(s, expected_scale(0.0f, format_max(f), mode).scale);
      for (int64_t c = 128; c < 256; ++c) {
        EXPECT_EQ(q.code_at(2, c), 0u);
        EXPECT_EQ(q.value_at(2, c), 0.0f);
      }
    }
  }
  const QTensor all_zero = quantize(std::vector<float>(64, 0.0f), 8, 8, cfg(Format::E4M3, Granularity::tensor()));
  EXPECT_EQ(all_zero.scale_ptr()[0], kMinAmax / 448.0f);
}

TEST(QuantShapes, NanAndInfPropagateToTheirBlockOnly) {
  std::vector<float> x = randn(2 * 256, 4);
  x[10] = kNaN;          // row 0, tile 0
  x[256 + 200] = -kInf;  // row 1, tile 1
  for (ScaleMode mode : {ScaleMode::Amax, ScaleMode::PowerOfTwo}) {
    const QTensor q = quantize(x, 2, 256, cfg(Format::E4M3, Granularity::tile_1x128(), mode));
    EXPECT_TRUE(std::isnan(q.scale_ptr()[0]));
    for (int64_t c = 0; c < 128; ++c) EXPECT_EQ(q.code_at(0, c), 0x7Fu);  // E4M3 NaN code
    const std::vector<float> back = dequantize(q);
    for (int64_t c = 0; c < 128; ++c) EXPECT_TRUE(std::isnan(back[static_cast<size_t>(c)]));
    for (int64_t c = 384; c < 512; ++c) EXPECT_TRUE(std::isnan(back[static_cast<size_t>(c)])) << c;  // the Inf tile
    for (int64_t c = 128; c < 384; ++c) EXPECT_TRUE(std::isfinite(back[static_cast<size_t>(c)])) << c;
  }
  EXPECT_TRUE(std::isnan(amax_of(x.data(), 20)));
  const float with_nan_last[] = {1.0f, kInf, kNaN};
  EXPECT_TRUE(std::isnan(amax_of(with_nan_last, 3)));
  const float with_nan_first[] = {kNaN, 1.0f, 2.0f};
  EXPECT_TRUE(std::isnan(amax_of(with_nan_first, 3)));
}

TEST(QuantE5M6, PackedTwelveBitsPerValue) {
  const int64_t rows = 64, cols = 128;
  const std::vector<float> x = randn(rows * cols, 5, 100.0f);
  const QTensor q = quantize(x, rows, cols, cfg(Format::E5M6, Granularity::tile_1x128(), ScaleMode::PowerOfTwo));
  EXPECT_EQ(q.rowwise.codes.nbytes(), static_cast<size_t>(rows * cols) * 3 / 2);  // 1.5 bytes per element
  EXPECT_EQ(q.bytes(), static_cast<size_t>(rows * cols) * 3 / 2 + static_cast<size_t>(rows) * sizeof(float));
  // The byte layout is num::e5m6_pack8 over the flat row-major index.
  for (int64_t g = 0; g < rows * cols / 8; g += 37) {
    uint32_t words[3];
    std::memcpy(words, q.code_ptr() + 12 * g, 12);
    uint16_t codes[8];
    num::e5m6_unpack8(words, codes);
    for (int i = 0; i < 8; ++i) {
      const int64_t flat = 8 * g + i, r = flat / cols, c = flat % cols;
      EXPECT_EQ(codes[i], num::e5m6_encode(x[static_cast<size_t>(flat)] / q.scale_of(r, c)));
    }
  }
  // Ragged count: the last group of 8 is zero-padded.
  const QTensor odd = quantize(randn(3 * 5, 6), 3, 5, cfg(Format::E5M6, Granularity::tensor()));
  ASSERT_EQ(odd.rowwise.codes.nbytes(), 24u);
  uint32_t words[3];
  std::memcpy(words, odd.code_ptr() + 12, 12);
  uint16_t codes[8];
  num::e5m6_unpack8(words, codes);
  for (int i = 7; i < 8; ++i) EXPECT_EQ(codes[i], 0u);
  EXPECT_NE(codes[6], 0u);
}

TEST(QuantInt8, StochasticRoundingIsDeterministicAndUnbiased) {
  const int64_t rows = 100, cols = 2000;
  std::vector<float> x(static_cast<size_t>(rows * cols), 10.25f);
  x[0] = 127.0f;  // amax 127: inverse 127 / 127 = 1, so x * inverse = 10.25 exactly
  QuantSpec c = cfg(Format::INT8, Granularity::tensor());
  c.rounding = Rounding::Stochastic;
  c.seed = 99;
  const QTensor a = quantize(x, rows, cols, c), b = quantize(x, rows, cols, c);
  EXPECT_EQ(a.code_vector(), b.code_vector());
  c.seed = 100;
  const QTensor other = quantize(x, rows, cols, c);
  EXPECT_NE(a.code_vector(), other.code_vector());
  ASSERT_EQ(a.scale_ptr()[0], 1.0f);
  double sum = 0.0;
  for (int64_t i = 1; i < rows * cols; ++i) {
    const int8_t code = static_cast<int8_t>(a.code_ptr()[static_cast<size_t>(i)]);
    ASSERT_TRUE(code == 10 || code == 11);
    // The documented random stream: counter_random_u32(seed, r * cols + c).
    ASSERT_EQ(code, num::int8_encode_stochastic(10.25f, num::counter_random_u32(99, static_cast<uint64_t>(i))));
    sum += code;
  }
  const double n = static_cast<double>(rows * cols - 1);
  const double mean = sum / n, sigma = std::sqrt(0.25 * 0.75 / n);
  EXPECT_NEAR(mean, 10.25, 6 * sigma);
  c.rounding = Rounding::Nearest;
  const QTensor rne = quantize(x, rows, cols, c);
  EXPECT_EQ(static_cast<int8_t>(rne.code_ptr()[1]), 10);  // nearest is biased by 0.25 here
}

TEST(QuantBf16, UnscaledTwoBytesPerElement) {
  const std::vector<float> x = randn(33 * 70, 7, 1e5f);
  const QTensor q = quantize(x, 33, 70, cfg(Format::BF16, Granularity::tile_1x128()));
  EXPECT_EQ(q.rowwise.codes.nbytes(), 2u * 33 * 70);
  EXPECT_TRUE(q.pow2_scales);
  for (float s : q.row_major_scales()) EXPECT_EQ(s, 1.0f);
  const std::vector<float> back = dequantize(q);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits(back[i]), bits(num::bf16_round(x[i])));
}

TEST(QuantTranspose, ExactForEveryFormat) {
  const int64_t rows = 131, cols = 45;
  const std::vector<float> x = randn(rows * cols, 8, 5.0f);
  for (Format f : {Format::E4M3, Format::E5M2, Format::E5M6, Format::INT8, Format::BF16}) {
    const QTensor q = quantize(x, rows, cols, cfg(f, Granularity::tile_128x1()));
    const QTensor t = transpose(q);
    EXPECT_EQ(t.rows, cols);
    EXPECT_EQ(t.cols, rows);
    EXPECT_EQ(t.granularity(), Granularity::tile_1x128());
    const std::vector<float> a = dequantize(q), b = dequantize(t);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(bits(a[static_cast<size_t>(r * cols + c)]), bits(b[static_cast<size_t>(c * rows + r)]))
            << format_name(f);
  }
}

TEST(QuantErrors, BadInputThrows) {
  const std::vector<float> x = randn(64, 9);
  EXPECT_THROW(quantize(x, 8, 9, cfg(Format::E4M3, Granularity::tensor())), Error);    // size mismatch
  EXPECT_THROW(quantize(x.data(), -1, 8, cfg(Format::E4M3, Granularity::tensor())), Error);
  EXPECT_THROW(quantize(x.data(), 8, 8, cfg(Format::E4M3, Granularity::block(0, 128))), Error);
  EXPECT_THROW(quantize(x.data(), 8, 8, cfg(static_cast<Format>(9), Granularity::tensor())), Error);
  EXPECT_THROW(quantize(nullptr, 8, 8, cfg(Format::E4M3, Granularity::tensor())), Error);
  QuantSpec sr = cfg(Format::E4M3, Granularity::tensor());
  sr.rounding = Rounding::Stochastic;  // only INT8 rounds stochastically
  EXPECT_THROW(quantize(x.data(), 8, 8, sr), Error);
  const QTensor q = quantize(x, 8, 8, cfg(Format::E4M3, Granularity::tensor()));
  EXPECT_THROW(q.value_at(8, 0), Error);
  EXPECT_THROW(q.code_at(0, -1), Error);
  QTensor broken = q;
  broken.rowwise.codes = q.rowwise.codes.view({64}).narrow(0, 0, 63);  // one code byte short
  EXPECT_THROW(dequantize(broken), Error);
}
