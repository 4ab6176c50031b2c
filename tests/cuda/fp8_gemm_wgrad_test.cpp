// Wgrad FP8 GEMM (src/ops/cuda/fp8_gemm_wgrad.cu), dense and K-grouped, against the CPU reference:
// d = c + A . B^T with 1x128 scales on both operands, FP32 output, must equal quant::ref_gemm (hopper,
// promote 128, accumulate) bit for bit — with and without c, accumulating in place (d == c), ragged M and
// N, every built block width; K-grouped: each expert's output from its own token range, empty experts
// leaving d[e] = c[e].
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "fp8_gemm_test_util.h"
#include "ops/cuda/fp8_gemm_plan.h"  // fp8gemm::prepare_wgrad: which scale path a layout takes

namespace fp8train::gputest {
namespace {

using ops::cuda::Fp8GemmConfig;
using ops::cuda::Fp8GemmWgradProblem;

enum class CMode { None, Separate, InPlace };

::testing::AssertionResult run_wgrad_case(int64_t m, int64_t n, int64_t k, int block_n, CMode c_mode, uint64_t seed,
                                          ops::cuda::Fp8GemmMulticast multicast = ops::cuda::Fp8GemmMulticast::Auto,
                                          bool bulk_layout = false, int block_m = 0,
                                          ops::cuda::Fp8GemmEpilogue epilogue = ops::cuda::Fp8GemmEpilogue::TmaStore) {
  const quant::QTensor a = random_e4m3(m, k, quant::Granularity::tile_1x128(), seed);
  const quant::QTensor b = random_e4m3(n, k, quant::Granularity::tile_1x128(), seed + 1);
  const std::vector<float> c = random_matrix(m, n, seed + 2);
  std::vector<float> want(static_cast<size_t>(m * n));
  quant::ref_gemm(a, b, hopper_config(c_mode != CMode::None), want.data(), c_mode != CMode::None ? c.data() : nullptr);

  const int64_t kb = k / 128;
  // bulk_layout: both scale arrays MN-major ([kb][rows], rows padded to 4): the bulk-copy scale path.
  const int64_t m_pad = (m + 3) / 4 * 4, n_pad = (n + 3) / 4 * 4;
  auto mn_major = [&](const std::vector<float>& s, int64_t rows, int64_t pad) {
    std::vector<float> t(static_cast<size_t>(kb * pad), 1e30f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < kb; ++g) t[g * pad + r] = s[r * kb + g];
    return t;
  };
  DeviceArray<uint8_t> da(a.code_vector()), db(b.code_vector());
  DeviceArray<float> dsa(bulk_layout ? mn_major(a.row_major_scales(), m, m_pad) : a.row_major_scales()),
      dsb(bulk_layout ? mn_major(b.row_major_scales(), n, n_pad) : b.row_major_scales()), dc(c), dd(static_cast<size_t>(m * n));
  Fp8GemmWgradProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = da.get();
  p.b = db.get();
  p.a_scales = bulk_layout ? ops::cuda::ScaleView{dsa.get(), 1, m_pad, 0} : ops::cuda::row_major_scale_view(dsa.get(), kb);
  p.b_scales = bulk_layout ? ops::cuda::ScaleView{dsb.get(), 1, n_pad, 0} : ops::cuda::row_major_scale_view(dsb.get(), kb);
  p.c = c_mode == CMode::Separate ? dc.get() : (c_mode == CMode::InPlace ? dc.get() : nullptr);
  p.d = c_mode == CMode::InPlace ? dc.get() : dd.get();
  Fp8GemmConfig config;
  config.block_n = block_n;
  config.multicast = multicast;
  config.grid = multicast == ops::cuda::Fp8GemmMulticast::Auto ? 0 : 4;
  config.block_m = block_m;
  config.epilogue = epilogue;
  const ops::cuda::fp8gemm::PreparedLaunch prepared = ops::cuda::fp8gemm::prepare_wgrad(p, config);
  const bool bulk = prepared.args.bulk_scales != 0;
  if (bulk != bulk_layout) return ::testing::AssertionFailure() << "bulk scale path " << bulk << " for this layout";
  // The staged TMA epilogue serves C absent or in place without multicast, unless "direct" is asked for.
  const bool want_staged = epilogue == ops::cuda::Fp8GemmEpilogue::TmaStore && c_mode != CMode::Separate &&
                           (multicast == ops::cuda::Fp8GemmMulticast::Auto ||
                            multicast == ops::cuda::Fp8GemmMulticast::None);
  if ((prepared.spec.out == ops::cuda::fp8gemm::Output::Fp32Tma) != want_staged)
    return ::testing::AssertionFailure() << "staged epilogue " << !want_staged << ", want " << want_staged;
  ops::cuda::fp8_gemm_wgrad(p, config, nullptr);
  return same_bits_f32(c_mode == CMode::InPlace ? dc.download() : dd.download(), want, n);
}

TEST(Fp8GemmWgrad, BitExactForEveryBlockWidthWithAndWithoutC) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  int count = 0;
  const int* block_ns = ops::cuda::fp8_gemm_wgrad_block_ns(&count);
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("block_n " + std::to_string(block_ns[i]));
    EXPECT_TRUE(run_wgrad_case(300, 208, 768, block_ns[i], CMode::Separate, seed + 3 * i));
    EXPECT_TRUE(run_wgrad_case(129, 96, 256, block_ns[i], CMode::None, seed + 3 * i + 1));
    EXPECT_TRUE(run_wgrad_case(64, 400, 128, block_ns[i], CMode::InPlace, seed + 3 * i + 2));
  }
}

