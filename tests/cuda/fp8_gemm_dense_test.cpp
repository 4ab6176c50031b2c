// Dense FP8 GEMM kernel (src/ops/cuda/fp8_gemm_dense.cu) against the CPU reference GEMM in hopper mode:
// d[M, N] bf16 = A[M, K] (E4M3, 1x128 scales) . B[N, K]^T (E4M3, 128x128 scales) must match
// quant::ref_gemm_bf16(..., hopper, promote 128) BIT FOR BIT, on fresh random inputs with a poisoned output,
// for every built block width, both epilogues, ragged M and N, K = 128, a very large K, power-of-two scales,
// the MN-major scale layout, and a persistent grid much smaller than the tile count; and the split-K mode
// against the CPU model with the same K ranges (quant::GemmConfig::k_splits).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "fp8_gemm_test_util.h"
#include "ops/cuda/fp8_gemm_plan.h"  // fp8gemm::prepare_dense: which scale path a layout takes

namespace fp8train::gputest {
namespace {

using ops::cuda::Fp8GemmConfig;
using ops::cuda::Fp8GemmDenseProblem;
using ops::cuda::Fp8GemmEpilogue;

struct DenseCase {
  int64_t m, n, k;
  int block_n = 0;  // 0 = heuristic
  Fp8GemmEpilogue epilogue = Fp8GemmEpilogue::TmaStore;
  int grid = 0;
  int raster = 16;
  bool pow2 = false;
  bool mn_major_a_scales = false;
  ops::cuda::Fp8GemmMulticast multicast = ops::cuda::Fp8GemmMulticast::Auto;
  // cuBLASLt-style padded layouts (A scales MN-major, K-block stride padded to 4 rows; B scale rows padded to 4
  // K blocks), which let the kernel move scales with bulk copies (KernelArgs::bulk_scales).
  bool bulk_layout = false;
  int k_splits = 0;   // 0: the config default (heuristic when block_n is 0, else 1)
  int launches = 1;   // > 1: the same GEMM again on a poisoned output (split-K counters must be reset)
  int block_m = 0;    // 0: default (128); 192: three math warpgroups
};

std::string describe(const DenseCase& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " block_n=" + std::to_string(c.block_n) + (c.epilogue == Fp8GemmEpilogue::Direct ? " direct" : " tma") +
         " grid=" + std::to_string(c.grid) + " raster=" + std::to_string(c.raster) + (c.pow2 ? " pow2" : "") +
         (c.mn_major_a_scales ? " mn-major" : "") + (c.bulk_layout ? " bulk-layout" : "") +
         " multicast=" + std::to_string(static_cast<int>(c.multicast)) + " k_splits=" + std::to_string(c.k_splits) +
         " block_m=" + std::to_string(c.block_m);
}

// Runs one case on the GPU and compares with the CPU reference; returns the assertion.
::testing::AssertionResult run_dense_case(const DenseCase& c, uint64_t seed) {
  const quant::QTensor a = random_e4m3(c.m, c.k, quant::Granularity::tile_1x128(), seed, c.pow2);
  const quant::QTensor b = random_e4m3(c.n, c.k, quant::Granularity::block_128x128(), seed + 1, c.pow2);

  const int64_t kb = c.k / 128, nb = (c.n + 127) / 128;
  const int64_t m_pad = (c.m + 3) / 4 * 4, kb_pad = (kb + 3) / 4 * 4;
  std::vector<float> sa = c.mn_major_a_scales ? transposed(a.row_major_scales(), c.m, kb) : a.row_major_scales();
  std::vector<float> sb = b.row_major_scales();
  if (c.bulk_layout) {  // pad with a value the reference never sees (rows >= m, K blocks >= kb)
    sa.assign(static_cast<size_t>(kb * m_pad), 1e30f);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t g = 0; g < kb; ++g) sa[g * m_pad + r] = a.scale_ptr()[r * kb + g];
    sb.assign(static_cast<size_t>(nb * kb_pad), 1e30f);
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t g = 0; g < kb; ++g) sb[j * kb_pad + g] = b.scale_ptr()[j * kb + g];
  }
  DeviceArray<uint8_t> da(a.code_vector()), db(b.code_vector());
  DeviceArray<float> dsa(sa), dsb(sb);
  DeviceArray<uint16_t> dd(static_cast<size_t>(c.m * c.n));
  Fp8GemmDenseProblem p;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.a = da.get();
  p.b = db.get();
  p.a_scales = c.bulk_layout         ? ops::cuda::ScaleView{dsa.get(), 1, m_pad, 0}
               : c.mn_major_a_scales ? ops::cuda::ScaleView{dsa.get(), 1, c.m, 0}
                                     : ops::cuda::row_major_scale_view(dsa.get(), kb);
  p.b_scales = ops::cuda::row_major_scale_view(dsb.get(), c.bulk_layout ? kb_pad : kb);
  p.d = dd.get();
  Fp8GemmConfig config;
  config.block_n = c.block_n;
  config.epilogue = c.epilogue;
  config.grid = c.grid;
  config.raster_group_m = c.raster;
  config.multicast = c.multicast;
  config.k_splits = c.k_splits;
  config.block_m = c.block_m;
  // The layout decides the scale path; make sure the case tests the one it means to. The reference mirrors the
  // launch's split-K ranges (1 = none).
  const ops::cuda::fp8gemm::KernelArgs args = ops::cuda::fp8gemm::prepare_dense(p, config).args;
  const bool bulk = args.bulk_scales != 0;
  if (bulk != c.bulk_layout) return ::testing::AssertionFailure() << "bulk scale path " << bulk << " for this layout";
  if (c.k_splits > 0 && args.k_splits != c.k_splits)
    return ::testing::AssertionFailure() << "launch uses k_splits " << args.k_splits;
  quant::GemmConfig ref = hopper_config();
  ref.k_splits = args.k_splits;
  std::vector<uint16_t> want(static_cast<size_t>(c.m * c.n));
  quant::ref_gemm_bf16(a, b, ref, want.data());
  for (int l = 0; l < c.launches; ++l) {
    dd.poison();
    ops::cuda::fp8_gemm_dense(p, config, nullptr);
    ::testing::AssertionResult r = same_bits_bf16(dd.download(), want, c.n);
    if (!r) return r << " (launch " << l + 1 << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(Fp8GemmDense, BitExactOnRandomShapesForEveryBlockWidth) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  int count = 0;
  const int* block_ns = ops::cuda::fp8_gemm_dense_block_ns(&count);
  for (int i = 0; i < count; ++i) {
    DenseCase c;
    c.m = std::uniform_int_distribution<int64_t>(1, 400)(gen);
    c.n = 16 * std::uniform_int_distribution<int64_t>(1, 40)(gen);
    c.k = 128 * std::uniform_int_distribution<int64_t>(1, 12)(gen);
    c.block_n = block_ns[i];
    SCOPED_TRACE(describe(c));
    EXPECT_TRUE(run_dense_case(c, gen()));
  }
}

TEST(Fp8GemmDense, DirectEpilogueIsBitExactToo) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int block_n : {64, 128, 176}) {
    DenseCase c{200, 336, 512, block_n, Fp8GemmEpilogue::Direct};
    SCOPED_TRACE(describe(c));
    EXPECT_TRUE(run_dense_case(c, seed + block_n));
  }
}

