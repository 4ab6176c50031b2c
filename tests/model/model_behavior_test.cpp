// The tiny model's behaviour beyond gradients: FP32 against FP64, bit-for-bit determinism, the recompute
// cache (same gradients, fewer cached bytes), activation-cache accounting, causality, parameter names,
// the router-bias update balancing a skewed router, a 10-step AdamW overfit of one batch, ModelConfig JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "../ops/gradcheck.h"
#include "model/model.h"
#include "ops/op_table.h"
#include "tensor/backend.h"

namespace fp8train::model {
namespace {

struct Batch {
  Tensor inputs, targets;
  int64_t batch = 0, seq = 0;
};

Batch random_batch(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * (seq + 1)));
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  std::vector<int32_t> in(batch * seq), tg(batch * seq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i) {
      in[b * seq + i] = tokens[b * (seq + 1) + i];
      tg[b * seq + i] = tokens[b * (seq + 1) + i + 1];
    }
  return {Tensor::from_vector(in, {batch * seq}), Tensor::from_vector(tg, {batch * seq}), batch, seq};
}

std::vector<std::vector<double>> grads_of(const DeepSeekV3Model& m) {
  std::vector<std::vector<double>> g;
  for (Parameter* p : m.parameters().trainable()) g.push_back(testing::as_doubles(p->grad));
  return g;
}

// Copies every parameter and buffer of `from` into `to` (f32 <-> f64 allowed).
void copy_weights(const DeepSeekV3Model& from, DeepSeekV3Model& to) {
  for (Parameter* p : from.parameters().trainable()) {
    Parameter& q = to.parameters().get(p->name);
    q.value.copy_from(testing::convert(p->value, q.value.dtype()));
  }
}

ModelConfig tiny(double init_std = 0.1) {
  ModelConfig c = tiny_test_config();
  c.init_std = init_std;
  return c;
}

// The benchmark's FLOP convention (../shared/bench/torch_moe_reference.py, flops_per_token) for its two configs:
// the values that script computes, (3674210304, 549453824) and (12819038208, 1633189888).
TEST(Model, TrainingFlopsFollowTheReferenceConvention) {
  ModelConfig c;
  c.vocab_size = 32768, c.hidden_size = 2048, c.n_layers = 6, c.n_dense_layers = 1, c.intermediate_size = 10944;
  c.n_heads = 16, c.q_lora_rank = 768, c.kv_lora_rank = 512, c.qk_nope_head_dim = 128, c.qk_rope_head_dim = 64;
  c.v_head_dim = 128, c.n_routed_experts = 64, c.num_experts_per_tok = 6, c.n_shared_experts = 2;
  c.moe_intermediate_size = 1408, c.mtp_depth = 0;
  ModelConfig::Flops f = c.training_flops(2048);
  EXPECT_EQ(f.active_params, 549453824);
  EXPECT_EQ(f.per_token, 3674210304.0);
  c.hidden_size = 7168, c.n_layers = 3, c.intermediate_size = 18432, c.n_heads = 128, c.q_lora_rank = 1536;
  c.n_routed_experts = 16, c.num_experts_per_tok = 4, c.n_shared_experts = 1, c.moe_intermediate_size = 2048;
  f = c.training_flops(4096);
  EXPECT_EQ(f.active_params, 1633189888);
  EXPECT_EQ(f.per_token, 12819038208.0);
  // An MTP module adds its projection, block and head.
  c.mtp_depth = 1;
  EXPECT_GT(c.training_flops(4096).active_params, 1633189888 + 2 * 7168 * 7168);
}

