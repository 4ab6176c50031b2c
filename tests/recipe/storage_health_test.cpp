// Activation storage and numerics health:
//   every cache format stores exactly the bytes it claims (codes + 4-byte scales), booked in the allocator's
//   ActivationCache category, and reads back the values its quantization defines;
//   fp8-deepseek caches a Linear input in FP8 (the Fprop codes themselves), the attention output projection's
//   input in E5M6 with power-of-two scales; bf16 caches BF16; fp32 caches FP32;
//   health counters: saturation under stale delayed scales, underflow, scale range; sampled only when asked;
//   the outlier-channel test: an injected outlier channel crushes the small values under per-tensor scaling
//   and is contained by 1×128 tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "quant/quant.h"
#include "recipe/cached_activation.h"
#include "recipe/linear_gemm.h"
#include "tensor/backend.h"
#include "../common/random_data.h"

using namespace fp8train;
using namespace fp8train::recipe;

namespace {
using fp8train::test_data::randn;
int64_t cache_bytes_now() {
  return backend(Device::cpu()).allocator().stats().current_of(MemCategory::ActivationCache);
}
}  // namespace

TEST(CachedActivation, EveryFormatStoresTheBytesItClaims) {
  const int64_t rows = 37, cols = 300;  // ragged: 3 tiles per row, the last holds 44 columns
  const auto x = randn(rows * cols, 1);
  const int64_t n = rows * cols, tiles = rows * 3;
  struct Case {
    CacheFormat format;
    int64_t bytes;
  };
  const Case cases[] = {
      {CacheFormat::Fp32, 4 * n},
      {CacheFormat::Bf16, 2 * n},
      {CacheFormat::Fp8, n + 4 * tiles},
      {CacheFormat::Fp8Pow2, n + 4 * tiles},
      {CacheFormat::E5M6Pow2, 12 * ((n + 7) / 8) + 4 * tiles},
      {CacheFormat::Int8, n + 4 * tiles},
      {CacheFormat::Fp8Tensor, n + 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(cache_format_name(c.format)));
    const int64_t before = cache_bytes_now();
    std::vector<float> back;
    {
      const CachedActivation a = CachedActivation::store(x.data(), rows, cols, c.format);
      EXPECT_EQ(static_cast<int64_t>(a.bytes()), c.bytes);
      EXPECT_EQ(cache_bytes_now() - before, c.bytes);  // measured from the allocator
      back = a.values();
      if (a.quantized()) {
        const quant::QTensor q = quant::quantize(x.data(), rows, cols, cache_quant_config(c.format));
        EXPECT_EQ(back, quant::dequantize(q));
        EXPECT_EQ(a.quant().code_vector(), q.code_vector());
      }
    }
    EXPECT_EQ(cache_bytes_now(), before);  // released with the cache
    for (int64_t i = 0; i < n; i += 97) {
      switch (c.format) {
        case CacheFormat::Fp32: ASSERT_EQ(back[i], x[i]); break;
        case CacheFormat::Bf16: ASSERT_EQ(back[i], num::bf16_round(x[i])); break;
        case CacheFormat::E5M6Pow2: ASSERT_NEAR(back[i], x[i], 1.0 / 64 * std::fabs(x[i]) + 1e-6); break;
        case CacheFormat::Fp8Tensor: ASSERT_NEAR(back[i], x[i], 0.07 * std::fabs(x[i]) + 0.02); break;
        default: ASSERT_NEAR(back[i], x[i], 0.07 * std::fabs(x[i]) + 0.01);
      }
    }
  }
  EXPECT_THROW(parse_cache_format("fp4"), Error);
}

TEST(CachedActivation, E5M6ScalesArePowersOfTwo) {
  const auto x = randn(8 * 256, 3, 5.0f);
  const CachedActivation a = CachedActivation::store(x.data(), 8, 256, CacheFormat::E5M6Pow2);
  for (float s : a.quant().row_major_scales()) {
    int e;
    EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;
  }
  EXPECT_EQ(a.quant().format(), quant::Format::E5M6);
}

