// MoE M-grouped contiguous FP8 GEMM (src/ops/cuda/fp8_gemm_grouped.cu) against the CPU reference:
// each expert's 128-aligned row segment of d must equal quant::ref_gemm_bf16 (hopper, promote 128) of that
// segment of A with that expert's weights, bit for bit, including experts with zero tokens (no rows), an
// expert whose segment is a single padded block, and ragged N; plus the host check of the offset table.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "fp8_gemm_test_util.h"
#include "ops/cuda/fp8_gemm_plan.h"  // fp8gemm::prepare_grouped: which scale path a layout takes

namespace fp8train::gputest {
namespace {

using ops::cuda::Fp8GemmConfig;
using ops::cuda::Fp8GemmGroupedProblem;

// tokens[e] rows for expert e, each segment padded to a multiple of 128 (padding rows hold random values
// too: the kernel computes them like any row and the reference covers them).
::testing::AssertionResult run_grouped_case(const std::vector<int>& tokens, int64_t n, int64_t k, int block_n,
                                            ops::cuda::Fp8GemmEpilogue epilogue, uint64_t seed,
                                            ops::cuda::Fp8GemmMulticast multicast = ops::cuda::Fp8GemmMulticast::Auto,
                                            int grid = 0, bool bulk_layout = false) {
  const int groups = static_cast<int>(tokens.size());
  std::vector<int32_t> offsets(groups + 1, 0);
  for (int e = 0; e < groups; ++e) offsets[e + 1] = offsets[e] + (tokens[e] + 127) / 128 * 128;
  const int64_t m_total = offsets[groups];
  ops::cuda::check_group_offsets(offsets.data(), groups, m_total, "test offsets");
  const int64_t kb = k / 128, nb = (n + 127) / 128;

  const quant::QTensor a = random_e4m3(m_total, k, quant::Granularity::tile_1x128(), seed);
  std::vector<uint8_t> b_codes;
  std::vector<float> b_scales;
  std::vector<uint16_t> want(static_cast<size_t>(m_total * n));
  for (int e = 0; e < groups; ++e) {
    const quant::QTensor b = random_e4m3(n, k, quant::Granularity::block_128x128(), seed + 1 + e);
    const std::vector<uint8_t> codes = b.code_vector();
    const std::vector<float> scales = b.row_major_scales();
    b_codes.insert(b_codes.end(), codes.begin(), codes.end());
    b_scales.insert(b_scales.end(), scales.begin(), scales.end());
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    quant::QTensor a_e = a;  // the expert's row segment of A (views of its codes and 1x128 scales)
    a_e.rows = rows;
    a_e.rowwise.codes = a.rowwise.codes.rows(offsets[e], offsets[e + 1]);
    a_e.rowwise.scales = a.rowwise.scales.rows(offsets[e], offsets[e + 1]);
    quant::ref_gemm_bf16(a_e, b, hopper_config(), want.data() + offsets[e] * n);
  }

  // bulk_layout: cuBLASLt-style padded scales (A MN-major; B rows padded to 4 K blocks): bulk scale copies.
  const int64_t kb_pad = (kb + 3) / 4 * 4;
  std::vector<float> sa = a.row_major_scales(), sb = b_scales;
  if (bulk_layout) {
    sa = transposed(a.row_major_scales(), m_total, kb);
    sb.assign(static_cast<size_t>(groups * nb * kb_pad), 1e30f);
    for (int64_t r = 0; r < groups * nb; ++r)
      for (int64_t g = 0; g < kb; ++g) sb[r * kb_pad + g] = b_scales[r * kb + g];
  }
  DeviceArray<uint8_t> da(a.code_vector()), db(b_codes);
  DeviceArray<float> dsa(sa), dsb(sb);
  DeviceArray<int32_t> doff(offsets);
  DeviceArray<uint16_t> dd(static_cast<size_t>(m_total * n));
  Fp8GemmGroupedProblem p;
  p.m_total = m_total;
  p.n = n;
  p.k = k;
  p.num_groups = groups;
  p.row_offsets = doff.get();
  p.a = da.get();
  p.a_scales = bulk_layout ? ops::cuda::ScaleView{dsa.get(), 1, m_total, 0}
                          : ops::cuda::row_major_scale_view(dsa.get(), kb);
  p.b = db.get();
  p.b_scales = bulk_layout ? ops::cuda::row_major_scale_view(dsb.get(), kb_pad, nb * kb_pad)
                           : ops::cuda::row_major_scale_view(dsb.get(), kb, nb * kb);
  p.d = dd.get();
  Fp8GemmConfig config;
  config.block_n = block_n;
  config.epilogue = epilogue;
  config.multicast = multicast;
  config.grid = grid;
  const bool bulk = ops::cuda::fp8gemm::prepare_grouped(p, config).args.bulk_scales != 0;
  if (bulk != bulk_layout) return ::testing::AssertionFailure() << "bulk scale path " << bulk << " for this layout";
  ops::cuda::fp8_gemm_grouped(p, config, nullptr);
  return same_bits_bf16(dd.download(), want, n);
}

TEST(Fp8GemmGrouped, BitExactWithEmptyExpertsForEveryBlockWidth) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  int count = 0;
  const int* block_ns = ops::cuda::fp8_gemm_grouped_block_ns(&count);
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("block_n " + std::to_string(block_ns[i]));
    EXPECT_TRUE(run_grouped_case({200, 0, 128, 1, 0, 300}, 304, 384, block_ns[i],
                                 ops::cuda::Fp8GemmEpilogue::TmaStore, seed + i));
  }
}