TEST(Model, Fp32MatchesFp64) {
  DeepSeekV3Model m32(tiny(), {.dtype = DType::F32, .seed = 3});
  DeepSeekV3Model m64(tiny(), {.dtype = DType::F64, .seed = 3});
  copy_weights(m32, m64);  // identical starting values
  const Batch b = random_batch(3, 12, 11, 1);
  m32.zero_grad();
  m64.zero_grad();
  const LossBreakdown l32 = m32.forward_backward(b.inputs, b.targets, b.batch);
  const LossBreakdown l64 = m64.forward_backward(b.inputs, b.targets, b.batch);
  EXPECT_NEAR(l32.main / l64.main, 1.0, 1e-6);
  EXPECT_NEAR(l32.mtp / l64.mtp, 1.0, 1e-6);
  EXPECT_NEAR(l32.balance / l64.balance, 1.0, 1e-5);
  const auto g32 = grads_of(m32), g64 = grads_of(m64);
  const auto names = m32.parameters().trainable();
  for (size_t i = 0; i < g32.size(); ++i) EXPECT_LT(testing::max_rel_diff(g32[i], g64[i]), 1e-4) << names[i]->name;
}

TEST(Model, BitForBitDeterministic) {
  const Batch b = random_batch(2, 16, 11, 2);
  DeepSeekV3Model a(tiny(), {.seed = 5}), c(tiny(), {.seed = 5});
  for (Parameter* p : a.parameters().trainable())
    EXPECT_EQ(p->value.to_vector<float>(), c.parameters().get(p->name).value.to_vector<float>()) << p->name;
  a.zero_grad();
  c.zero_grad();
  const LossBreakdown la = a.forward_backward(b.inputs, b.targets, b.batch);
  const LossBreakdown lc = c.forward_backward(b.inputs, b.targets, b.batch);
  EXPECT_EQ(la.total, lc.total);
  EXPECT_EQ(grads_of(a), grads_of(c));
  // a different seed gives different weights
  DeepSeekV3Model other(tiny(), {.seed = 6});
  EXPECT_NE(other.parameters().get("layers.0.attn.wq_a.weight").value.to_vector<float>(),
            a.parameters().get("layers.0.attn.wq_a.weight").value.to_vector<float>());
}

TEST(Model, RecomputingGivesTheSameGradientsWithFewerCachedBytes) {
  const Batch b = random_batch(2, 16, 11, 3);
  Allocator& alloc = backend(Device::cpu()).allocator();
  auto run = [&](const std::string& recipe, int64_t* peak) {
    DeepSeekV3Model m(tiny(), {.seed = 9, .recipe = recipe});
    m.zero_grad();
    const int64_t base = alloc.stats().current_of(MemCategory::ActivationCache);
    alloc.reset_peaks();
    const LossBreakdown l = m.forward_backward(b.inputs, b.targets, b.batch);
    *peak = alloc.stats().peak_of(MemCategory::ActivationCache) - base;
    EXPECT_EQ(alloc.stats().current_of(MemCategory::ActivationCache), base);  // all released after backward
    return std::pair{l.total, grads_of(m)};
  };
  int64_t peak_keep = 0, peak_recompute = 0;
  const auto keep = run("fp32", &peak_keep);
  const auto recompute = run("fp32:recompute_norm=on:recompute_mla_up=on:recompute_swiglu=on", &peak_recompute);
  EXPECT_EQ(keep.first, recompute.first);
  EXPECT_EQ(keep.second, recompute.second);
  EXPECT_GT(peak_keep, 0);
  EXPECT_LT(peak_recompute, peak_keep);
}

TEST(Model, MainLossIsCausal) {
  DeepSeekV3Model m(tiny(0.3), {.dtype = DType::F64, .seed = 4});
  const int64_t seq = 10, p = 4;
  std::vector<int32_t> in(seq), tg(seq, -1);
  for (int64_t i = 0; i < seq; ++i) in[i] = static_cast<int32_t>((i * 3 + 1) % 11);
  tg[p] = 7;  // only position p is scored
  auto loss = [&](const std::vector<int32_t>& tokens) {
    return m.forward(Tensor::from_vector(tokens, {seq}), Tensor::from_vector(tg, {seq}), 1).main;
  };
  const double base = loss(in);
  std::vector<int32_t> later = in, earlier = in;
  later[p + 1] = (later[p + 1] + 5) % 11;
  later[seq - 1] = (later[seq - 1] + 2) % 11;
  earlier[p - 2] = (earlier[p - 2] + 5) % 11;
  EXPECT_EQ(loss(later), base);   // future tokens do not leak into position p
  EXPECT_NE(loss(earlier), base); // past tokens do matter
  const Tensor logits = m.last_logits(Tensor::from_vector(in, {seq}), 1);
  EXPECT_EQ(logits.shape(), (Shape{1, 11}));
}

