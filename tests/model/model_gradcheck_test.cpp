// FP64 central-difference gradient checks of every layer (SwiGLU FFN, MLA, DeepSeekMoE, Block) and of the
// whole tiny model (tiny_test_config: 2 layers: 1 dense, 1 MoE with 8 routed experts top-2 in 4 groups, 1 shared,
// MTP D = 1): for every parameter tensor and the layer inputs, max |fd − analytic| / max |analytic| < 1e-6.
// The checks use init_std 0.3 instead of 0.006 so that every gradient is well above the finite-difference
// round-off (with 0.006 the deepest gradients are ~1e-9 of the loss scale); the formulas do not depend on it.
#include <gtest/gtest.h>

#include <set>

#include "../ops/gradcheck.h"
#include "model/model.h"

namespace fp8train::model {
namespace {
using testing::grad_check_error;
using testing::random_tensor;

constexpr double kTolerance = 1e-6;

// The fp32 recipe on F64 tensors; `recipe` may ask for recomputation (every recomputed path must give the same
// gradients).
struct LayerHarness {
  ParameterSet params;
  recipe::RecipeConfig recipe = recipe::parse_recipe("fp32");
  ActivationStore store{recipe};
  StepContext ctx(int64_t batch, int64_t seq, bool training) {
    StepContext c;
    c.exec = ExecCtx::cpu();
    c.batch = batch;
    c.seq = seq;
    c.training = training;
    c.recipe = &recipe;
    c.store = &store;
    c.dtype = DType::F64;
    return c;
  }
  // Checks ∂L/∂p for every trainable parameter with the analytic gradients currently in p.grad.
  void check_params(const std::function<double()>& loss, int64_t max_samples = 0) {
    for (Parameter* p : params.trainable()) {
      const std::vector<double> g = p->grad.to_vector<double>();
      EXPECT_LT(grad_check_error(loss, p->value, g, 1e-6, max_samples), kTolerance) << p->name;
    }
  }
};

ModelConfig layer_config() {
  ModelConfig c = tiny_test_config();
  c.init_std = 0.3;
  return c;
}

// Every layer runs twice: keeping what backward needs, and keeping nothing recomputable (the caller's input,
// norm outputs, SwiGLU outputs and MLA up-projections recomputed in backward).
TEST(LayerGradCheck, SwigluFFN) {
  for (bool recompute : {false, true}) {
    LayerHarness hs;
    hs.recipe.recompute_swiglu = recompute;
    SwigluFFN ffn(hs.params, "ffn", 6, 5, DType::F64, 0, recipe::LinearRole::DenseUp, recipe::LinearRole::DenseDown);
    hs.params.initialize(1, 0.3);
    std::mt19937_64 rng(1);
    const Tensor x = random_tensor({7, 6}, DType::F64, rng), w = random_tensor({7, 6}, DType::F64, rng);
    auto loss = [&] { return testing::weighted_sum(ffn.forward(hs.ctx(1, 7, false), x, nullptr, false), w); };
    SwigluFFN::State st;
    const StepContext ctx = hs.ctx(1, 7, true);
    ffn.forward(ctx, x, &st, /*keep_input=*/!recompute);
    EXPECT_EQ(st.x2.defined(), !recompute);
    EXPECT_EQ(st.x13.defined(), !recompute);
    const Tensor dx = Tensor::empty({7, 6}, DType::F64);
    ffn.backward(ctx, st, w, x, dx, false);
    EXPECT_LT(grad_check_error(loss, x, dx.to_vector<double>()), kTolerance) << "recompute " << recompute;
    hs.check_params(loss);
  }
}

TEST(LayerGradCheck, MLA) {
  for (bool recompute : {false, true}) {
    LayerHarness hs;
    hs.recipe.recompute_norm = hs.recipe.recompute_mla_up = recompute;
    const ModelConfig c = layer_config();
    MLA mla(hs.params, "attn", c, DType::F64, 0);
    hs.params.initialize(2, 0.3);
    const int64_t batch = 2, seq = 6, n = batch * seq;
    std::mt19937_64 rng(2);
    const Tensor x = random_tensor({n, c.hidden_size}, DType::F64, rng);
    const Tensor w = random_tensor({n, c.hidden_size}, DType::F64, rng);
    auto loss = [&] { return testing::weighted_sum(mla.forward(hs.ctx(batch, seq, false), x, nullptr, false), w); };
    MLA::State st;
    const StepContext ctx = hs.ctx(batch, seq, true);
    mla.forward(ctx, x, &st, /*keep_input=*/!recompute);
    EXPECT_EQ(st.h_in.defined(), !recompute);
    EXPECT_EQ(st.q.kept, !recompute);
    const Tensor dx = Tensor::empty({n, c.hidden_size}, DType::F64);
    mla.backward(ctx, st, w, x, dx, false);
    EXPECT_LT(grad_check_error(loss, x, dx.to_vector<double>()), kTolerance) << "recompute " << recompute;
    hs.check_params(loss);
  }
}

TEST(LayerGradCheck, DeepSeekMoEWithSharedExpertAndBalanceLoss) {
  LayerHarness hs;
  ModelConfig c = layer_config();
  c.seq_aux_loss_alpha = 0.05;
  MoE moe(hs.params, "moe", c, DType::F64, 1);
  hs.params.initialize(3, 0.3);
  const int64_t batch = 2, seq = 8, n = batch * seq;
  std::mt19937_64 rng(3);
  const Tensor u = random_tensor({n, c.hidden_size}, DType::F64, rng);
  const Tensor w = random_tensor({n, c.hidden_size}, DType::F64, rng);
  // L = Σ w∘MoE(u) + balance loss
  auto loss = [&] {
    double bal = 0;
    const Tensor y = moe.forward(hs.ctx(batch, seq, false), u, nullptr, &bal, false);
    return testing::weighted_sum(y, w) + bal;
  };
  MoE::State st;
  const StepContext ctx = hs.ctx(batch, seq, true);
  double bal = 0;
  moe.forward(ctx, u, &st, &bal, true);
  EXPECT_GT(bal, 0.0);
  const Tensor du = Tensor::empty({n, c.hidden_size}, DType::F64);
  moe.backward(ctx, st, w, u, du, false);
  EXPECT_LT(grad_check_error(loss, u, du.to_vector<double>()), kTolerance);
  hs.check_params(loss);
  // every expert got tokens in this draw or the test would not cover their weights
  int64_t used = 0;
  for (int64_t l : moe.pending_load()) used += l > 0;
  EXPECT_GE(used, 6);
}

TEST(LayerGradCheck, BlockDenseAndMoE) {
  for (bool use_moe : {false, true}) {
    LayerHarness hs;
    const ModelConfig c = layer_config();
    Block block(hs.params, "layers.0", c, DType::F64, 0, use_moe);
    hs.params.initialize(4, 0.3);
    const int64_t batch = 2, seq = 5, n = batch * seq;
    std::mt19937_64 rng(4);
    const Tensor x = random_tensor({n, c.hidden_size}, DType::F64, rng);
    const Tensor w = random_tensor({n, c.hidden_size}, DType::F64, rng);
    auto loss = [&] {
      double bal = 0;
      return testing::weighted_sum(block.forward(hs.ctx(batch, seq, false), x, nullptr, &bal), w) + bal;
    };
    Block::State st;
    const StepContext ctx = hs.ctx(batch, seq, true);
    double bal = 0;
    block.forward(ctx, x, &st, &bal);
    const Tensor dresid = w.clone();
    block.backward(ctx, st, dresid);
    EXPECT_LT(grad_check_error(loss, x, dresid.to_vector<double>()), kTolerance) << "moe=" << use_moe;
    hs.check_params(loss, 48);
  }
}

// The whole tiny model: every parameter tensor (all elements) against central differences of the training
// total (main CE + λ/D·L^1 + balance loss).
TEST(ModelGradCheck, TinyModelEveryParameterF64) {
  ModelConfig c = tiny_test_config();
  c.init_std = 0.3;
  DeepSeekV3Model model(c, {.dtype = DType::F64, .seed = 7});
  const int64_t batch = 3, seq = 6, n = batch * seq;
  std::mt19937_64 rng(5);
  std::vector<int32_t> in(n), tg(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(rng() % c.vocab_size);
  for (int64_t i = 0; i < n; ++i) tg[i] = (i % seq == seq - 1) ? -1 : in[i + 1];  // last position: no target
  const Tensor inputs = Tensor::from_vector(in, {n}), targets = Tensor::from_vector(tg, {n});
  model.zero_grad();
  const double grad_scale = 0.5;
  const LossBreakdown lb = model.forward_backward(inputs, targets, batch, grad_scale);
  EXPECT_GT(lb.mtp, 0.0);
  EXPECT_GT(lb.balance, 0.0);
  EXPECT_NEAR(lb.total, lb.main + lb.mtp + lb.balance, 1e-15);
  const LossBreakdown again = model.forward(inputs, targets, batch, true);
  EXPECT_EQ(again.total, lb.total);  // the forward-only path computes the same loss
  auto loss = [&] { return grad_scale * model.forward(inputs, targets, batch, true).total; };
  // a parameter without gradient must be an expert that no token chose
  std::set<std::string> idle_experts;
  for (const ExpertLoad& l : model.expert_loads())
    for (size_t e = 0; e < l.load.size(); ++e)
      if (l.load[e] == 0) idle_experts.insert(l.layer + ".experts." + std::to_string(e) + ".");
  EXPECT_LE(idle_experts.size(), 4u) << "too few experts exercised by this batch";
  int checked = 0;
  for (Parameter* p : model.parameters().trainable()) {
    const std::vector<double> g = p->grad.to_vector<double>();
    double mx = 0;
    for (double v : g) mx = std::max(mx, std::abs(v));
    bool idle = false;
    for (const std::string& prefix : idle_experts) idle = idle || p->name.rfind(prefix, 0) == 0;
    if (idle) {
      EXPECT_EQ(mx, 0.0) << p->name;
    } else {
      EXPECT_GT(mx, 0.0) << p->name << " gets no gradient";
    }
    EXPECT_LT(grad_check_error(loss, p->value, g), kTolerance) << p->name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(model.parameters().trainable().size()));
}

}  // namespace
}  // namespace fp8train::model

namespace fp8train::model {
namespace {

// The other branches of the model: tied embeddings (head = embedding table), no shared expert, ungrouped
// routing, MTP depth 2 (module 2 chains on module 1's output) and recomputing everything recomputable.
TEST(ModelGradCheck, TiedNoSharedExpertMtpDepth2RecomputingF64) {
  ModelConfig c = tiny_test_config();
  c.init_std = 0.3;
  c.tie_embeddings = true;
  c.n_shared_experts = 0;
  c.n_group = 1;
  c.topk_group = 1;
  c.mtp_depth = 2;
  DeepSeekV3Model model(
      c, {.dtype = DType::F64, .seed = 13, .recipe = "fp32:recompute_norm=on:recompute_mla_up=on:recompute_swiglu=on"});
  const int64_t batch = 2, seq = 7, n = batch * seq;
  std::mt19937_64 rng(6);
  std::vector<int32_t> in(n), tg(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(rng() % c.vocab_size);
  for (int64_t i = 0; i < n; ++i) tg[i] = (i % seq == seq - 1) ? static_cast<int32_t>(rng() % c.vocab_size) : in[i + 1];
  const Tensor inputs = Tensor::from_vector(in, {n}), targets = Tensor::from_vector(tg, {n});
  model.zero_grad();
  const LossBreakdown lb = model.forward_backward(inputs, targets, batch);
  ASSERT_EQ(lb.mtp_per_depth.size(), 2u);
  EXPECT_NEAR(lb.mtp, c.mtp_lambda / 2 * (lb.mtp_per_depth[0] + lb.mtp_per_depth[1]), 1e-14);
  EXPECT_EQ(model.parameters().find("head.weight"), nullptr);
  EXPECT_EQ(model.parameters().find("layers.1.moe.shared_experts.w1.weight"), nullptr);
  auto loss = [&] { return model.forward(inputs, targets, batch, true).total; };
  for (Parameter* p : model.parameters().trainable())
    EXPECT_LT(testing::grad_check_error(loss, p->value, p->grad.to_vector<double>(), 1e-6, 24), kTolerance) << p->name;
}

}  // namespace
}  // namespace fp8train::model
