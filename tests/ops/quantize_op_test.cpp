// The quantization and scaled-GEMM ops on the CPU beyond the backend table's equalities: the QTensor they return
// (shapes, layouts, padding, groups, transposed views), the amax history's state, and the clear errors for bad
// inputs (the entry points name the op and the argument).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "backend_ops_table.h"
#include "ops/quantize.h"
#include "ops/scaled_gemm.h"

namespace fp8train {
namespace {

using backend_test::random_values;
using quant::Format;
using quant::Granularity;
using quant::ScaleLayout;

quant::QuantSpec spec(Format f, Granularity g, bool pow2 = false) {
  quant::QuantSpec s;
  s.format = f;
  s.granularity = g;
  s.scale_mode = pow2 ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  return s;
}

Tensor matrix(int64_t rows, int64_t cols, uint64_t seed) {
  return Tensor::from_vector(random_values(rows, cols, seed), {rows, cols}, MemCategory::Workspace, Device::cpu());
}

// Runs fn, expects fp8train::Error whose message contains every needle.
template <class F>
void expect_error(F&& fn, std::initializer_list<const char*> needles) {
  try {
    fn();
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(QuantizeOp, PayloadShapesLayoutsAndPadding) {
  const ExecCtx& cpu = ExecCtx::cpu();
  const Tensor x = matrix(272, 400, 1);  // ragged: 4 column tiles (the last 16 wide), 3 row blocks
  const quant::QTensor a = ops::quantize(cpu, x, spec(Format::E4M3, Granularity::tile_1x128()),
                                         ops::QuantizeOutputs::Both, ScaleLayout::GemmNative, 1, MemCategory::ActivationCache);
  EXPECT_EQ(a.rowwise.codes.shape(), (Shape{272, 400}));
  EXPECT_EQ(a.rowwise.scales.shape(), (Shape{4, 272}));    // MN-major: [column tiles, rows]
  EXPECT_EQ(a.colwise.codes.shape(), (Shape{400, 272}));
  EXPECT_EQ(a.colwise.scales.shape(), (Shape{3, 400}));
  EXPECT_EQ(a.rowwise.codes.category(), MemCategory::ActivationCache);
  EXPECT_EQ(a.bytes(), 2u * 272 * 400 + 4u * (4 * 272 + 3 * 400));
  // scale_of reads through the layout; the row-major copy is the reference's grid.
  const quant::QTensor ref = quant::quantize(x.data<float>(), 272, 400, spec(Format::E4M3, Granularity::tile_1x128()));
  EXPECT_EQ(a.row_major_scales(), ref.row_major_scales());
  EXPECT_EQ(a.scale_of(271, 399), ref.scale_of(271, 399));
  EXPECT_EQ(a.value_at(100, 130), ref.value_at(100, 130));
  // transposed(): the column-wise payload as xᵀ
  const quant::QTensor t = a.transposed();
  EXPECT_EQ(t.rows, 400);
  EXPECT_EQ(t.cols, 272);
  EXPECT_EQ(t.code_at(5, 7), a.colwise.codes.data<uint8_t>()[5 * 272 + 7]);
  EXPECT_THROW(a.rowwise_only().transposed(), Error);

  const quant::QTensor w = ops::quantize(cpu, x, spec(Format::E4M3, Granularity::block_128x128()),
                                         ops::QuantizeOutputs::Rowwise, ScaleLayout::GemmNative);
  EXPECT_EQ(w.rowwise.scales.shape(), (Shape{3, 4}));  // [row blocks, round_up(4 column blocks, 4)]
  const quant::QTensor w5 = ops::quantize(cpu, matrix(128, 640, 2), spec(Format::E4M3, Granularity::block_128x128()),
                                          ops::QuantizeOutputs::Rowwise, ScaleLayout::GemmNative);
  ASSERT_EQ(w5.rowwise.scales.shape(), (Shape{1, 8}));  // 5 column blocks padded to 8 with zeros
  const std::vector<float> s5 = w5.rowwise.scales.to_vector<float>();
  for (int c = 0; c < 5; ++c) EXPECT_GT(s5[c], 0.0f);
  for (int c = 5; c < 8; ++c) EXPECT_EQ(s5[c], 0.0f);
}

TEST(QuantizeOp, RowGroupsNeverShareABlock) {
  // Three experts of 160 rows with 128x128 blocks: each expert has 2 block rows (128 + 32), quantized on its own.
  const Tensor x = matrix(480, 256, 3);
  const quant::QTensor q = ops::quantize(ExecCtx::cpu(), x, spec(Format::E4M3, Granularity::block_128x128()),
                                         ops::QuantizeOutputs::Both, ScaleLayout::RowMajor, 3);
  EXPECT_EQ(q.rowwise.scales.shape(), (Shape{6, 2}));
  EXPECT_EQ(q.colwise.codes.shape(), (Shape{3 * 256, 160}));
  const float* x0 = x.data<float>();
  for (int64_t e = 0; e < 3; ++e) {
    const quant::QTensor want = quant::quantize(x0 + e * 160 * 256, 160, 256, spec(Format::E4M3, Granularity::block_128x128()));
    const quant::QTensor got = q.group(e);
    EXPECT_EQ(got.code_vector(), want.code_vector()) << "expert " << e;
    EXPECT_EQ(got.row_major_scales(), want.row_major_scales()) << "expert " << e;
    EXPECT_EQ(q.transposed().group(e).code_vector(), quant::transpose(want).code_vector()) << "expert " << e;
  }
  // Per tensor with groups: one scale per group.
  const quant::QTensor pt = ops::quantize(ExecCtx::cpu(), x, spec(Format::E4M3, Granularity::tensor()),
                                          ops::QuantizeOutputs::Rowwise, ScaleLayout::RowMajor, 4);
  EXPECT_EQ(pt.rowwise.scales.shape(), (Shape{4, 1}));
  EXPECT_EQ(pt.scale_of(119, 0), quant::quantize(x0, 120, 256, spec(Format::E4M3, Granularity::tensor())).scale_of(0, 0));
}

TEST(QuantizeOp, WithColwiseOfSquareBlocksIsTheExactTranspose) {
  const Tensor x = matrix(256, 384, 4);
  const quant::QuantSpec s = spec(Format::E4M3, Granularity::block_128x128());
  const quant::QTensor q = ops::quantize(ExecCtx::cpu(), x, s);
  const quant::QTensor both = ops::with_colwise(ExecCtx::cpu(), q);
  EXPECT_EQ(both.rowwise.codes.raw(), q.rowwise.codes.raw());  // the row-wise payload is shared
  EXPECT_EQ(both.transposed().code_vector(), quant::transpose(q).code_vector());
  EXPECT_EQ(both.transposed().row_major_scales(), quant::transpose(q).row_major_scales());
  EXPECT_EQ(ops::with_colwise(ExecCtx::cpu(), both).colwise.codes.raw(), both.colwise.codes.raw());
  // 1x128 tiles: the column-wise payload is quant::retile's rule on xᵀ — the 128x1 re-tiling of the dequantized
  // values, transposed (lossless with power-of-two scales except below the subnormals; quant.h).
  const quant::QuantSpec p2 = spec(Format::E4M3, Granularity::tile_1x128(), true);
  const quant::QTensor a = ops::quantize(ExecCtx::cpu(), x, p2);
  const quant::QTensor at = ops::with_colwise(ExecCtx::cpu(), a).transposed();
  quant::QuantSpec p2t = p2;
  p2t.granularity = Granularity::tile_128x1();
  const quant::QTensor want = quant::transpose(quant::retile(a, p2t));
  EXPECT_EQ(at.code_vector(), want.code_vector());
  EXPECT_EQ(at.row_major_scales(), want.row_major_scales());
}

TEST(QuantizeOp, DequantizeRoundsBf16OnceFromTheFp32Product) {
  const Tensor x = matrix(64, 256, 5);
  const quant::QTensor q = ops::quantize(ExecCtx::cpu(), x, spec(Format::E5M2, Granularity::tile_1x128()),
                                         ops::QuantizeOutputs::Rowwise, ScaleLayout::GemmNative);
  const std::vector<float> f = ops::dequantize(ExecCtx::cpu(), q, DType::F32).to_vector<float>();
  const std::vector<bf16> b = ops::dequantize(ExecCtx::cpu(), q, DType::BF16).to_vector<bf16>();
  const std::vector<float> want = quant::dequantize(q);
  ASSERT_EQ(f.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(f[i], want[i]) << i;
    ASSERT_EQ(b[i].bits, num::bf16_encode(want[i])) << i;
  }
}

TEST(QuantizeOp, DelayedHistoryFollowsTheAmaxHistoryRules) {
  const ExecCtx& cpu = ExecCtx::cpu();
  ops::AmaxHistoryState h = ops::AmaxHistoryState::make(cpu, 2, quant::AmaxAlgorithm::Max, 0);
  quant::AmaxHistory ref(2, quant::AmaxAlgorithm::Max, 0);
  const quant::QuantSpec s = spec(Format::E4M3, Granularity::tile_1x128());  // granularity ignored: per tensor
  for (int step = 0; step < 4; ++step) {
    Tensor x = matrix(32, 64, 10 + step);
    const quant::QTensor q = ops::quantize_delayed(cpu, x, s, h);
    const quant::QTensor want = quant::quantize_delayed(x.data<float>(), 32, 64, s, ref);
    EXPECT_TRUE(q.granularity().per_tensor);
    EXPECT_EQ(q.code_vector(), want.code_vector()) << "step " << step;
    EXPECT_EQ(q.row_major_scales(), want.row_major_scales()) << "step " << step;
    EXPECT_EQ(h.window(), std::vector<float>(ref.entries().begin(), ref.entries().end()));
  }
  EXPECT_EQ(h.window().size(), 2u);  // the window keeps `length` entries
  Tensor bad = matrix(32, 64, 20);
  bad.data<float>()[7] = std::numeric_limits<float>::infinity();
  const std::vector<float> before = h.window();
  expect_error([&] { ops::quantize_delayed(cpu, bad, s, h); }, {"Inf or NaN", "unchanged"});
  EXPECT_EQ(h.window(), before);
  expect_error([&] { h.check(); }, {"Inf or NaN"});
  expect_error([&] { ops::AmaxHistoryState::make(cpu, 0, quant::AmaxAlgorithm::Max, 0); }, {"length"});
}

TEST(QuantizeOp, BadInputsGiveClearErrors) {
  const ExecCtx& cpu = ExecCtx::cpu();
  const Tensor x = matrix(128, 256, 6);
  const quant::QuantSpec s = spec(Format::E4M3, Granularity::tile_1x128());
  expect_error([&] { ops::quantize(cpu, Tensor::zeros({128, 256}, DType::F64), s); }, {"quantize", "F32 or BF16"});
  expect_error([&] { ops::quantize(cpu, Tensor::zeros({4, 8, 8}, DType::F32), s); }, {"quantize", "x"});
  expect_error([&] { ops::quantize(cpu, x, spec(Format::E4M3, Granularity::block(0, 128))); }, {"block"});
  quant::QuantSpec sr = s;
  sr.rounding = quant::Rounding::Stochastic;
  expect_error([&] { ops::quantize(cpu, x, sr); }, {"stochastic", "int8"});
  expect_error([&] { ops::quantize(cpu, x, s, ops::QuantizeOutputs::Rowwise, ScaleLayout::RowMajor, 3); },
               {"3 equal groups"});
  expect_error([&] { ops::quantize(cpu, matrix(6, 12, 7), spec(Format::E5M6, Granularity::tile_1x128()),
                                   ops::QuantizeOutputs::Rowwise, ScaleLayout::RowMajor, 2); },
               {"E5M6", "packing"});
  expect_error([&] { ops::dequantize(cpu, quant::QTensor{}); }, {"dequantize", "row-wise payload"});
  const quant::QTensor q = ops::quantize(cpu, x, s);
  expect_error([&] { ops::dequantize(cpu, q, DType::I32); }, {"F32 or BF16"});
  quant::QTensor broken = q;
  broken.rowwise.scales = q.rowwise.scales.narrow(1, 0, 1);
  expect_error([&] { ops::dequantize(cpu, broken); }, {"do not match"});
}

TEST(ScaledGemmOp, BadInputsGiveClearErrors) {
  const ExecCtx& cpu = ExecCtx::cpu();
  const quant::QTensor a = ops::quantize(cpu, matrix(128, 256, 1), spec(Format::E4M3, Granularity::tile_1x128()));
  const quant::QTensor w = ops::quantize(cpu, matrix(64, 256, 2), spec(Format::E4M3, Granularity::block_128x128()));
  const quant::QTensor k384 = ops::quantize(cpu, matrix(64, 384, 3), spec(Format::E4M3, Granularity::block_128x128()));
  Tensor d = Tensor::zeros({128, 64}, DType::F32);
  ops::ScaledGemmOptions o;  // default numerics: the GPU's (hopper, promotion every 128, no split)
  EXPECT_EQ(o.numerics.mode, quant::AccumMode::Hopper);
  EXPECT_EQ(o.numerics.promote_interval, 128);
  EXPECT_EQ(o.numerics.k_splits, 1);
  ops::scaled_gemm(cpu, a, w, d, o);  // the well-formed call
  expect_error([&] { ops::scaled_gemm(cpu, a, k384, d, o); }, {"scaled_gemm", "same K"});
  expect_error([&] { ops::scaled_gemm(cpu, a, w, Tensor::zeros({128, 65}, DType::F32), o); }, {"scaled_gemm", "d"});
  expect_error([&] { ops::scaled_gemm(cpu, a, w, Tensor::zeros({128, 64}, DType::F64), o); }, {"F32 or BF16"});
  expect_error([&] { ops::scaled_gemm(cpu, a, a.rowwise_only().transposed(), d, o); }, {"column-wise"});
  ops::ScaledGemmOptions bad = o;
  bad.numerics.accumulate = true;
  expect_error([&] { ops::scaled_gemm(cpu, a, w, d, bad); }, {"ScaledGemmOptions::accumulate"});
  const quant::QTensor t = ops::quantize(cpu, matrix(64, 256, 4), spec(Format::E4M3, Granularity::tensor()));
  expect_error([&] { ops::scaled_gemm(cpu, a, t, d, o); }, {"granularity pair"});
  const quant::QTensor i8 = ops::quantize(cpu, matrix(64, 256, 5), spec(Format::INT8, Granularity::block_128x128()));
  expect_error([&] { ops::scaled_gemm(cpu, a, i8, d, o); }, {"INT8"});

  // Grouped over M: offsets must be multiples of 128 summing to M.
  const quant::QTensor experts = ops::quantize(cpu, matrix(2 * 64, 256, 6), spec(Format::E4M3, Granularity::block_128x128()),
                                               ops::QuantizeOutputs::Rowwise, ScaleLayout::RowMajor, 2);
  auto offsets = [](std::vector<int32_t> v) {
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, MemCategory::Workspace, Device::cpu());
  };
  ops::scaled_gemm_grouped(cpu, a, experts, offsets({0, 128, 128}), d, o);
  expect_error([&] { ops::scaled_gemm_grouped(cpu, a, experts, offsets({0, 64, 128}), d, o); }, {"multiple of 128"});
  ops::scaled_gemm_grouped(cpu, a, experts, offsets({0, 0, 0}), d, o);  // rows past the last expert: zeros
  for (float v : d.to_vector<float>()) ASSERT_EQ(v, 0.0f);
  expect_error(
      [&] {
        ops::scaled_gemm_grouped(cpu, a, experts, offsets({0, 128, 256}), d, o);
      },
      {"beyond the 128 rows"});
  expect_error([&] { ops::scaled_gemm_grouped(cpu, a, experts, offsets({0, 128}), d, o); }, {"offsets"});
  // Grouped over K: 1xG operands, d [E, M, N].
  const quant::QTensor b1 = ops::quantize(cpu, matrix(64, 256, 7), spec(Format::E4M3, Granularity::tile_1x128()));
  Tensor dk = Tensor::zeros({2, 128, 64}, DType::F32);
  ops::scaled_gemm_grouped_k(cpu, a, b1, offsets({0, 128, 256}), dk, o);
  expect_error([&] { ops::scaled_gemm_grouped_k(cpu, a, w, offsets({0, 128, 256}), dk, o); }, {"1xG"});
  expect_error([&] { ops::scaled_gemm_grouped_k(cpu, a, b1, offsets({0, 100, 256}), dk, o); }, {"multiple of 128"});
  expect_error([&] { ops::scaled_gemm_grouped_k(cpu, a, b1, offsets({0, 128, 256}), d, o); }, {"[2, 128, 64]"});
}

TEST(ScaledGemmOp, StridedAndBf16OutputsAccumulateOnce) {
  const ExecCtx& cpu = ExecCtx::cpu();
  const quant::QTensor a = ops::quantize(cpu, matrix(64, 256, 8), spec(Format::E4M3, Granularity::tile_1x128()),
                                         ops::QuantizeOutputs::Rowwise, ScaleLayout::GemmNative);
  const quant::QTensor b = ops::quantize(cpu, matrix(96, 256, 9), spec(Format::E4M3, Granularity::block_128x128()),
                                         ops::QuantizeOutputs::Rowwise, ScaleLayout::GemmNative);
  ops::ScaledGemmOptions o;
  o.numerics.mode = quant::AccumMode::Hopper;
  const std::vector<float> want = quant::ref_gemm(a.group(0), b.group(0), o.numerics);
  // A column block of a wider F32 matrix: only the view is written.
  Tensor wide = Tensor::from_vector(std::vector<float>(64 * 100, -7.0f), {64, 100});
  ops::scaled_gemm(cpu, a, b, wide.cols(2, 98), o);
  for (int64_t r = 0; r < 64; ++r) {
    EXPECT_EQ(wide.data<float>()[r * 100 + 0], -7.0f);
    EXPECT_EQ(wide.data<float>()[r * 100 + 99], -7.0f);
    for (int64_t c = 0; c < 96; ++c) ASSERT_EQ(wide.data<float>()[r * 100 + 2 + c], want[r * 96 + c]);
  }
  // BF16 += : the FP32 sum of the widened BF16 value and the product, rounded once.
  std::vector<bf16> c0(64 * 96);
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = bf16(0.25f * static_cast<float>(i % 13));
  Tensor d16 = Tensor::from_vector(c0, {64, 96});
  o.accumulate = true;
  ops::scaled_gemm(cpu, a, b, d16, o);
  const std::vector<bf16> got = d16.to_vector<bf16>();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i].bits, num::bf16_encode(static_cast<float>(c0[i]) + want[i])) << i;
}

}  // namespace
}  // namespace fp8train