// Both epilogues on the shapes that stress the staged one: the last tile's rows partly or wholly past M (a
// warpgroup with no rows loads and stores nothing), N not a multiple of 32 (a 32-column box past N is skipped),
// C absent and in place, 128- and 192-row tiles; and the same inputs through st.global.
TEST(Fp8GemmWgrad, StagedTmaEpilogueMatchesTheModelAndTheDirectOne) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using ops::cuda::Fp8GemmEpilogue;
  const auto none = ops::cuda::Fp8GemmMulticast::None;
  for (Fp8GemmEpilogue ep : {Fp8GemmEpilogue::TmaStore, Fp8GemmEpilogue::Direct})
    for (int block_n : {64, 96, 128}) {
      SCOPED_TRACE("block_n " + std::to_string(block_n) + (ep == Fp8GemmEpilogue::Direct ? " direct" : " tma"));
      EXPECT_TRUE(run_wgrad_case(2 * 128 + 40, 3 * block_n + 16, 384, block_n, CMode::InPlace, seed + block_n, none,
                                 false, 0, ep));
      EXPECT_TRUE(run_wgrad_case(64 + 3, 2 * block_n + 48, 256, block_n, CMode::None, seed + block_n + 1, none,
                                 false, 0, ep));
    }
  EXPECT_TRUE(run_wgrad_case(577, 272, 640, 128, CMode::InPlace, seed + 7, none, false, 192));
  EXPECT_TRUE(run_wgrad_case(130, 208, 384, 128, CMode::None, seed + 8, none, true, 192));
}

TEST(Fp8GemmWgrad, MulticastClustersBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using MC = ops::cuda::Fp8GemmMulticast;
  for (MC mc : {MC::None, MC::ShareA, MC::ShareB})
    for (int block_n : {64, 96, 128}) {
      SCOPED_TRACE("block_n " + std::to_string(block_n) + " multicast " + std::to_string(static_cast<int>(mc)));
      EXPECT_TRUE(run_wgrad_case(3 * 128 + 5, 3 * block_n + 16, 384, block_n, CMode::Separate, seed + block_n, mc));
    }
}

// MN-major padded scales on both operands (the bulk-copy scale path; cuBLASLt native VEC128 layout): ragged M
// (not a multiple of 4: the copy reads padding) and N, every width and multicast mode, C in place.
TEST(Fp8GemmWgrad, BulkScaleCopiesBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using MC = ops::cuda::Fp8GemmMulticast;
  for (MC mc : {MC::Auto, MC::ShareA, MC::ShareB})
    for (int block_n : {64, 96, 128}) {
      SCOPED_TRACE("block_n " + std::to_string(block_n) + " multicast " + std::to_string(static_cast<int>(mc)));
      EXPECT_TRUE(run_wgrad_case(3 * 128 + 5, 3 * block_n + 16, 640, block_n, CMode::Separate,
                                 seed + block_n + 100 * static_cast<int>(mc), mc, true));
    }
  EXPECT_TRUE(run_wgrad_case(256, 272, 8192, 0, CMode::InPlace, seed + 1, MC::Auto, true));
}