TEST(Model, ParameterNamesFollowTheLayout) {
  const ModelConfig c = tiny();
  DeepSeekV3Model m(c);
  for (const char* name :
       {"embed.weight", "head.weight", "norm.weight", "layers.0.attn_norm.weight", "layers.0.attn.wq_a.weight",
        "layers.0.attn.q_norm.weight", "layers.0.attn.wq_b.weight", "layers.0.attn.wkv_a.weight",
        "layers.0.attn.kv_norm.weight", "layers.0.attn.wkv_b.weight", "layers.0.attn.wo.weight",
        "layers.0.ffn_norm.weight", "layers.0.ffn.w1.weight", "layers.0.ffn.w2.weight", "layers.0.ffn.w3.weight",
        "layers.1.moe.gate.weight", "layers.1.moe.shared_experts.w1.weight", "layers.1.moe.experts.5.w1.weight",
        "layers.1.moe.experts.7.w2.weight", "mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.eh_proj.weight",
        "mtp.0.block.attn.wo.weight", "mtp.0.block.moe.experts.0.w3.weight", "mtp.0.norm.weight"})
    EXPECT_NE(m.parameters().find(name), nullptr) << name;
  const auto buffers = m.parameters().buffers();
  ASSERT_EQ(buffers.size(), 2u);  // the router biases of layers.1 and mtp.0
  EXPECT_EQ(buffers[0]->name, "layers.1.moe.gate.bias");
  EXPECT_EQ(buffers[1]->name, "mtp.0.block.moe.gate.bias");
  EXPECT_EQ(m.parameters().get("layers.1.moe.experts.5.w1.weight").value.shape(),
            (Shape{c.moe_intermediate_size, c.hidden_size}));
  EXPECT_EQ(m.parameters().get("layers.0.attn.wkv_a.weight").value.shape(),
            (Shape{c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size}));
  EXPECT_FALSE(m.parameters().get("norm.weight").weight_decay);
  EXPECT_TRUE(m.parameters().get("layers.0.attn.wo.weight").weight_decay);
  // norms start at one, weights ~ N(0, init_std²)
  for (float v : m.parameters().get("layers.0.attn.q_norm.weight").value.to_vector<float>()) EXPECT_EQ(v, 1.0f);
  ModelConfig big = c;
  big.init_std = 0.006;
  big.hidden_size = 64;
  DeepSeekV3Model mb(big);
  const std::vector<float> w = mb.parameters().get("layers.0.ffn.w2.weight").value.to_vector<float>();
  double ss = 0;
  for (float v : w) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(w.size())), 0.006, 0.0006);
  // tied embeddings: no separate head
  ModelConfig tied = c;
  tied.tie_embeddings = true;
  EXPECT_EQ(DeepSeekV3Model(tied).parameters().find("head.weight"), nullptr);
}

