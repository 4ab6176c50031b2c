// The recipes inside the DeepSeek-V3 model (ModelOptions::recipe; model/linear.h, model/activation_store.h):
//   memory: one training step's peak of kept activation bytes, measured by the allocator, for fp8-deepseek is
//   <= 55 % of bf16's; AdamW state with the recipe's moment dtype is <= 75 % of bf16's;
//   each storage choice of fp8-deepseek keeps what it claims (format and bytes booked), and each switch turns it
//   off; recomputed kinds are not kept;
//   a whole model step under every recipe gives losses and gradients close to FP32 (and identical runs repeat
//   bit for bit).
//   Model dims: hidden 128 so 1×128 tiles are full; batch 2 × seq 64 tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "../model/linear_harness.h"
#include "model/model.h"
#include "ops/quantize.h"
#include "optim/adamw.h"
#include "tensor/backend.h"

using namespace fp8train;
using namespace fp8train::model;

namespace {

ModelConfig config() {
  ModelConfig c;
  c.vocab_size = 64;
  c.hidden_size = 128;
  c.n_layers = 2;
  c.n_dense_layers = 1;
  c.n_heads = 2;
  c.q_lora_rank = 64;
  c.kv_lora_rank = 64;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 32;
  c.v_head_dim = 64;
  c.intermediate_size = 256;
  c.moe_intermediate_size = 128;
  c.n_routed_experts = 4;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.mtp_depth = 1;
  c.init_std = 0.02;
  return c;
}

struct Batch {
  Tensor inputs, targets;
  int64_t batch;
};
Batch batch(uint64_t seed, int64_t b = 2) {
  const int64_t s = 64;
  std::mt19937_64 rng(seed);
  std::vector<int32_t> in(b * s), tg(b * s);
  for (auto& t : in) t = static_cast<int32_t>(rng() % 64);
  for (int64_t i = 0; i < b * s; ++i) tg[i] = (i + 1) % s == 0 ? -1 : in[i + 1];
  return {Tensor::from_vector(in, {b * s}), Tensor::from_vector(tg, {b * s}), b};
}

Allocator& allocator() { return backend(Device::cpu()).allocator(); }

struct StepResult {
  LossBreakdown loss;
  int64_t peak_cache = 0;
  std::vector<std::vector<float>> grads;
};

StepResult step(const std::string& spec, uint64_t seed = 7, int64_t sequences = 2) {
  DeepSeekV3Model m(config(), {.dtype = DType::F32, .seed = 3, .recipe = spec});
  const Batch b = batch(seed, sequences);
  m.zero_grad();
  allocator().reset_peaks();
  const int64_t before = allocator().stats().current_of(MemCategory::ActivationCache);
  StepResult r;
  r.loss = m.forward_backward(b.inputs, b.targets, b.batch);
  r.peak_cache = allocator().stats().peak_of(MemCategory::ActivationCache) - before;
  for (Parameter* p : m.parameters().trainable()) r.grads.push_back(p->grad.to_vector<float>());
  return r;
}

double rel_norm_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) {
      num += (double(a[i][j]) - b[i][j]) * (double(a[i][j]) - b[i][j]);
      den += double(b[i][j]) * b[i][j];
    }
  return std::sqrt(num / den);
}

}  // namespace

// The quantized recipes pad each expert's rows to the grouped FP8 GEMM's 128-row block (ops/moe_dispatch.h): with
// 2 × 64 tokens (64 expert rows per expert) the padding alone doubles the MoE activations, so the memory
// comparison takes 8 × 64 tokens (256 rows per expert, where the padding is what a real batch pays).
TEST(ModelRecipe, ActivationAndOptimizerMemoryRatios) {
  const StepResult bf16 = step("bf16", 7, 8), fp8 = step("fp8-deepseek", 7, 8), fp32 = step("fp32", 7, 8);
  ASSERT_GT(bf16.peak_cache, 0);
  const double ratio = double(fp8.peak_cache) / double(bf16.peak_cache);
  RecordProperty("fp8_over_bf16_activation_bytes", std::to_string(ratio));
  EXPECT_LE(ratio, 0.55) << "fp8-deepseek " << fp8.peak_cache << " B vs bf16 " << bf16.peak_cache << " B";
  EXPECT_GT(ratio, 0.2);  // it still caches what backward needs
  EXPECT_LT(bf16.peak_cache, fp32.peak_cache);

  // Optimizer state: AdamW with each recipe's moment dtype, bytes of the moment arenas actually held.
  DeepSeekV3Model m(config(), {.seed = 3});
  ParameterSet& ps = m.parameters();
  ps.finalize();
  const optim::ParamArenas params{ps.value_arena(),    ps.grad_arena(),   ps.decay_range(),
                                  ps.no_decay_range(), ps.expert_range(), 1};
  auto state_bytes = [&](const std::string& spec) {
    optim::AdamWConfig c;
    c.moment_dtype = optim::parse_moment_dtype(recipe::parse_recipe(spec).moment_dtype);
    const optim::AdamW opt(c, params);
    return double(opt.state_bytes());
  };
  EXPECT_LE(state_bytes("fp8-deepseek") / state_bytes("bf16"), 0.75);
}

