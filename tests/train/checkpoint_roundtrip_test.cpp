// Checkpoint round trip through the arenas: master weights, both AdamW moments (BF16 codes or FP32), the step count
// and the non-trainable state come back bit for bit into a freshly built model and optimizer; model.safetensors
// holds the BF16 (round to nearest even) or FP32 compute weights; a checkpoint whose moments are of another dtype
// than the optimizer's is refused without touching it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "common/error.h"
#include "numerics/formats.h"
#include "optim/adamw.h"
#include "toy_model.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"

using namespace fp8train;
using namespace fp8train::train;
using fp8train::train::testing::BigramModel;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("fp8train-ckpt-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Random gradients in the model's gradient arena (every view), from a fixed seed.
void random_grads(BigramModel& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const optim::ParamArenas& p = m.parameters();
  for (size_t i = 0; i < p.layout().views().size(); ++i) {
    std::vector<float> g(static_cast<size_t>(p.layout().view(i).numel));
    for (float& x : g) x = normal(rng);
    p.grads.view(i).copy_from(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
  }
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  if (t.dtype() == DType::BF16) {
    std::vector<uint16_t> out;
    for (bf16 x : t.to_vector<bf16>()) out.push_back(x.bits);
    return out;
  }
  const std::vector<float> f = t.to_vector<float>();
  std::vector<uint16_t> out;
  for (float x : f) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    out.push_back(static_cast<uint16_t>(u));
    out.push_back(static_cast<uint16_t>(u >> 16));
  }
  return out;
}

}  // namespace

TEST(CheckpointRoundTrip, RestoresWeightsMomentsStepAndStateBitForBit) {
  for (optim::MomentDtype dtype : {optim::MomentDtype::BF16, optim::MomentDtype::F32}) {
    SCOPED_TRACE(optim::moment_dtype_name(dtype));
    for (bool bf16_weights : {true, false}) {
      TempDir dir(std::string(optim::moment_dtype_name(dtype)) + (bf16_weights ? "-bf16w" : "-f32w"));
      optim::AdamWConfig cfg;
      cfg.moment_dtype = dtype;
      BigramModel a(40, /*seed=*/3);
      optim::AdamW opt_a(cfg, a.parameters());
      for (int s = 0; s < 3; ++s) {
        random_grads(a, 100 + s);
        opt_a.step(ExecCtx::cpu(), a.parameters(), 1e-2);
      }
      a.state().at(0).value.copy_from(Tensor::from_vector(std::vector<float>{0.5f, -0.25f, 0.125f, 3.0f}, {4}));
      const nlohmann::json config = {{"test", true}};
      CheckpointWrite w;
      w.config = &config;
      w.bf16_weights = bf16_weights;
      w.model = &a;
      w.optimizer = &opt_a;
      w.state.step = 3;
      const std::string step_dir = save_checkpoint(dir.path.string(), w);

      BigramModel b(40, /*seed=*/77);
      optim::AdamW opt_b(cfg, b.parameters());
      ASSERT_NE(a.weights(), b.weights());
      load_checkpoint(read_checkpoint_meta(step_dir), b, &opt_b);
      EXPECT_EQ(bits_of(a.parameters().values.flat()), bits_of(b.parameters().values.flat()));
      EXPECT_EQ(bits_of(opt_a.exp_avg().flat()), bits_of(opt_b.exp_avg().flat()));
      EXPECT_EQ(bits_of(opt_a.exp_avg_sq().flat()), bits_of(opt_b.exp_avg_sq().flat()));
      EXPECT_EQ(opt_b.step_count(), 3);
      EXPECT_EQ(a.router_bias(), b.router_bias());
      // model.safetensors: the compute weights under the parameter names
      const StFile weights = read_safetensors((fs::path(step_dir) / "model.safetensors").string());
      const StTensor& w_st = weights.get("bigram.weight", "model.safetensors");
      EXPECT_EQ(w_st.shape, (std::vector<int64_t>{40, 40}));
      const std::vector<float> master = a.parameters().values.view("bigram.weight").to_vector<float>();
      if (bf16_weights) {
        ASSERT_EQ(w_st.dtype, StDtype::BF16);
        const std::vector<uint16_t> codes = st_to_bf16_codes(w_st);
        for (size_t i = 0; i < codes.size(); ++i) ASSERT_EQ(codes[i], num::bf16_encode(master[i])) << i;
      } else {
        ASSERT_EQ(w_st.dtype, StDtype::F32);
        EXPECT_EQ(st_to_f32(w_st), master);
      }
      // the next step is the same on both
      random_grads(a, 200);
      random_grads(b, 200);
      opt_a.step(ExecCtx::cpu(), a.parameters(), 1e-2);
      opt_b.step(ExecCtx::cpu(), b.parameters(), 1e-2);
      EXPECT_EQ(a.weights(), b.weights());

      // moments are stored in their own dtype
      const StFile moments = read_safetensors((fs::path(step_dir) / "optimizer.safetensors").string());
      EXPECT_EQ(moments.get("exp_avg.bigram.bias", "optimizer").dtype,
                dtype == optim::MomentDtype::BF16 ? StDtype::BF16 : StDtype::F32);
    }
  }
}

TEST(CheckpointRoundTrip, RefusesMomentsOfAnotherDtypeWithoutTouchingTheOptimizer) {
  TempDir dir("dtype");
  optim::AdamWConfig bf16_cfg;
  bf16_cfg.moment_dtype = optim::MomentDtype::BF16;
  BigramModel a(20);
  optim::AdamW opt_a(bf16_cfg, a.parameters());
  random_grads(a, 1);
  opt_a.step(ExecCtx::cpu(), a.parameters(), 1e-2);
  const nlohmann::json config = {{"test", true}};
  CheckpointWrite w;
  w.config = &config;
  w.model = &a;
  w.optimizer = &opt_a;
  w.state.step = 1;
  const std::string step_dir = save_checkpoint(dir.path.string(), w);
  optim::AdamWConfig f32_cfg;
  f32_cfg.moment_dtype = optim::MomentDtype::F32;
  BigramModel b(20);
  optim::AdamW opt_b(f32_cfg, b.parameters());
  try {
    load_checkpoint(read_checkpoint_meta(step_dir), b, &opt_b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer moments are 'bf16', the config asks for 'fp32'"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(opt_b.step_count(), 0);
  for (float m : opt_b.exp_avg().flat().to_vector<float>()) ASSERT_EQ(m, 0.0f);
}