TEST(Fp8GemmWgrad, LongTokenAxisAndHeuristic) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  EXPECT_TRUE(run_wgrad_case(256, 272, 8192, 0, CMode::InPlace, seed));
}

TEST(Fp8GemmWgrad, KGroupedExpertsIncludingEmptyOnes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 200, n = 144;
  const std::vector<int> tokens = {300, 0, 128, 5, 0};
  const int groups = static_cast<int>(tokens.size());
  std::vector<int32_t> offsets(groups + 1, 0);
  for (int e = 0; e < groups; ++e) offsets[e + 1] = offsets[e] + (tokens[e] + 127) / 128 * 128;
  const int64_t k = offsets[groups];
  const int64_t kb = k / 128;
  // A = dY^T [m, k] and B = X^T [n, k] over the concatenated tokens; 1x128 tiles never straddle an expert,
  // so quantizing the whole token axis at once gives each expert's own tiles.
  const quant::QTensor a = random_e4m3(m, k, quant::Granularity::tile_1x128(), seed);
  const quant::QTensor b = random_e4m3(n, k, quant::Granularity::tile_1x128(), seed + 1);
  const std::vector<float> c = random_matrix(groups * m, n, seed + 2);
  std::vector<float> want(c.size());
  for (int e = 0; e < groups; ++e) {
    const int64_t k0 = offsets[e], k1 = offsets[e + 1];
    float* want_e = want.data() + e * m * n;
    const float* c_e = c.data() + e * m * n;
    if (k1 == k0) {
      std::copy(c_e, c_e + m * n, want_e);
      continue;
    }
    // Columns [k0, k1) of both operands (codes and their 1x128 scales).
    quant::ref_gemm(quant::k_slice(a, k0 / 128, k1 / 128), quant::k_slice(b, k0 / 128, k1 / 128), hopper_config(true),
                    want_e, c_e);
  }

  DeviceArray<uint8_t> da(a.code_vector()), db(b.code_vector());
  DeviceArray<float> dsa(a.row_major_scales()), dsb(b.row_major_scales()), dc(c), dd(c.size());
  DeviceArray<int32_t> doff(offsets);
  // The experts' problem over these operands, into d, adding c (null: none).
  auto problem = [&](const float* c_in, float* d_out) {
    Fp8GemmWgradProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.num_groups = groups;
    p.k_offsets = doff.get();
    p.a = da.get();
    p.b = db.get();
    p.a_scales = ops::cuda::row_major_scale_view(dsa.get(), kb);
    p.b_scales = ops::cuda::row_major_scale_view(dsb.get(), kb);
    p.c = c_in;
    p.d = d_out;
    return p;
  };
  using MC = ops::cuda::Fp8GemmMulticast;
  for (auto [block_n, mc] : {std::pair<int, MC>{64, MC::None}, {128, MC::Auto}, {96, MC::ShareA}, {128, MC::ShareB}}) {
    SCOPED_TRACE("block_n " + std::to_string(block_n) + " multicast " + std::to_string(static_cast<int>(mc)));
    dd.poison();
    const Fp8GemmWgradProblem p = problem(dc.get(), dd.get());
    Fp8GemmConfig config;
    config.block_n = block_n;
    config.multicast = mc;
    config.grid = 6;
    ops::cuda::fp8_gemm_wgrad(p, config, nullptr);
    EXPECT_TRUE(same_bits_f32(dd.download(), want, n));
  }
  // In place (gradient accumulation: the staged TMA epilogue, every expert's block its own TMA group), both
  // epilogues; and without C (zeros for the empty experts).
  std::vector<float> want_no_c(c.size(), 0.0f);
  for (int e = 0; e < groups; ++e)
    if (offsets[e + 1] > offsets[e])
      quant::ref_gemm(quant::k_slice(a, offsets[e] / 128, offsets[e + 1] / 128),
                      quant::k_slice(b, offsets[e] / 128, offsets[e + 1] / 128), hopper_config(false),
                      want_no_c.data() + e * m * n, nullptr);
  for (auto ep : {ops::cuda::Fp8GemmEpilogue::TmaStore, ops::cuda::Fp8GemmEpilogue::Direct})
    for (bool with_c : {true, false})
      for (int block_n : {64, 128}) {
        SCOPED_TRACE(std::string(with_c ? "in place" : "no C") + " block_n " + std::to_string(block_n) +
                     (ep == ops::cuda::Fp8GemmEpilogue::Direct ? " direct" : " tma"));
        DeviceArray<float> inout(c);
        if (!with_c) inout.poison();
        const Fp8GemmWgradProblem p = problem(with_c ? inout.get() : nullptr, inout.get());
        Fp8GemmConfig config;
        config.block_n = block_n;
        config.multicast = ops::cuda::Fp8GemmMulticast::None;
        config.epilogue = ep;
        EXPECT_EQ(ops::cuda::fp8gemm::prepare_wgrad(p, config).spec.out == ops::cuda::fp8gemm::Output::Fp32Tma,
                  ep == ops::cuda::Fp8GemmEpilogue::TmaStore);
        ops::cuda::fp8_gemm_wgrad(p, config, nullptr);
        EXPECT_TRUE(same_bits_f32(inout.download(), with_c ? want : want_no_c, n));
      }
}