// The ready-group hook (ZeRO-1's overlap): called with 0, 1, ..., n_layers + 1 in order, and when group g is
// announced every parameter of that group already holds its final gradient, while the embedding (last) does not.
TEST(Model, GradReadyHookAnnouncesEachGroupOnceItsGradientsAreFinal) {
  const ModelConfig c = tiny();
  const int L = static_cast<int>(c.n_layers);
  DeepSeekV3Model m(c, {.seed = 5});
  EXPECT_EQ(m.grad_ready_group("mtp.0.norm.weight"), 0);
  EXPECT_EQ(m.grad_ready_group("head.weight"), 0);
  EXPECT_EQ(m.grad_ready_group("norm.weight"), 0);
  EXPECT_EQ(m.grad_ready_group("layers.0.attn.wo.weight"), L);
  EXPECT_EQ(m.grad_ready_group("layers.1.moe.experts.5.w1.weight"), L - 1);
  EXPECT_EQ(m.grad_ready_group("embed.weight"), L + 1);
  EXPECT_THROW(m.grad_ready_group("layers.x.attn.wo.weight"), Error);
  const Batch b = random_batch(2, 16, 11, 2);
  m.zero_grad();
  std::vector<int> seen;
  std::vector<std::vector<std::vector<double>>> at;  // every gradient when each group was announced
  m.set_grad_ready_hook([&](int g) {
    seen.push_back(g);
    at.push_back(grads_of(m));
  });
  m.forward_backward(b.inputs, b.targets, b.batch);
  m.set_grad_ready_hook(nullptr);
  std::vector<int> want(static_cast<size_t>(L + 2));
  for (int g = 0; g <= L + 1; ++g) want[static_cast<size_t>(g)] = g;
  ASSERT_EQ(seen, want);
  const auto final_grads = grads_of(m);
  const std::vector<Parameter*> params = m.parameters().trainable();
  for (size_t i = 0; i < params.size(); ++i) {
    const int g = m.grad_ready_group(params[i]->name);
    EXPECT_EQ(at[static_cast<size_t>(g)][i], final_grads[i]) << params[i]->name << " at group " << g;
    if (params[i]->name == "embed.weight") {
      EXPECT_NE(at[0][i], final_grads[i]) << "the embedding is final last";
    }
  }
}

// Each block's kept activations are released once its backward is done: the activation-cache bytes fall with every
// block announced; before the embedding's backward under 5 % is left (2 KiB of this model's 73 KiB, referenced outside
// the blocks' states), and nothing once the step returns.
TEST(Model, BackwardReleasesEachBlocksCacheAsItGoes) {
  const ModelConfig c = tiny();
  const int L = static_cast<int>(c.n_layers);
  DeepSeekV3Model m(c, {.seed = 5});
  const Batch b = random_batch(2, 16, 11, 2);
  m.zero_grad();
  const Allocator& alloc = backend(Device::cpu()).allocator();
  const int64_t before = alloc.stats().current_of(MemCategory::ActivationCache);
  std::vector<int64_t> cached;  // at each announced group
  m.set_grad_ready_hook(
      [&](int) { cached.push_back(alloc.stats().current_of(MemCategory::ActivationCache) - before); });
  m.forward_backward(b.inputs, b.targets, b.batch);
  m.set_grad_ready_hook(nullptr);
  ASSERT_EQ(cached.size(), static_cast<size_t>(L + 2));
  EXPECT_GT(cached[0], 0);  // after the tail: every block's cache
  for (int g = 1; g <= L; ++g) EXPECT_LT(cached[static_cast<size_t>(g)], cached[static_cast<size_t>(g - 1)]) << g;
  EXPECT_LT(cached[static_cast<size_t>(L)] * 20, cached[0]);
  EXPECT_EQ(alloc.stats().current_of(MemCategory::ActivationCache), before);
}

TEST(Model, LossBreakdownAndSchedulableKnobs) {
  DeepSeekV3Model m(tiny(), {.seed = 2});
  const Batch b = random_batch(2, 8, 11, 4);
  const LossBreakdown l = m.forward(b.inputs, b.targets, b.batch, true);
  ASSERT_EQ(l.mtp_per_depth.size(), 1u);
  EXPECT_NEAR(l.mtp, 0.3 * l.mtp_per_depth[0], 1e-12);  // λ/D·Σ L^k with λ = 0.3, D = 1
  EXPECT_NEAR(l.main, std::log(11.0), 0.1);              // near-uniform at init
  EXPECT_GT(l.balance, 0.0);
  m.set_mtp_lambda(0.0);
  EXPECT_EQ(m.forward(b.inputs, b.targets, b.batch, true).mtp, 0.0);
  m.set_seq_aux_loss_alpha(0.0);
  EXPECT_EQ(m.forward(b.inputs, b.targets, b.batch, true).balance, 0.0);
  const LossBreakdown eval = m.forward(b.inputs, b.targets, b.batch, false);  // inference path: no MTP
  EXPECT_TRUE(eval.mtp_per_depth.empty());
  EXPECT_EQ(eval.main, l.main);
  EXPECT_THROW(m.set_mtp_lambda(-1), Error);
  EXPECT_THROW(m.forward(b.inputs, b.targets, 3, false), Error);  // 16 tokens are not 3 sequences
}