TEST(Fp8GemmGrouped, LeadingAndTrailingEmptyExpertsDirectEpilogueAndHeuristic) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  EXPECT_TRUE(run_grouped_case({0, 0, 513, 0}, 256, 256, 128, ops::cuda::Fp8GemmEpilogue::Direct, seed));
  EXPECT_TRUE(run_grouped_case({0, 77, 129, 0, 5}, 2112, 128, 0, ops::cuda::Fp8GemmEpilogue::TmaStore, seed + 1));
}

// Clusters sharing A (pairs of column tiles of one row block: always the same expert), odd column-block
// counts, few clusters; and without clusters.
TEST(Fp8GemmGrouped, MulticastOfABitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using MC = ops::cuda::Fp8GemmMulticast;
  for (MC mc : {MC::ShareA, MC::None})
    for (int block_n : {64, 128, 160, 176, 192}) {
      SCOPED_TRACE("block_n " + std::to_string(block_n) + " multicast " + std::to_string(static_cast<int>(mc)));
      EXPECT_TRUE(run_grouped_case({130, 0, 256, 7}, 3 * block_n + 16, 256, block_n,
                                   ops::cuda::Fp8GemmEpilogue::TmaStore, seed + block_n, mc, 4));
    }
}

// Padded scale layouts (bulk scale copies) with empty experts, ragged N and K blocks not a multiple of 4.
TEST(Fp8GemmGrouped, BulkScaleCopiesBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using MC = ops::cuda::Fp8GemmMulticast;
  for (MC mc : {MC::None, MC::ShareA})
    for (int block_n : {64, 128, 160, 192}) {
      SCOPED_TRACE("block_n " + std::to_string(block_n) + " multicast " + std::to_string(static_cast<int>(mc)));
      EXPECT_TRUE(run_grouped_case({130, 0, 256, 7}, 3 * block_n + 16, 640, block_n,
                                   ops::cuda::Fp8GemmEpilogue::TmaStore, seed + block_n, mc, 5, true));
    }
}

TEST(Fp8GemmGrouped, RandomTokenCounts) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  std::vector<int> tokens(8);
  for (int& t : tokens) t = std::uniform_int_distribution<int>(0, 3)(gen) == 0 ? 0 : std::uniform_int_distribution<int>(1, 400)(gen);
  EXPECT_TRUE(run_grouped_case(tokens, 512, 640, 0, ops::cuda::Fp8GemmEpilogue::TmaStore, gen()));
}

TEST(Fp8GemmGrouped, OffsetTableChecks) {
  const int32_t good[] = {0, 128, 128, 384};
  EXPECT_NO_THROW(ops::cuda::check_group_offsets(good, 3, 384, "offsets"));
  const int32_t unaligned[] = {0, 100, 384};
  EXPECT_THROW(ops::cuda::check_group_offsets(unaligned, 2, 384, "offsets"), Error);
  const int32_t decreasing[] = {0, 256, 128};
  EXPECT_THROW(ops::cuda::check_group_offsets(decreasing, 2, 128, "offsets"), Error);
  const int32_t wrong_total[] = {0, 128, 256};
  EXPECT_THROW(ops::cuda::check_group_offsets(wrong_total, 2, 384, "offsets"), Error);
  const int32_t bad_start[] = {128, 256};
  EXPECT_THROW(ops::cuda::check_group_offsets(bad_start, 1, 256, "offsets"), Error);
}

TEST(Fp8GemmGrouped, RejectsBadArguments) {
  DeviceArray<uint8_t> buf(1 << 20);
  DeviceArray<float> scales(1024);
  DeviceArray<int32_t> offsets(std::vector<int32_t>{0, 128});
  DeviceArray<uint16_t> out(1 << 16);
  Fp8GemmGroupedProblem p;
  p.m_total = 128;
  p.n = 128;
  p.k = 256;
  p.num_groups = 1;
  p.row_offsets = offsets.get();
  p.a = buf.get();
  p.b = buf.get();
  p.a_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.b_scales = ops::cuda::row_major_scale_view(scales.get(), 2, 2);
  p.d = out.get();
  Fp8GemmGroupedProblem bad = p;
  bad.m_total = 100;
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(bad, {}, nullptr), Error);
  bad = p;
  bad.num_groups = 0;
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(bad, {}, nullptr), Error);
  bad = p;
  bad.row_offsets = nullptr;
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(bad, {}, nullptr), Error);
  Fp8GemmConfig config;
  config.block_n = 96;  // built for dense only
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(p, config, nullptr), Error);
  config.block_n = 128;  // pairs along M could belong to two experts
  config.multicast = ops::cuda::Fp8GemmMulticast::ShareB;
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(p, config, nullptr), Error);
  config.multicast = ops::cuda::Fp8GemmMulticast::None;
  config.block_m = 192;  // a 192-row tile could straddle two experts
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(p, config, nullptr), Error);
  config.block_m = 0;
  config.k_splits = 2;  // split-K is dense only
  EXPECT_THROW(ops::cuda::fp8_gemm_grouped(p, config, nullptr), Error);
  p.m_total = 0;  // every expert empty: nothing to do
  EXPECT_NO_THROW(ops::cuda::fp8_gemm_grouped(p, {}, nullptr));
}

}  // namespace
}  // namespace fp8train::gputest