TEST(Fp8GemmWgrad, RejectsBadArguments) {
  DeviceArray<uint8_t> buf(1 << 20);
  DeviceArray<float> scales(4096), out(1 << 16);
  Fp8GemmWgradProblem p;
  p.m = 128;
  p.n = 128;
  p.k = 256;
  p.a = buf.get();
  p.b = buf.get();
  p.a_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.b_scales = ops::cuda::row_major_scale_view(scales.get(), 2);
  p.d = out.get();
  Fp8GemmWgradProblem bad = p;
  bad.num_groups = 3;  // groups need k_offsets
  EXPECT_THROW(ops::cuda::fp8_gemm_wgrad(bad, {}, nullptr), Error);
  bad = p;
  bad.k = 200;  // TMA rows must be a multiple of 16 bytes (a partial last 128-block is fine)
  EXPECT_THROW(ops::cuda::fp8_gemm_wgrad(bad, {}, nullptr), Error);
  bad = p;
  bad.d = nullptr;
  EXPECT_THROW(ops::cuda::fp8_gemm_wgrad(bad, {}, nullptr), Error);
  Fp8GemmConfig config;
  config.block_n = 176;  // built for dense only
  EXPECT_THROW(ops::cuda::fp8_gemm_wgrad(p, config, nullptr), Error);
}

// 192-row tiles (three math warpgroups, block_n 128): ragged M (one or two warpgroups of the last tile outside),
// with and without C, in place, both scale paths.
TEST(Fp8GemmWgrad, ThreeWarpgroup192RowTilesBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto none = ops::cuda::Fp8GemmMulticast::None;
  EXPECT_TRUE(run_wgrad_case(200, 400, 512, 128, CMode::Separate, seed, none, false, 192));
  EXPECT_TRUE(run_wgrad_case(64, 272, 384, 128, CMode::None, seed + 3, none, false, 192));
  EXPECT_TRUE(run_wgrad_case(577, 256, 1024, 128, CMode::InPlace, seed + 6, none, false, 192));
  EXPECT_TRUE(run_wgrad_case(384, 528, 2048, 128, CMode::Separate, seed + 9, none, true, 192));
}