// With γ > 0 the bias update drives a deliberately skewed router toward balance on a synthetic stream.
TEST(Router, BiasUpdateBalancesASkewedRouter) {
  ModelConfig c = tiny();
  c.hidden_size = 16;
  auto run = [&](double gamma) {
    ParameterSet params;
    MoE moe(params, "moe", c, DType::F32, 1);
    params.initialize(1, 0.5);  // gate rows with std 0.5: tokens differ in which experts they prefer
    // skew: expert e's gate row gets e·0.4 along a direction every token shares, so high experts dominate
    Tensor gate = params.get("moe.gate.weight").value;
    std::vector<float> g = gate.to_vector<float>();
    for (int64_t e = 0; e < c.n_routed_experts; ++e) g[e * c.hidden_size] += 0.4f * static_cast<float>(e);
    gate.copy_from(Tensor::from_vector(g, gate.shape()));
    const recipe::RecipeConfig fp32 = recipe::parse_recipe("fp32");
    ActivationStore store(fp32);
    StepContext ctx{.exec = ExecCtx::cpu(), .batch = 4, .seq = 64, .training = true, .recipe = &fp32, .store = &store};
    std::mt19937_64 rng(7);
    std::vector<int64_t> window(static_cast<size_t>(c.n_routed_experts), 0);
    const int steps = 300;
    for (int step = 0; step < steps; ++step) {
      Tensor u = testing::random_tensor({256, c.hidden_size}, DType::F32, rng, -1, 1);
      float* p = u.data<float>();
      for (int64_t t = 0; t < 256; ++t) p[t * c.hidden_size] = 2.0f + 0.5f * p[t * c.hidden_size];  // shared direction
      moe.forward(ctx, u, nullptr, nullptr, false);
      if (step >= steps - 20)
        for (size_t e = 0; e < window.size(); ++e) window[e] += moe.pending_load()[e];

      moe.update_bias(gamma);  // b_i += γ·sign(mean_load − load_i)
    }
    return ExpertLoad{"moe", window}.max_over_mean();
  };
  const double skewed = run(0.0), balanced = run(0.01);
  std::printf("max/mean load over the last 20 batches: gamma 0: %.3f, gamma 0.01: %.3f\n", skewed, balanced);
  EXPECT_GT(skewed, 2.0);     // the skew is real
  EXPECT_LT(balanced, 1.2);   // and the bias update removes it
}

TEST(Model, UpdateRouterBiasesUsesTheTrainingLoads) {
  DeepSeekV3Model m(tiny(), {.seed = 8});
  const Batch b = random_batch(4, 16, 11, 5);
  m.forward(b.inputs, b.targets, b.batch, true);  // eval forwards do not count
  for (const ExpertLoad& l : m.expert_loads())
    for (int64_t x : l.load) EXPECT_EQ(x, 0);
  m.zero_grad();
  m.forward_backward(b.inputs, b.targets, b.batch);
  const std::vector<ExpertLoad> loads = m.expert_loads();
  ASSERT_EQ(loads.size(), 2u);
  int64_t total = 0;
  for (int64_t x : loads[0].load) total += x;
  EXPECT_EQ(total, 64 * 2);  // every token's K = 2 choices, none dropped
  EXPECT_EQ(m.last_expert_loads()[0].load, loads[0].load);
  m.zero_grad();
  m.forward_backward(b.inputs, b.targets, b.batch);  // a second micro-batch: pending loads add up
  EXPECT_EQ(m.last_expert_loads()[0].load, loads[0].load);
  for (size_t e = 0; e < loads[0].load.size(); ++e) EXPECT_EQ(m.expert_loads()[0].load[e], 2 * loads[0].load[e]);
  total *= 2;
  m.set_bias_update_speed(0.5);
  m.update_router_biases();
  const std::vector<float> bias = m.parameters().get("layers.1.moe.gate.bias").value.to_vector<float>();
  const double mean = static_cast<double>(total) / 8;
  for (size_t e = 0; e < bias.size(); ++e) {
    const int64_t load = 2 * loads[0].load[e];
    const double expect = load < mean ? 0.5 : (load > mean ? -0.5 : 0.0);
    EXPECT_EQ(bias[e], static_cast<float>(expect)) << e;
  }
  for (const ExpertLoad& l : m.expert_loads())
    for (int64_t x : l.load) EXPECT_EQ(x, 0);  // loads restart after an update
}