TEST(Fp8GemmDense, EdgeShapes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const DenseCase cases[] = {
      {1, 16, 128, 64},     {1, 16, 128, 192},    {127, 48, 128, 128},  {129, 272, 256, 160},
      {128, 128, 128, 128}, {255, 1040, 384, 96}, {300, 2112, 256, 176}, {64, 7168, 128, 0},
      {513, 80, 640, 64},   {3, 4096, 256, 0},
  };
  for (const DenseCase& c : cases) {
    SCOPED_TRACE(describe(c));
    EXPECT_TRUE(run_dense_case(c, seed + c.m * 7 + c.n));
  }
}

TEST(Fp8GemmDense, VeryLargeK) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int block_n : {128, 176}) {
    DenseCase c{130, 2 * block_n + 16, 16384, block_n};
    SCOPED_TRACE(describe(c));
    EXPECT_TRUE(run_dense_case(c, seed + block_n));
  }
}

TEST(Fp8GemmDense, PowerOfTwoScalesAndMnMajorScaleLayout) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DenseCase c{333, 400, 768, 160};
  c.pow2 = true;
  EXPECT_TRUE(run_dense_case(c, seed)) << describe(c);
  c.pow2 = false;
  c.mn_major_a_scales = true;
  EXPECT_TRUE(run_dense_case(c, seed + 1)) << describe(c);
}

