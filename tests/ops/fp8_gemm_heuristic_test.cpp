// The block-size heuristics of fp8train's own FP8 GEMM kernels (ops/cuda/fp8_gemm.h): pure host functions of the
// shape and the SM count, checked here without a GPU so CI covers them. The expected choices are the ones measured
// fastest (or within 3 %) on the H200 (docs/fp8_gemm.md: the block_n, split-K, 192-row and Wgrad
// sweeps). Also the text form of a kernel configuration (parse_fp8_gemm_config). Built only with the CUDA backend.
#include <gtest/gtest.h>

#if FP8TRAIN_HAVE_CUDA
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "ops/cuda/fp8_gemm.h"

namespace fp8train {
namespace {

using ops::cuda::Fp8GemmConfig;

TEST(Fp8GemmHeuristic, PicksBuiltWidthsTileRowsAndSplitsAsMeasured) {
  int count = 0;
  const int* block_ns = ops::cuda::fp8_gemm_dense_block_ns(&count);
  const std::vector<int> built(block_ns, block_ns + count);
  for (int64_t m : {128, 4096})
    for (auto nk : {std::pair<int64_t, int64_t>{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384},
                    {4096, 7168}, {7168, 2048}}) {
      const Fp8GemmConfig c = ops::cuda::fp8_gemm_dense_heuristic(m, nk.first, nk.second, 132);
      EXPECT_NE(std::find(built.begin(), built.end(), c.block_n), built.end()) << c.describe();
    }
  // The choices measured fastest on the H200 (the block_n sweep; BN 192 once it had bulk
  // scale copies and the two-block promotion):
  // one row block: the narrowest width whose tiles fit in one wave (64 -> 112 CTAs for N = 7168) ...
  EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(128, 7168, 16384, 132).block_n, 64);
  EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(128, 24576, 1536, 132).block_n, 192);
  EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(128, 32768, 512, 132).block_n, 128);  // no width fits: 128
  for (auto nk : {std::pair<int64_t, int64_t>{7168, 16384}, {24576, 1536}, {32768, 512}, {7168, 2048}})
    EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(128, nk.first, nk.second, 132).k_splits, 1);
  // ... unless its tiles fill at most half the SMs: split K (docs/fp8_gemm.md, split-K sweep).
  const Fp8GemmConfig n2112 = ops::cuda::fp8_gemm_dense_heuristic(128, 2112, 7168, 132);
  EXPECT_EQ(n2112.block_n, 32);  // 66 tiles x 2 ranges
  EXPECT_EQ(n2112.k_splits, 2);
  const Fp8GemmConfig n4096 = ops::cuda::fp8_gemm_dense_heuristic(128, 4096, 7168, 132);
  EXPECT_EQ(n4096.block_n, 64);  // 64 tiles x 2 ranges
  EXPECT_EQ(n4096.k_splits, 2);
  EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(128, 4096, 768, 132).k_splits, 1);  // ranges would be < 8 K blocks
  // ... many row blocks: 128-row tiles of the width with the fewest waves x per-tile cost, in pairs sharing B
  // (docs/fp8_gemm.md: 128 x 192 with B multicast at or above 192 x 128 everywhere; 4096 x 4096 x
  // 7168 keeps 128 x 128, 8 waves against 6 of 128 x 192 at 3/4 of the work per wave).
  using MC = ops::cuda::Fp8GemmMulticast;
  auto shape_of = [](const Fp8GemmConfig& c) {
    return std::to_string(c.block_m) + "x" + std::to_string(c.block_n) +
           (c.multicast == MC::ShareB ? " mcB" : (c.multicast == MC::ShareA ? " mcA" : ""));
  };
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(4096, 2112, 7168, 132)), "128x192 mcB");
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(4096, 24576, 1536, 132)), "128x192 mcB");
  // (N = 7168: 128 x 160 would fill 11 waves at 99 % where 128 x 192 needs 10 at 92 %, but measured 2-3 % slower)
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(4096, 7168, 16384, 132)), "128x192 mcB");
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(4096, 7168, 2048, 132)), "128x192 mcB");
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(4096, 32768, 512, 132)), "128x192 mcB");
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(4096, 4096, 7168, 132)), "128x128 mcB");
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(8192, 8192, 8192, 132)), "128x192 mcB");
  EXPECT_EQ(shape_of(ops::cuda::fp8_gemm_dense_heuristic(128, 7168, 16384, 132)), "128x64");  // few rows: no pairs
  EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(128, 7168, 16384, 132).block_m, 128);  // few rows: always 128
  EXPECT_EQ(ops::cuda::fp8_gemm_dense_heuristic(4096, 2112, 7168, 132).k_splits, 1);  // many row blocks: never
  EXPECT_EQ(ops::cuda::fp8_gemm_grouped_heuristic(8 * 4096, 4096, 7168, 132).block_n, 192);
  EXPECT_EQ(ops::cuda::fp8_gemm_wgrad_heuristic(7168, 2048, 16384, 1, 132).block_n, 128);
  EXPECT_EQ(ops::cuda::fp8_gemm_wgrad_heuristic(7168, 2048, 16384, 1, 132).block_m, 192);  // 5 waves vs 7: faster
  EXPECT_EQ(ops::cuda::fp8_gemm_wgrad_heuristic(4096, 7168, 16384, 8, 132).block_m, 192);
  EXPECT_EQ(ops::cuda::fp8_gemm_wgrad_heuristic(256, 2048, 16384, 1, 132).block_m, 128);
  EXPECT_EQ(ops::cuda::fp8_gemm_grouped_heuristic(8 * 4096, 4096, 7168, 132).block_m, 128);  // experts pad to 128
  EXPECT_EQ(ops::cuda::fp8_gemm_grouped_heuristic(8 * 4096, 4096, 7168, 132).k_splits, 1);
  // Grouped: pairs of column tiles sharing A (measured 1149 vs 1090 TFLOP/s); Wgrad: none.
  EXPECT_EQ(ops::cuda::fp8_gemm_grouped_heuristic(8 * 4096, 4096, 7168, 132).multicast, MC::ShareA);
  EXPECT_EQ(ops::cuda::fp8_gemm_wgrad_heuristic(7168, 2048, 16384, 1, 132).multicast, MC::None);
}