// A minimal AdamW (the real optimizer lives in src/optim): decoupled weight decay, bias-corrected moments.
struct MinimalAdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  int step_count = 0;
  std::vector<std::vector<double>> m, v;
  void step(ParameterSet& params) {
    const auto list = params.trainable();
    if (m.empty())
      for (Parameter* p : list) {
        m.emplace_back(static_cast<size_t>(p->value.numel()), 0.0);
        v.emplace_back(static_cast<size_t>(p->value.numel()), 0.0);
      }
    ++step_count;
    const double c1 = 1 - std::pow(beta1, step_count), c2 = 1 - std::pow(beta2, step_count);
    for (size_t i = 0; i < list.size(); ++i) {
      float* w = list[i]->value.data<float>();
      const float* g = list[i]->grad.data<float>();
      for (size_t j = 0; j < m[i].size(); ++j) {
        m[i][j] = beta1 * m[i][j] + (1 - beta1) * g[j];
        v[i][j] = beta2 * v[i][j] + (1 - beta2) * g[j] * g[j];
        const double wd = list[i]->weight_decay ? weight_decay : 0.0;
        w[j] = static_cast<float>(w[j] - lr * (m[i][j] / c1 / (std::sqrt(v[i][j] / c2) + eps) + wd * w[j]));
      }
    }
  }
};

// 10 AdamW steps on one fixed batch (one sequence of 16 random tokens) of the tiny model, in FP32, with the
// router-bias update after each step: the main loss must fall by more than 90 %, at each of three learning rates
// (so the pass does not hinge on one tuned value).
TEST(Model, TenAdamWStepsOverfitOneBatch) {
  ModelConfig c = tiny_test_config();
  c.init_std = 0.02;
  const Batch b = random_batch(1, 16, c.vocab_size, 6);
  for (double lr : {0.04, 0.05, 0.06}) {
    DeepSeekV3Model m(c, {.dtype = DType::F32, .seed = 11});
    MinimalAdamW opt;
    opt.lr = lr;
    double first = 0;
    for (int step = 0; step < 10; ++step) {
      m.zero_grad();
      const LossBreakdown l = m.forward_backward(b.inputs, b.targets, b.batch);
      if (step == 0) first = l.main;
      opt.step(m.parameters());
      m.update_router_biases();
      m.mark_parameters_updated();
    }
    const double last = m.forward(b.inputs, b.targets, b.batch).main;
    std::printf("overfit lr %.2f: main loss %.4f -> %.4f (%.1f%% lower)\n", lr, first, last, 100 * (1 - last / first));
    EXPECT_LT(last, 0.1 * first) << "lr " << lr;
  }
}

TEST(Model, Bf16StaysCloseToFp32) {
  const Batch b = random_batch(2, 16, 11, 7);
  DeepSeekV3Model m(tiny(0.3), {.seed = 12});
  DeepSeekV3Model m16(tiny(0.3), {.seed = 12, .recipe = "bf16"});
  EXPECT_EQ(m16.compute_dtype(), DType::BF16);
  const double fp32 = m.forward(b.inputs, b.targets, b.batch, true).total;
  const double bf16 = m16.forward(b.inputs, b.targets, b.batch, true).total;
  EXPECT_NE(bf16, fp32);
  EXPECT_NEAR(bf16 / fp32, 1.0, 1e-2);
}