TEST(RecipeStorage, LinearInputsCachedPerRecipe) {
  const int64_t tokens = 64, in = 256, out = 128;
  const auto xv = randn(tokens * in, 2), wv = randn(out * in, 3, 0.05f);
  Tensor x = Tensor::from_vector(xv, {tokens, in}), w = Tensor::from_vector(wv, {out, in});
  Tensor y = Tensor::empty({tokens, out}, DType::F32);
  struct Case {
    const char* spec;
    CacheRole role;
    CacheFormat format;
    int64_t bytes;
  };
  const int64_t n = tokens * in, scales = 4 * tokens * 2;
  const Case cases[] = {
      {"fp32", CacheRole::LinearInput, CacheFormat::Fp32, 4 * n},
      {"bf16", CacheRole::LinearInput, CacheFormat::Bf16, 2 * n},
      {"bf16", CacheRole::AttnOutProjInput, CacheFormat::Bf16, 2 * n},
      {"fp8-deepseek", CacheRole::LinearInput, CacheFormat::Fp8, n + scales},
      {"fp8-deepseek:pow2=on", CacheRole::LinearInput, CacheFormat::Fp8Pow2, n + scales},
      {"fp8-deepseek", CacheRole::AttnOutProjInput, CacheFormat::E5M6Pow2, n * 3 / 2 + scales},
      {"fp8-deepseek:attn_out_e5m6=off", CacheRole::AttnOutProjInput, CacheFormat::Fp8, n + scales},
      {"fp8-deepseek:cache_linear=bf16", CacheRole::LinearInput, CacheFormat::Bf16, 2 * n},
      {"fp8-tensorwise", CacheRole::LinearInput, CacheFormat::Fp8Tensor, n + 4},
      {"int8-blockwise", CacheRole::LinearInput, CacheFormat::Int8, n + scales},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.spec) + " " + std::string(cache_role_name(c.role)));
    RecipeContext ctx(parse_recipe(c.spec));
    LinearGemm lin(ctx, "l", c.role);
    const int64_t before = cache_bytes_now();
    const CachedActivation a = lin.forward(x, w, y);
    EXPECT_EQ(a.format(), c.format);
    EXPECT_EQ(static_cast<int64_t>(a.bytes()), c.bytes);
    EXPECT_EQ(cache_bytes_now() - before, c.bytes);
  }
  // fp8-deepseek vs bf16 for a Linear input: (1 + 4·2/256) / 2 = 51.6 % of the bytes.
}

TEST(RecipeConfigTest, NamesOverridesAndErrors) {
  for (const auto& name : recipe_names()) EXPECT_EQ(make_recipe(name).spec, name);
  const RecipeConfig d = make_recipe("fp8-deepseek");
  EXPECT_EQ(d.promote_interval, 128);
  EXPECT_EQ(d.moment_dtype, "bf16");
  EXPECT_TRUE(d.swiglu_fp8 && d.attn_out_e5m6 && d.moe_dispatch_fp8 && d.recompute_norm && d.recompute_mla_up);
  const RecipeConfig n = parse_recipe("fp8-deepseek:promote=never:dgrad_block=on:pow2=on:grad=e5m2");
  EXPECT_EQ(n.promote_interval, 0);
  EXPECT_TRUE(n.dgrad_block128 && n.pow2_scales);
  EXPECT_EQ(n.grad_format, quant::Format::E5M2);
  EXPECT_EQ(gemm_operands(n, GemmKind::Dgrad).a.granularity, quant::Granularity::block_128x128());
  EXPECT_EQ(gemm_operands(d, GemmKind::Dgrad).a.granularity, quant::Granularity::tile_1x128());
  EXPECT_EQ(gemm_operands(n, GemmKind::Fprop).a.scale_mode, quant::ScaleMode::PowerOfTwo);
  const RecipeConfig t = make_recipe("fp8-tensorwise");
  EXPECT_EQ(gemm_operands(t, GemmKind::Dgrad).a.format, quant::Format::E5M2);
  EXPECT_TRUE(gemm_operands(t, GemmKind::Fprop).a.granularity.per_tensor);
  EXPECT_EQ(t.amax_history, 1024);
  EXPECT_EQ(gemm_operands(make_recipe("int8-blockwise"), GemmKind::Wgrad).a.rounding, quant::Rounding::Stochastic);
  EXPECT_EQ(gemm_operands(parse_recipe("int8-blockwise:stochastic=off"), GemmKind::Wgrad).a.rounding,
            quant::Rounding::Nearest);
  EXPECT_NE(describe_recipe(n).find("promote every never"), std::string::npos);
  EXPECT_THROW(parse_recipe("fp9"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:promote=100"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:nope=1"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:pow2"), Error);
  EXPECT_THROW(parse_recipe("bf16:promote=never"), Error);
  EXPECT_THROW(parse_recipe("fp8-tensorwise:dgrad_block=on"), Error);
  EXPECT_THROW(parse_recipe("int8-blockwise:grad=e5m2"), Error);
}

TEST(NumericsHealth, CountsSaturationUnderflowAndScaleRange) {
  const int64_t tokens = 32, in = 128, out = 128;
  auto xv = randn(tokens * in, 7), wv = randn(out * in, 8, 0.05f), dyv = randn(tokens * out, 9, 1e-3f);
  Tensor x = Tensor::from_vector(xv, {tokens, in}), w = Tensor::from_vector(wv, {out, in});
  Tensor y = Tensor::empty({tokens, out}, DType::F32);
  RecipeContext ctx(make_recipe("fp8-tensorwise"));
  LinearGemm lin(ctx, "tw");
  ctx.begin_step(0, false);
  lin.forward(x, w, y);  // history now holds amax(x)
  EXPECT_TRUE(ctx.take_health().empty());  // not sampled
  for (auto& v : xv) v *= 16.0f;  // the activations jump: the stale scale saturates them
  Tensor x16 = Tensor::from_vector(xv, {tokens, in});
  ctx.begin_step(1, true);
  lin.forward(x16, w, y);
  const auto h = ctx.take_health();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].kind, GemmKind::Fprop);
  EXPECT_EQ(h[0].a.elements, tokens * in);
  EXPECT_GT(h[0].a.saturated, tokens * in / 4);
  EXPECT_EQ(h[0].b.saturated, 0);
  EXPECT_EQ(h[0].a.scale_min, h[0].a.scale_max);  // one scale per tensor

  RecipeContext ctx2(make_recipe("fp8-deepseek"));
  LinearGemm lin2(ctx2, "ds");
  ctx2.begin_step(0, true);
  Tensor dy = Tensor::from_vector(dyv, {tokens, out});
  Tensor dx = Tensor::empty({tokens, in}, DType::F32), dw = Tensor::empty({out, in}, DType::F32);
  lin2.backward(dy, w, lin2.forward(x16, w, y), dx, dw);
  const auto h2 = ctx2.take_health();
  ASSERT_EQ(h2.size(), 3u);
  for (const auto& g : h2) {
    SCOPED_TRACE(std::string(gemm_kind_name(g.kind)));
    EXPECT_EQ(g.a.saturated, 0);  // online scales never saturate
    EXPECT_EQ(g.b.saturated, 0);
    EXPECT_LT(g.a.scale_min, g.a.scale_max);  // one scale per tile: a range
  }
}