TEST(ModelRecipe, EveryRecipeTrainsCloseToFp32AndRepeats) {
  const StepResult ref = step("fp32");
  for (const char* spec : {"bf16", "fp8-deepseek", "fp8-deepseek:promote=never", "fp8-deepseek:dgrad_block=on",
                           "fp8-deepseek:pow2=on", "fp8-tensorwise", "int8-blockwise"}) {
    SCOPED_TRACE(spec);
    const StepResult r = step(spec);
    EXPECT_TRUE(std::isfinite(r.loss.total));
    EXPECT_NEAR(r.loss.main / ref.loss.main, 1.0, 0.01);
    // fp8-tensorwise's first step runs on the initial scale 1 (empty amax history): coarse, still bounded.
    EXPECT_LT(rel_norm_diff(r.grads, ref.grads), std::string(spec) == "fp8-tensorwise" ? 1.0 : 0.25);
    const StepResult again = step(spec);
    EXPECT_EQ(again.loss.total, r.loss.total);
    EXPECT_EQ(again.grads, r.grads);
  }
}

// Each storage choice of fp8-deepseek, through the Linears and the activation store the model uses, with the
// bytes the allocator books under MemCategory::ActivationCache.
TEST(ModelRecipe, StorageChoicesKeepWhatTheyClaim) {
  const int64_t rows = 128, cols = 256;
  std::vector<float> v(rows * cols);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> n01;
  for (auto& x : v) x = n01(rng);
  const int64_t n = rows * cols, row_scales = 4 * rows * (cols / 128), col_scales = 4 * cols * (rows / 128);
  auto booked = [&](const std::function<void()>& keep) {
    const int64_t before = allocator().stats().current_of(MemCategory::ActivationCache);
    keep();
    return allocator().stats().current_of(MemCategory::ActivationCache) - before;
  };
  auto check = [&](const std::string& spec, bool fp8_choices) {
    SCOPED_TRACE(spec);
    const recipe::RecipeConfig rc = recipe::parse_recipe(spec);
    ActivationStore store(rc);
    StepContext ctx;
    ctx.exec = ExecCtx::cpu();
    ctx.training = true;
    ctx.recipe = &rc;
    ctx.store = &store;
    ctx.dtype = DType::BF16;
    const Tensor f32 = Tensor::from_vector(v, {rows, cols});
    auto bf16_copy = [&] {
      const Tensor t = Tensor::empty({rows, cols}, DType::BF16);
      ops::copy(ctx.exec, f32, t);
      return t;
    };
    // Recomputed kinds are not kept.
    for (CacheKind k : {CacheKind::NormOutput, CacheKind::MlaUpProjection, CacheKind::SwigluOutput}) {
      EXPECT_EQ(store.keeps(k), !fp8_choices) << cache_kind_name(k);
      EXPECT_EQ(store.maybe_save(ctx.exec, bf16_copy(), k).kept, !fp8_choices);
    }
    // The SwiGLU input: FP8 E4M3 with 1×128 scales (BF16 with swiglu_fp8=off), read back as BF16.
    SavedTensor sw;
    EXPECT_EQ(booked([&] { sw = store.save(ctx.exec, bf16_copy(), CacheKind::SwigluInput); }),
              fp8_choices ? n + row_scales : 2 * n);
    const std::vector<float> back = model::testing::values(store.load(ctx.exec, sw));
    for (int64_t i = 0; i < n; i += 37) ASSERT_NEAR(back[i], v[i], 0.07 * std::fabs(v[i]) + 0.02);
    // A producer that quantizes the SwiGLU input itself (a fused kernel) hands the store the same payload.
    const auto form = store.quantized_form(ctx.exec, CacheKind::SwigluInput);
    ASSERT_EQ(form.has_value(), fp8_choices);
    EXPECT_FALSE(store.quantized_form(ctx.exec, CacheKind::NormInput).has_value());
    if (form) {
      SavedTensor pre;
      EXPECT_EQ(booked([&] {
                  pre = store.save_quantized(
                      ops::quantize(ctx.exec, bf16_copy(), form->first, ops::QuantizeOutputs::Rowwise, form->second),
                      DType::BF16, CacheKind::SwigluInput);
                }),
                n + row_scales);
      EXPECT_EQ(model::testing::values(store.load(ctx.exec, pre)), back);
      const quant::QTensor q =
          ops::quantize(ctx.exec, bf16_copy(), form->first, ops::QuantizeOutputs::Rowwise, form->second);
      EXPECT_THROW(store.save_quantized(q, DType::BF16, CacheKind::NormInput), Error);
    }
    // Norm inputs (the residual stream) in the compute dtype, router state as computed (FP32).
    SavedTensor norm_in, router;
    EXPECT_EQ(booked([&] { norm_in = store.save(ctx.exec, bf16_copy(), CacheKind::NormInput); }), 2 * n);
    EXPECT_EQ(booked([&] { router = store.save(ctx.exec, f32.clone(), CacheKind::RouterState); }), 4 * n);
    // A Linear's input for Wgrad: the column-wise FP8 copy (128×1 tiles of x).
    ParameterSet params;
    Linear dense(params, "dense", cols, 64, recipe::LinearRole::DenseUp, DType::F32, 0);
    LinearInput kept, kept_wo, kept_up;
    EXPECT_EQ(booked([&] { dense.forward(ctx, bf16_copy(), &kept); }), n + col_scales);
    EXPECT_TRUE(kept.qt.defined() && !kept.x.defined());
    // W_O's input: E5M6 (12 bits per value, power-of-two 1×128 scales); its column-wise FP8 copy without E5M6.
    Linear wo(params, "wo", cols, 64, recipe::LinearRole::AttnOut, DType::F32, 0);
    EXPECT_EQ(booked([&] { wo.forward(ctx, bf16_copy(), &kept_wo); }),
              fp8_choices ? n * 3 / 2 + row_scales : n + col_scales);
    EXPECT_EQ(kept_wo.stored.defined(), fp8_choices);
    // The routed experts' input: the dispatched FP8 tokens (power-of-two), kept re-tiled for Wgrad.
    Linear up(params, Tensor::zeros({2 * 64, cols}, DType::F32), Tensor::zeros({2 * 64, cols}, DType::F32), "up",
              recipe::LinearRole::ExpertUp, 0, 2);
    const Tensor offsets = Tensor::from_vector(std::vector<int32_t>{0, 128, 128}, {3});
    const Tensor y = Tensor::empty({rows, 64}, DType::BF16);
    const int64_t expert_bytes = booked([&] {
      LinearInput in;
      if (fp8_choices) {
        quant::QuantSpec pow2 = recipe::linear_recipe(rc, recipe::LinearRole::ExpertUp).fprop.a;
        in = up.dispatched(ctx, ops::quantize(ctx.exec, bf16_copy(), pow2), Tensor(), true);
      } else {
        in = up.prepare(ctx, bf16_copy(), true);
      }
      up.forward(ctx, in, y, offsets);
      kept_up = up.kept(ctx, in);
    });
    EXPECT_EQ(expert_bytes, n + col_scales);
    EXPECT_EQ(kept_up.qt.pow2_scales, fp8_choices);
  };
  check("fp8-deepseek", true);
  check(
      "fp8-deepseek:attn_out_e5m6=off:swiglu_fp8=off:recompute_swiglu=off:dispatch_fp8=off:recompute_norm=off:"
      "recompute_mla_up=off",
      false);
}