// A grid far smaller than the tile count makes every CTA run many tiles: the stage ring wraps across tile
// boundaries and the TMA-store buffer is reused; raster bands of 1 and 5 row blocks change the tile order.
TEST(Fp8GemmDense, PersistentScheduleWithFewCtasAndRasterBands) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const DenseCase cases[] = {
      {700, 640, 384, 128, Fp8GemmEpilogue::TmaStore, 3, 16},
      {700, 640, 384, 96, Fp8GemmEpilogue::TmaStore, 7, 1},
      {700, 640, 384, 176, Fp8GemmEpilogue::TmaStore, 5, 5},
      {700, 640, 384, 64, Fp8GemmEpilogue::Direct, 2, 3},
  };
  for (const DenseCase& c : cases) {
    SCOPED_TRACE(describe(c));
    EXPECT_TRUE(run_dense_case(c, seed + c.block_n));
  }
}

// Clusters of two CTAs sharing A (tile pairs along N) or B (pairs along M) through TMA multicast, with odd
// row and column block counts (the last pair has a member outside the matrix), a few clusters only (the
// stage ring wraps across units), and both stage-release paths (local and remote empty barriers).
TEST(Fp8GemmDense, MulticastClustersBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using MC = ops::cuda::Fp8GemmMulticast;
  for (MC mc : {MC::None, MC::ShareA, MC::ShareB})
    for (int block_n : {64, 96, 128, 160, 176, 192}) {
      DenseCase c{3 * 128 + 17, 5 * block_n - 16, 512, block_n};
      c.multicast = mc;
      c.grid = 6;
      c.raster = 3;
      SCOPED_TRACE(describe(c));
      EXPECT_TRUE(run_dense_case(c, seed + block_n + 1000 * static_cast<int>(mc)));
    }
  DenseCase single_row_block{100, 7 * 64, 256, 64};  // one row block: ShareB pairs it with an empty tile
  single_row_block.multicast = MC::ShareB;
  EXPECT_TRUE(run_dense_case(single_row_block, seed + 7)) << describe(single_row_block);
  DenseCase single_tile{50, 64, 128, 64};  // one tile: both pair members but one are outside
  single_tile.multicast = MC::ShareA;
  EXPECT_TRUE(run_dense_case(single_tile, seed + 8)) << describe(single_tile);
}

// Padded (cuBLASLt-native) scale layouts: the stage's scales arrive by bulk copy (block widths with one or two B
// blocks per tile: 32, 64, 128, 160, 192 -- 160-wide tiles start at all four 32-column offsets of a B block here;
// the others keep cp.async). Ragged M (not a multiple of 4: the copy reads the
// padding rows) and N (the last tile's second B block is clamped), K blocks not a multiple of 4, multicast pairs
// with a member outside the matrix, a persistent grid that wraps the stage ring, the direct epilogue.
TEST(Fp8GemmDense, BulkScaleCopiesBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using MC = ops::cuda::Fp8GemmMulticast;
  for (MC mc : {MC::None, MC::ShareA, MC::ShareB})
    for (int block_n : {32, 64, 128, 160, 192}) {
      DenseCase c{3 * 128 + 17, 5 * block_n - 16, 640, block_n};
      c.multicast = mc;
      c.grid = 6;
      c.bulk_layout = true;
      SCOPED_TRACE(describe(c));
      EXPECT_TRUE(run_dense_case(c, seed + block_n + 1000 * static_cast<int>(mc)));
    }
  DenseCase direct{258, 448, 1024, 192, Fp8GemmEpilogue::Direct};
  direct.bulk_layout = true;
  EXPECT_TRUE(run_dense_case(direct, seed + 5)) << describe(direct);
  DenseCase tiny{2, 64, 128, 64};
  tiny.bulk_layout = true;
  EXPECT_TRUE(run_dense_case(tiny, seed + 6)) << describe(tiny);
  DenseCase large_k{256, 400, 16384, 192};
  large_k.bulk_layout = true;
  EXPECT_TRUE(run_dense_case(large_k, seed + 7)) << describe(large_k);
}