// An outlier channel (one hidden dimension 1e5× larger than the rest) under per-tensor and 1×128 scaling.
TEST(NumericsHealth, OutlierChannelContainedByTiles) {
  const int64_t tokens = 64, hidden = 512, outlier = 5;
  auto xv = randn(tokens * hidden, 12);
  for (int64_t t = 0; t < tokens; ++t) xv[t * hidden + outlier] = 1e5f * (t % 2 ? 1.0f : -1.0f);
  const auto tensor_q = quant::quantize(xv.data(), tokens, hidden,
                                        {quant::Format::E4M3, quant::Granularity::tensor(), quant::ScaleMode::Amax,
                                         quant::Rounding::Nearest, 0});
  const auto tile_q = quant::quantize(xv.data(), tokens, hidden,
                                      {quant::Format::E4M3, quant::Granularity::tile_1x128(), quant::ScaleMode::Amax,
                                       quant::Rounding::Nearest, 0});
  const auto tv = quant::dequantize(tensor_q), lv = quant::dequantize(tile_q);
  // Error over the channels outside the outlier's tile (128..511).
  double err_tensor = 0, err_tile = 0, norm = 0;
  int64_t zero_tensor = 0, zero_tile = 0, count = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 128; c < hidden; ++c) {
      const double v = xv[t * hidden + c];
      norm += v * v;
      err_tensor += (tv[t * hidden + c] - v) * (tv[t * hidden + c] - v);
      err_tile += (lv[t * hidden + c] - v) * (lv[t * hidden + c] - v);
      zero_tensor += tv[t * hidden + c] == 0.0f;
      zero_tile += lv[t * hidden + c] == 0.0f;
      ++count;
    }
  const double rel_tensor = std::sqrt(err_tensor / norm), rel_tile = std::sqrt(err_tile / norm);
  EXPECT_GT(static_cast<double>(zero_tensor) / count, 0.10);  // small values lost under per-tensor scaling
  EXPECT_EQ(zero_tile, 0);
  EXPECT_GT(rel_tensor, 3 * rel_tile);
  EXPECT_LT(rel_tile, 0.05);
  // The health counters see the same thing through the recipes' Fprop.
  Tensor x = Tensor::from_vector(xv, {tokens, hidden});
  Tensor w = Tensor::from_vector(randn(128 * hidden, 13, 0.05f), {128, hidden});
  Tensor y = Tensor::empty({tokens, 128}, DType::F32);
  auto underflow = [&](const char* spec) {
    RecipeContext ctx(make_recipe(spec));
    LinearGemm lin(ctx, "o");
    lin.forward(x, w, y);  // warm the delayed-scaling history
    ctx.begin_step(1, true);
    lin.forward(x, w, y);
    const auto h = ctx.take_health();
    return static_cast<double>(h.at(0).a.underflow) / static_cast<double>(h.at(0).a.nonzero);
  };
  // 1×128 tiles confine the damage to the outlier's own tile (channels 0..127: a quarter of the values).
  const double tensorwise = underflow("fp8-tensorwise"), deepseek = underflow("fp8-deepseek");
  EXPECT_GT(tensorwise, 0.10);
  EXPECT_LT(deepseek, 0.25 * 0.25);
  EXPECT_GT(tensorwise, 3 * deepseek);
}