// The store-warp epilogues of K-grouped Wgrad (epilogue tma-ws: one staging buffer per math warpgroup, 128- and
// 192-row tiles; tma-ws2: two, 128-row tiles), bit for bit against the CPU model: ragged M (the last tile's
// warpgroups partly or wholly past M) and N (a 16-column last tile), empty experts (d = c, or zeros without C),
// in place and without C, both scale paths, and CTAs that run one tile (no refill), two (ws2: both buffers
// filled up front) or many (every barrier phase wraps several times).
TEST(Fp8GemmWgrad, StoreWarpEpiloguesKGroupedBitExact) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 200, n = 144;
  const std::vector<int> tokens = {300, 0, 128, 5, 0, 700};
  const int groups = static_cast<int>(tokens.size());
  std::vector<int32_t> offsets(groups + 1, 0);
  for (int e = 0; e < groups; ++e) offsets[e + 1] = offsets[e] + (tokens[e] + 127) / 128 * 128;
  const int64_t k = offsets[groups];
  const int64_t kb = k / 128;
  const quant::QTensor a = random_e4m3(m, k, quant::Granularity::tile_1x128(), seed);
  const quant::QTensor b = random_e4m3(n, k, quant::Granularity::tile_1x128(), seed + 1);
  const std::vector<float> c = random_matrix(groups * m, n, seed + 2);
  std::vector<float> want(c.size()), want_no_c(c.size(), 0.0f);
  for (int e = 0; e < groups; ++e) {
    const int64_t k0 = offsets[e], k1 = offsets[e + 1];
    std::copy(c.begin() + e * m * n, c.begin() + (e + 1) * m * n, want.begin() + e * m * n);
    if (k1 == k0) continue;
    const quant::QTensor ae = quant::k_slice(a, k0 / 128, k1 / 128), be = quant::k_slice(b, k0 / 128, k1 / 128);
    quant::ref_gemm(ae, be, hopper_config(true), want.data() + e * m * n, c.data() + e * m * n);
    quant::ref_gemm(ae, be, hopper_config(false), want_no_c.data() + e * m * n, nullptr);
  }
  // MN-major scales padded to 4 rows (the bulk-copy scale path) or QTensor's row-major ones (cp.async).
  auto mn_major = [&](const std::vector<float>& s, int64_t rows, int64_t pad) {
    std::vector<float> t(static_cast<size_t>(kb * pad), 1e30f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < kb; ++g) t[g * pad + r] = s[r * kb + g];
    return t;
  };
  const int64_t m_pad = (m + 3) / 4 * 4, n_pad = (n + 3) / 4 * 4;
  DeviceArray<uint8_t> da(a.code_vector()), db(b.code_vector());
  DeviceArray<float> dsa(a.row_major_scales()), dsb(b.row_major_scales());
  DeviceArray<float> dsa_mn(mn_major(a.row_major_scales(), m, m_pad)), dsb_mn(mn_major(b.row_major_scales(), n, n_pad));
  DeviceArray<int32_t> doff(offsets);
  using ops::cuda::Fp8GemmEpilogue;
  struct Variant {
    Fp8GemmEpilogue ep;
    int block_m;
  };
  for (const Variant v : {Variant{Fp8GemmEpilogue::TmaStoreWarp, 128}, Variant{Fp8GemmEpilogue::TmaStoreWarp, 192},
                          Variant{Fp8GemmEpilogue::TmaStoreWarp2, 128}})
    for (bool bulk : {false, true})
      for (bool with_c : {true, false})
        for (int grid : {0, 3, 16}) {
          SCOPED_TRACE(std::string(v.ep == Fp8GemmEpilogue::TmaStoreWarp ? "tma-ws" : "tma-ws2") + " block_m " +
                       std::to_string(v.block_m) + (bulk ? " bulk" : " cp.async") + (with_c ? " in place" : " no C") +
                       " grid " + std::to_string(grid));
          DeviceArray<float> inout(c);
          if (!with_c) inout.poison();
          Fp8GemmWgradProblem p;
          p.m = m;
          p.n = n;
          p.k = k;
          p.num_groups = groups;
          p.k_offsets = doff.get();
          p.a = da.get();
          p.b = db.get();
          p.a_scales =
              bulk ? ops::cuda::ScaleView{dsa_mn.get(), 1, m_pad, 0} : ops::cuda::row_major_scale_view(dsa.get(), kb);
          p.b_scales =
              bulk ? ops::cuda::ScaleView{dsb_mn.get(), 1, n_pad, 0} : ops::cuda::row_major_scale_view(dsb.get(), kb);
          p.c = with_c ? inout.get() : nullptr;
          p.d = inout.get();
          Fp8GemmConfig config;
          config.block_n = 128;
          config.block_m = v.block_m;
          config.grid = grid;
          config.epilogue = v.ep;
          const ops::cuda::fp8gemm::PreparedLaunch prepared = ops::cuda::fp8gemm::prepare_wgrad(p, config);
          EXPECT_EQ(prepared.args.bulk_scales != 0, bulk);
          EXPECT_EQ(prepared.spec.out, v.ep == Fp8GemmEpilogue::TmaStoreWarp ? ops::cuda::fp8gemm::Output::Fp32TmaWs
                                                                             : ops::cuda::fp8gemm::Output::Fp32TmaWs2);
          ops::cuda::fp8_gemm_wgrad(p, config, nullptr);
          EXPECT_TRUE(same_bits_f32(inout.download(), with_c ? want : want_no_c, n));
        }
  // Built for K-grouped FP8 Wgrad with block_n 128 only (tma-ws2: 128-row tiles); a separate C takes st.global.
  DeviceArray<float> out(c.size());
  Fp8GemmWgradProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.num_groups = groups;
  p.k_offsets = doff.get();
  p.a = da.get();
  p.b = db.get();
  p.a_scales = ops::cuda::row_major_scale_view(dsa.get(), kb);
  p.b_scales = ops::cuda::row_major_scale_view(dsb.get(), kb);
  p.d = out.get();
  Fp8GemmConfig config;
  config.epilogue = Fp8GemmEpilogue::TmaStoreWarp;
  config.block_n = 64;
  EXPECT_THROW(ops::cuda::fp8gemm::prepare_wgrad(p, config), Error);
  config.block_n = 128;
  config.block_m = 192;
  config.epilogue = Fp8GemmEpilogue::TmaStoreWarp2;
  EXPECT_THROW(ops::cuda::fp8gemm::prepare_wgrad(p, config), Error);
  config.block_m = 0;  // rows left open: tma-ws2 takes 128
  EXPECT_EQ(ops::cuda::fp8gemm::prepare_wgrad(p, config).spec.warpgroups, 2);
  Fp8GemmWgradProblem dense = p;
  dense.num_groups = 1;
  dense.k_offsets = nullptr;
  EXPECT_THROW(ops::cuda::fp8gemm::prepare_wgrad(dense, config), Error);
  DeviceArray<float> dc(c);
  Fp8GemmWgradProblem separate = p;
  separate.c = dc.get();
  EXPECT_EQ(ops::cuda::fp8gemm::prepare_wgrad(separate, config).spec.out, ops::cuda::fp8gemm::Output::Fp32Direct);
}

