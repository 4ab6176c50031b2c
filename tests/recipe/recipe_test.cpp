// Recipes as data (recipe/recipe.h): names, overrides and their errors, the operands of each GEMM, what each
// Linear role gets (linear_recipe), the model's precision policy; and the per-kind summary of the health records
// that metrics.jsonl carries (train/metrics.h gemm_error_summary).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "recipe/recipe.h"
#include "train/metrics.h"

using namespace fp8train;
using namespace fp8train::recipe;

TEST(RecipeConfigTest, NamesOverridesAndErrors) {
  for (const auto& name : recipe_names()) EXPECT_EQ(make_recipe(name).spec, name);
  const RecipeConfig d = make_recipe("fp8-deepseek");
  EXPECT_EQ(d.promote_interval, 128);
  EXPECT_EQ(d.moment_dtype, "bf16");
  EXPECT_TRUE(d.swiglu_fp8 && d.recompute_swiglu && d.attn_out_e5m6 && d.moe_dispatch_fp8 && d.recompute_norm &&
              d.recompute_mla_up);
  EXPECT_EQ(d.wgrad_input, WgradInput::Colwise);
  const RecipeConfig n = parse_recipe("fp8-deepseek:promote=never:dgrad_block=on:pow2=on:grad=e5m2:wgrad_x=retile");
  EXPECT_EQ(n.promote_interval, 0);
  EXPECT_TRUE(n.dgrad_block128 && n.pow2_scales);
  EXPECT_EQ(n.grad_format, quant::Format::E5M2);
  EXPECT_EQ(n.wgrad_input, WgradInput::Retile);
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
  EXPECT_NE(describe_recipe(d).find("wgrad input: colwise"), std::string::npos);
  EXPECT_THROW(parse_recipe("fp9"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:promote=100"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:nope=1"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:pow2"), Error);
  EXPECT_THROW(parse_recipe("bf16:promote=never"), Error);
  EXPECT_THROW(parse_recipe("bf16:wgrad_x=colwise"), Error);        // plain GEMMs keep x itself
  EXPECT_THROW(parse_recipe("fp8-deepseek:wgrad_x=plain"), Error);  // a quantized Wgrad quantizes x
  EXPECT_THROW(parse_recipe("fp8-deepseek:wgrad_x=sideways"), Error);
  EXPECT_THROW(parse_recipe("fp8-tensorwise:dgrad_block=on"), Error);
  EXPECT_THROW(parse_recipe("int8-blockwise:grad=e5m2"), Error);
  EXPECT_THROW(parse_recipe("fp8-deepseek:cache_linear=bf16"), Error);  // an option of the old cache, gone
}

// The precision policy: FP32 everywhere for fp32, BF16 activations and compute weights for every other recipe.
TEST(RecipeConfigTest, ComputeDtypeByRecipe) {
  EXPECT_EQ(make_recipe("fp32").compute_dtype(), DType::F32);
  for (const char* name : {"bf16", "fp8-deepseek", "fp8-tensorwise", "int8-blockwise"})
    EXPECT_EQ(make_recipe(name).compute_dtype(), DType::BF16) << name;
}

// What the recipe gives each Linear role: fp8-deepseek's W_O input in E5M6, the routed experts' dispatched
// input and gradient in power-of-two FP8; the same roles plain in bf16; no dispatch format for per-tensor
// recipes; every switch turns its choice off.
TEST(RecipeConfigTest, LinearRecipesByRole) {
  const RecipeConfig d = make_recipe("fp8-deepseek");
  const LinearRecipe attn_out = linear_recipe(d, LinearRole::AttnOut);
  EXPECT_TRUE(attn_out.quantized && attn_out.has_input_storage);
  EXPECT_EQ(attn_out.input_storage.format, quant::Format::E5M6);
  EXPECT_EQ(attn_out.input_storage.scale_mode, quant::ScaleMode::PowerOfTwo);
  const LinearRecipe up = linear_recipe(d, LinearRole::ExpertUp), down = linear_recipe(d, LinearRole::ExpertDown);
  EXPECT_TRUE(up.dispatched_input && !up.dispatched_grad);
  EXPECT_EQ(up.fprop.a.scale_mode, quant::ScaleMode::PowerOfTwo);
  EXPECT_TRUE(down.dispatched_grad && !down.dispatched_input);
  EXPECT_EQ(down.dgrad.a.scale_mode, quant::ScaleMode::PowerOfTwo);
  EXPECT_EQ(down.dgrad.a.granularity, quant::Granularity::tile_1x128());
  for (LinearRole r :
       {LinearRole::AttnQDown, LinearRole::AttnQUp, LinearRole::AttnKvDown, LinearRole::AttnKvUp, LinearRole::DenseUp,
        LinearRole::DenseDown, LinearRole::SharedExpertUp, LinearRole::SharedExpertDown, LinearRole::MtpProj}) {
    const LinearRecipe l = linear_recipe(d, r);
    EXPECT_TRUE(l.quantized && !l.has_input_storage && !l.dispatched_input && !l.dispatched_grad)
        << linear_role_name(r);
    EXPECT_EQ(l.wgrad_input, WgradInput::Colwise);
    EXPECT_EQ(l.fprop.a.scale_mode, quant::ScaleMode::Amax);
  }
  EXPECT_FALSE(linear_recipe(make_recipe("bf16"), LinearRole::ExpertUp).quantized);
  EXPECT_FALSE(linear_recipe(make_recipe("fp8-tensorwise"), LinearRole::ExpertUp).dispatched_input);
  const RecipeConfig off = parse_recipe("fp8-deepseek:attn_out_e5m6=off:dispatch_fp8=off");
  EXPECT_FALSE(linear_recipe(off, LinearRole::AttnOut).has_input_storage);
  EXPECT_FALSE(linear_recipe(off, LinearRole::ExpertUp).dispatched_input);
  EXPECT_FALSE(linear_recipe(off, LinearRole::ExpertDown).dispatched_grad);
}

TEST(GemmErrorSummary, PerKindPoolsAndAverages) {
  const nlohmann::json health = nlohmann::json::parse(R"([
    {"linear": "a", "gemm": "fprop", "calls": 1, "rel_error": 0.1, "err_sq": 1.0, "ref_sq": 100.0,
     "row_rel_error": 0.2, "rows": 8},
    {"linear": "b", "gemm": "fprop", "calls": 2, "rel_error": 0.3, "err_sq": 0.09, "ref_sq": 1.0,
     "row_rel_error": 0.4, "rows": 8},
    {"linear": "a", "gemm": "wgrad", "calls": 1, "rel_error": 0.0, "err_sq": 0.0, "ref_sq": 4.0}
  ])");
  const nlohmann::ordered_json s = train::gemm_error_summary(health);
  ASSERT_TRUE(s.is_object());
  EXPECT_FALSE(s.contains("dgrad"));
  EXPECT_EQ(s["fprop"]["linears"], 2);
  EXPECT_NEAR(s["fprop"]["pooled"].get<double>(), std::sqrt(1.09 / 101.0), 1e-12);
  EXPECT_NEAR(s["fprop"]["mean"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(s["fprop"]["max"].get<double>(), 0.3);
  EXPECT_EQ(s["fprop"]["max_linear"], "b");
  EXPECT_NEAR(s["fprop"]["row_mean"].get<double>(), 0.3, 1e-12);
  EXPECT_FALSE(s["wgrad"].contains("row_mean"));  // a record from before the row-wise error existed
  EXPECT_EQ(s["wgrad"]["pooled"].get<double>(), 0.0);
  EXPECT_TRUE(train::gemm_error_summary(nlohmann::json::array()).is_null());

  std::vector<nlohmann::json> rows = {{{"step", 1}, {"loss", 2.0}},
                                      {{"step", 2}, {"health", health}},
                                      {{"step", 4}, {"health", nlohmann::json::parse(R"([
    {"linear": "a", "gemm": "fprop", "calls": 1, "rel_error": 0.5, "err_sq": 25.0, "ref_sq": 100.0}])")}}};
  const nlohmann::ordered_json run = train::gemm_error_over_run(rows);
  EXPECT_EQ(run["fprop"]["samples"], 2);
  EXPECT_NEAR(run["fprop"]["mean"].get<double>(), (0.2 + 0.5) / 2, 1e-12);
  EXPECT_NEAR(run["fprop"]["pooled"].get<double>(), (std::sqrt(1.09 / 101.0) + 0.5) / 2, 1e-12);
  EXPECT_EQ(run["fprop"]["max"].get<double>(), 0.5);
  EXPECT_NEAR(run["fprop"]["row_mean"].get<double>(), 0.3, 1e-12);  // one sample has a row-wise error
  EXPECT_EQ(run["wgrad"]["samples"], 1);
}