// parse_fp8_gemm_config (the text form `fp8train bench gemm --config` takes): every key, the defaults for keys
// left out, and a clear error naming the bad pair.
TEST(Fp8GemmConfigText, ParsesEveryKeyAndKeepsDefaults) {
  using MC = ops::cuda::Fp8GemmMulticast;
  const Fp8GemmConfig c =
      ops::cuda::parse_fp8_gemm_config("block=192x128,multicast=B,grid=66,raster=8,epilogue=direct,splits=3");
  EXPECT_EQ(c.block_m, 192);
  EXPECT_EQ(c.block_n, 128);
  EXPECT_EQ(c.multicast, MC::ShareB);
  EXPECT_EQ(c.grid, 66);
  EXPECT_EQ(c.raster_group_m, 8);
  EXPECT_EQ(c.epilogue, ops::cuda::Fp8GemmEpilogue::Direct);
  EXPECT_EQ(c.k_splits, 3);
  const Fp8GemmConfig d = ops::cuda::parse_fp8_gemm_config("block=32,multicast=A");
  const Fp8GemmConfig defaults;
  EXPECT_EQ(d.block_n, 32);
  EXPECT_EQ(d.block_m, defaults.block_m);
  EXPECT_EQ(d.multicast, MC::ShareA);
  EXPECT_EQ(d.grid, defaults.grid);
  EXPECT_EQ(d.raster_group_m, defaults.raster_group_m);
  EXPECT_EQ(d.epilogue, defaults.epilogue);
  EXPECT_EQ(d.k_splits, defaults.k_splits);
  EXPECT_EQ(ops::cuda::parse_fp8_gemm_config("multicast=none").multicast, MC::None);
  EXPECT_EQ(ops::cuda::parse_fp8_gemm_config("multicast=auto,epilogue=tma").multicast, MC::Auto);
  // The store-warp epilogues of K-grouped Wgrad, and describe() naming them back.
  const Fp8GemmConfig ws = ops::cuda::parse_fp8_gemm_config("block=192x128,epilogue=tma-ws");
  EXPECT_EQ(ws.epilogue, ops::cuda::Fp8GemmEpilogue::TmaStoreWarp);
  EXPECT_NE(ws.describe().find("epilogue tma-ws,"), std::string::npos) << ws.describe();
  const Fp8GemmConfig ws2 = ops::cuda::parse_fp8_gemm_config("epilogue=tma-ws2");
  EXPECT_EQ(ws2.epilogue, ops::cuda::Fp8GemmEpilogue::TmaStoreWarp2);
  EXPECT_NE(ws2.describe().find("epilogue tma-ws2"), std::string::npos) << ws2.describe();
}

TEST(Fp8GemmConfigText, BadTextNamesTheProblem) {
  auto error_of = [](const std::string& text) {
    try {
      ops::cuda::parse_fp8_gemm_config(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("block=128,").find("empty"), std::string::npos);
  EXPECT_NE(error_of("block=128,,splits=2").find("empty"), std::string::npos);
  EXPECT_NE(error_of("block").find("not key=value"), std::string::npos);
  EXPECT_NE(error_of("block=").find("not key=value"), std::string::npos);
  EXPECT_NE(error_of("tile=128").find("unknown key 'tile'"), std::string::npos);
  EXPECT_NE(error_of("block=128x").find("block columns = ''"), std::string::npos);
  EXPECT_NE(error_of("block=12x64").find("block rows = '12'"), std::string::npos);
  EXPECT_NE(error_of("block=128x512").find("block columns = '512'"), std::string::npos);
  EXPECT_NE(error_of("block=abc").find("block = 'abc'"), std::string::npos);
  EXPECT_NE(error_of("multicast=C").find("multicast = 'C'"), std::string::npos);
  EXPECT_NE(error_of("epilogue=fast").find("epilogue = 'fast'"), std::string::npos);
  EXPECT_NE(error_of("splits=-1").find("splits = '-1'"), std::string::npos);
  EXPECT_NE(error_of("splits=2x").find("splits = '2x'"), std::string::npos);
}

}  // namespace
}  // namespace fp8train
#endif  // FP8TRAIN_HAVE_CUDA