// The default configuration of the experts' K-grouped FP8 Wgrad: the store-warp epilogue, on 128-row tiles for
// moe_bench's short token ranges and 192-row tiles for long ones; the INT8 build (128-row tiles, fixed) and dense
// Wgrad keep the staged one.
TEST(Fp8GemmWgrad, DefaultConfigTakesTheStoreWarpForExperts) {
  struct Case {
    int64_t m, n, groups, tokens_per_group;
    bool int8;
    ops::cuda::fp8gemm::Output out;
    int warpgroups;
  };
  const auto ws = ops::cuda::fp8gemm::Output::Fp32TmaWs, tma = ops::cuda::fp8gemm::Output::Fp32Tma;
  for (const Case& c : {Case{2816, 2048, 64, 768, false, ws, 2}, Case{2048, 1408, 64, 896, false, ws, 2},
                        Case{4096, 7168, 8, 2048, false, ws, 3}, Case{4096, 7168, 8, 2048, true, tma, 2},
                        Case{7168, 2048, 1, 16384, false, tma, 3}}) {
    SCOPED_TRACE(fmt::format("{}x{}, {} x {} tokens{}", c.m, c.n, c.groups, c.tokens_per_group, c.int8 ? " int8" : ""));
    const int64_t k = c.groups * c.tokens_per_group;
    DeviceArray<uint8_t> a(static_cast<size_t>(c.m * k)), b(static_cast<size_t>(c.n * k));
    DeviceArray<float> sa(static_cast<size_t>(c.m * (k / 128))), sb(static_cast<size_t>(c.n * (k / 128)));
    DeviceArray<float> d(static_cast<size_t>(c.groups * c.m * c.n));
    std::vector<int32_t> offsets(static_cast<size_t>(c.groups + 1));
    for (int64_t g = 0; g <= c.groups; ++g)
      offsets[static_cast<size_t>(g)] = static_cast<int32_t>(g * c.tokens_per_group);
    DeviceArray<int32_t> doffsets(offsets);
    Fp8GemmWgradProblem p;
    p.m = c.m;
    p.n = c.n;
    p.k = k;
    p.num_groups = static_cast<int>(c.groups);
    p.k_offsets = c.groups > 1 ? doffsets.get() : nullptr;
    p.a = a.get();
    p.b = b.get();
    p.a_scales = ops::cuda::row_major_scale_view(sa.get(), k / 128);
    p.b_scales = ops::cuda::row_major_scale_view(sb.get(), k / 128);
    p.c = d.get();
    p.d = d.get();
    p.int8 = c.int8;
    const ops::cuda::fp8gemm::PreparedLaunch prepared = ops::cuda::fp8gemm::prepare_wgrad(p, Fp8GemmConfig{});
    EXPECT_EQ(prepared.spec.out, c.out);
    EXPECT_EQ(prepared.spec.warpgroups, c.warpgroups);
  }
}

}  // namespace
}  // namespace fp8train::gputest