// The GEMMs read a compute copy of the weights, refreshed once after the parameters change: an edit of the
// master weights is invisible until mark_parameters_updated(), then fully visible.
TEST(Model, ComputeCopiesRefreshWhenTheParametersChange) {
  const Batch b = random_batch(2, 16, 11, 8);
  for (const char* recipe : {"bf16", "fp8-deepseek"}) {
    DeepSeekV3Model m(tiny(0.3), {.seed = 12, .recipe = recipe});
    const double before = m.forward(b.inputs, b.targets, b.batch).total;
    EXPECT_GT(m.compute_weight_bytes(), 0) << recipe;
    Tensor w = m.parameters().get("layers.0.attn.wq_b.weight").value;
    std::vector<float> v = w.to_vector<float>();
    for (float& x : v) x *= 1.5f;
    w.copy_from(Tensor::from_vector(v, w.shape()));
    EXPECT_EQ(m.forward(b.inputs, b.targets, b.batch).total, before) << recipe;  // still the old copy
    m.mark_parameters_updated();
    const double after = m.forward(b.inputs, b.targets, b.batch).total;
    EXPECT_NE(after, before) << recipe;
    DeepSeekV3Model fresh(tiny(0.3), {.seed = 12, .recipe = recipe});
    fresh.parameters().get("layers.0.attn.wq_b.weight").value.copy_from(w);
    fresh.mark_parameters_updated();
    EXPECT_EQ(fresh.forward(b.inputs, b.targets, b.batch).total, after) << recipe;
  }
}

TEST(ModelConfig, JsonRoundTripAndValidation) {
  ModelConfig c = tiny_test_config();
  c.rope_theta = 5000;
  c.tie_embeddings = true;
  const nlohmann::json j = to_json(c);
  EXPECT_EQ(j.at("q_lora_rank"), c.q_lora_rank);
  const ModelConfig back = model_config_from_json(j);
  EXPECT_EQ(to_json(back), j);
  EXPECT_THROW(model_config_from_json(nlohmann::json{{"hidden_sise", 8}}), Error);
  EXPECT_THROW(model_config_from_json(nlohmann::json{{"hidden_size", "big"}}), Error);
  ModelConfig bad = c;
  bad.n_group = 3;  // does not divide 8 experts
  EXPECT_THROW(bad.validate(), Error);
  bad = c;
  bad.qk_rope_head_dim = 3;
  EXPECT_THROW(bad.validate(), Error);
  bad = c;
  bad.num_experts_per_tok = 5;  // > 2 kept groups × 2 experts
  EXPECT_THROW(bad.validate(), Error);
  EXPECT_NO_THROW(bench_config().validate());
  EXPECT_NEAR(c.softmax_scale(), 1 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim)), 1e-15);
}

}  // namespace
}  // namespace fp8train::model

namespace fp8train::model {
namespace {

// Large enough that GEMMs, attention and the elementwise ops take their multi-threaded paths: 1 and 2 threads
// must give the same bits (GEMMs split by rows/columns only, reductions in fixed chunks).
TEST(Model, SameBitsWithOneAndTwoThreads) {
  ModelConfig c = tiny_test_config();
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.moe_intermediate_size = 32;
  c.init_std = 0.05;
  const Batch b = random_batch(8, 128, c.vocab_size, 9);
  auto run = [&](int threads) {
    ops::set_cpu_threads(threads);
    DeepSeekV3Model m(c, {.seed = 3});
    m.zero_grad();
    const double loss = m.forward_backward(b.inputs, b.targets, b.batch).total;
    return std::pair{loss, grads_of(m)};
  };
  const int before = ops::cpu_threads();
  const auto one = run(1), two = run(2);
  ops::set_cpu_threads(before);
  EXPECT_EQ(one.first, two.first);
  DeepSeekV3Model names(c, {.seed = 3});
  const auto params = names.parameters().trainable();
  ASSERT_EQ(one.second.size(), two.second.size());
  for (size_t i = 0; i < one.second.size(); ++i)
    EXPECT_TRUE(one.second[i] == two.second[i])
        << params[i]->name << " differs: max rel " << testing::max_rel_diff(one.second[i], two.second[i]);
}

}  // namespace
}  // namespace fp8train::model