// Split-K (one or two row blocks): both split-K widths, uneven ranges, one K block per range, ragged M and N,
// two row blocks, a persistent grid smaller than the unit count, both scale paths, and repeated launches
// (the per-tile counters must come back to zero) -- bit-exact against the CPU model with the same ranges
// (quant::GemmConfig::k_splits), which differs from the unsplit model.
TEST(Fp8GemmDense, SplitKBitExactAgainstTheSplitModel) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<DenseCase> cases;
  auto add = [&](int64_t m, int64_t n, int64_t k, int bn, int splits) {
    DenseCase c{m, n, k, bn};
    c.k_splits = splits;
    cases.push_back(c);
  };
  add(128, 2112, 7168, 64, 12);
  add(128, 1024, 2048, 32, 2);
  add(100, 1040, 1280, 64, 3);  // ragged M and N, 10 K blocks in ranges of 3/3/4
  add(256, 400, 1024, 32, 8);   // two row blocks, ragged N
  add(1, 16, 256, 32, 2);
  add(64, 384, 512, 64, 4);     // one K block per range
  add(200, 576, 896, 32, 7);
  for (DenseCase& c : cases) c.launches = 2;
  DenseCase few_ctas{128, 1024, 1024, 64};
  few_ctas.k_splits = 5;
  few_ctas.grid = 7;  // 80 units on 7 CTAs: each CTA finishes many ranges of many tiles
  cases.push_back(few_ctas);
  DenseCase bulk{128, 7168, 4096, 64};
  bulk.k_splits = 2;
  bulk.bulk_layout = true;
  cases.push_back(bulk);
  DenseCase bulk32{96, 1344, 2048, 32};
  bulk32.k_splits = 6;
  bulk32.bulk_layout = true;
  cases.push_back(bulk32);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(describe(cases[i]));
    EXPECT_TRUE(run_dense_case(cases[i], seed + 31 * i));
  }
  // The heuristic's own split on a DeepSeek-V3 decode-sized shape (the reference follows the launch).
  DenseCase heur{128, 7168, 2048, 0};
  heur.launches = 2;
  SCOPED_TRACE(describe(heur));
  EXPECT_TRUE(run_dense_case(heur, seed + 999));
}

// Tiles of 192 rows (three math warpgroups, block_n 128): ragged M (a last tile of 1..191 rows, one or two of
// its warpgroups entirely outside), K = 128 and long K, both scale paths, both epilogues, few CTAs, B multicast
// pairs.
TEST(Fp8GemmDense, ThreeWarpgroup192RowTilesBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<DenseCase> cases;
  for (int64_t m : {1, 64, 100, 192, 200, 385, 577}) {
    DenseCase c{m, 400, 384, 128};
    c.block_m = 192;
    cases.push_back(c);
  }
  DenseCase long_k{400, 256, 8192, 128};
  long_k.block_m = 192;
  cases.push_back(long_k);
  DenseCase k128{250, 1040, 128, 128};
  k128.block_m = 192;
  cases.push_back(k128);
  DenseCase direct{300, 272, 512, 128, Fp8GemmEpilogue::Direct};
  direct.block_m = 192;
  cases.push_back(direct);
  DenseCase few{1000, 1024, 640, 128};
  few.block_m = 192;
  few.grid = 5;
  cases.push_back(few);
  DenseCase bulk{1000, 1024, 1024, 128};
  bulk.block_m = 192;
  bulk.bulk_layout = true;
  cases.push_back(bulk);
  // B multicast in pairs of 192-row tiles: the last pair's second tile partial (577 rows: pairs of 384 + 193)
  // or wholly outside (385 rows: tiles 0, 1 and 2, so the second pair's partner has no row inside), few CTAs
  // (the stage ring wraps across units), both scale paths.
  for (int64_t m : {64, 385, 577, 1000}) {
    DenseCase c{m, 400, 640, 128};
    c.block_m = 192;
    c.multicast = ops::cuda::Fp8GemmMulticast::ShareB;
    c.grid = 4;
    c.bulk_layout = m != 577;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(describe(cases[i]));
    EXPECT_TRUE(run_dense_case(cases[i], seed + 17 * i));
  }
  // Only block_n 128, no A multicast, no split-K.
  DeviceArray<uint8_t> buf(1 << 20);
  DeviceArray<float> scales(1024);
  DeviceArray<uint16_t> out(1 << 16);
  Fp8GemmDenseProblem p;
  p.m = 256;
  p.n = 128;
  p.k = 256;
  p.a = buf.get();
  p.b = buf.get();
  p.a_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.b_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.d = out.get();
  Fp8GemmConfig bad;
  bad.block_m = 192;
  bad.block_n = 64;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad, nullptr), Error);
  bad.block_n = 128;
  bad.k_splits = 2;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad, nullptr), Error);
  bad.k_splits = 1;
  bad.multicast = ops::cuda::Fp8GemmMulticast::ShareA;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad, nullptr), Error);
  bad.multicast = ops::cuda::Fp8GemmMulticast::None;
  bad.block_m = 256;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad, nullptr), Error);
  // With block_n left to the heuristic, a request it does not combine with 192-row tiles gets 128-row ones.
  Fp8GemmDenseProblem large = p;
  large.m = 4096;
  large.n = 7168;
  large.k = 2048;
  const auto heur = ops::cuda::fp8gemm::prepare_dense(large, Fp8GemmConfig{});  // 128 x 192, B multicast
  EXPECT_EQ(heur.spec.warpgroups, 2);
  EXPECT_EQ(heur.spec.block_n, 192);
  EXPECT_EQ(heur.spec.multicast, ops::cuda::fp8gemm::Multicast::ShareB);
  Fp8GemmConfig mc;
  mc.multicast = ops::cuda::Fp8GemmMulticast::ShareA;
  const auto with_mc = ops::cuda::fp8gemm::prepare_dense(large, mc);
  EXPECT_EQ(with_mc.spec.warpgroups, 2);
  EXPECT_EQ(with_mc.spec.multicast, ops::cuda::fp8gemm::Multicast::ShareA);
  Fp8GemmConfig rows192;  // 192-row tiles asked for with the heuristic's width: block_n 128
  rows192.block_m = 192;
  rows192.multicast = ops::cuda::Fp8GemmMulticast::ShareB;
  const auto with_rows192 = ops::cuda::fp8gemm::prepare_dense(large, rows192);
  EXPECT_EQ(with_rows192.spec.warpgroups, 3);
  EXPECT_EQ(with_rows192.spec.block_n, 128);
  EXPECT_EQ(with_rows192.spec.multicast, ops::cuda::fp8gemm::Multicast::ShareB);
  Fp8GemmConfig split;
  split.k_splits = 2;
  large.m = 256;  // (the heuristic alone: 128 x 128, no split)
  const auto with_split = ops::cuda::fp8gemm::prepare_dense(large, split);
  EXPECT_EQ(with_split.spec.warpgroups, 2);
  EXPECT_EQ(with_split.args.k_splits, 2);
  EXPECT_EQ(with_split.spec.block_n, 64);
}

TEST(Fp8GemmDense, RejectsBadArguments) {
  DeviceArray<uint8_t> buf(1 << 20);
  DeviceArray<float> scales(1024);
  DeviceArray<uint16_t> out(1 << 16);
  Fp8GemmDenseProblem p;
  p.m = 128;
  p.n = 128;
  p.k = 256;
  p.a = buf.get();
  p.b = buf.get();
  p.a_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.b_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.d = out.get();
  Fp8GemmConfig config;
  Fp8GemmDenseProblem bad = p;
  bad.k = 200;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(bad, config, nullptr), Error);
  bad = p;
  bad.n = 120;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(bad, config, nullptr), Error);
  bad = p;
  bad.a = buf.get() + 8;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(bad, config, nullptr), Error);
  bad = p;
  bad.b_scales.data = nullptr;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(bad, config, nullptr), Error);
  Fp8GemmConfig bad_config;
  bad_config.block_n = 112;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  bad_config = config;
  bad_config.grid = -1;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  bad_config = config;  // the direct epilogue is built without clusters
  bad_config.epilogue = Fp8GemmEpilogue::Direct;
  bad_config.multicast = ops::cuda::Fp8GemmMulticast::ShareB;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  bad_config = config;  // split-K: at most K/128 ranges, only the split-K widths, no multicast
  bad_config.block_n = 64;
  bad_config.k_splits = 3;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  bad_config.k_splits = -1;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  bad_config.k_splits = 2;
  bad_config.block_n = 128;  // split-K is built for 32 and 64
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  bad_config.block_n = 64;
  bad_config.multicast = ops::cuda::Fp8GemmMulticast::ShareA;
  EXPECT_THROW(ops::cuda::fp8_gemm_dense(p, bad_config, nullptr), Error);
  p.m = 0;  // nothing to do: returns without launching
  EXPECT_NO_THROW(ops::cuda::fp8_gemm_dense(p, config, nullptr));
}

}  // namespace
}  // namespace fp8train::gputest
