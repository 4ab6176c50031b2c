// The two fp8-deepseek ablations (promote=never, dgrad_block=on) on the GPU against the CPU emulation, below the
// 20-step runs of train_gpu_test.cpp, so that a mismatch names the Linear and the GEMM it comes from:
//   - the MoE's grouped Linears as a training step drives them (routed experts' W1|W3 from the FP8-dispatched
//     tokens, W2 with its dispatched output gradient; experts with padding rows, an empty expert and the plan's
//     spare rows past the last offset) and dense Linears whose Dgrad K ends in a partial 128 block (MLA's
//     wkv_a / wq_b widths): Fprop, Dgrad and Wgrad bit for bit the CPU's under fp8-deepseek and both ablations;
//   - one forward + backward of the tiny MLA + dense + MoE + MTP model of TrainGpu's FP8 runs, from the same
//     weights and batch on both devices: every parameter's gradient difference (GPU against CPU) for the three
//     recipes side by side, and each ablation's held to 20 times fp8-deepseek's for the same parameter (at least
//     2e-2: a step is chaotic in its last bits, see the test) outside the routed experts, so the first Linear whose
//     gradients part is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "model/activation_store.h"
#include "model/linear.h"
#include "model/model.h"
#include "ops/quantize.h"
#include "recipe/recipe.h"
#include "tensor/backend.h"
#include "tensor/exec_ctx.h"

namespace fp8train::gputest {
namespace {

const char* const kSpecs[] = {"fp8-deepseek", "fp8-deepseek:dgrad_block=on", "fp8-deepseek:promote=never"};

struct Products {
  std::vector<uint16_t> y, dx;  // BF16 codes
  std::vector<float> dw;
};

std::vector<uint16_t> bf16_codes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  std::vector<uint16_t> out(static_cast<size_t>(h.numel()));
  std::memcpy(out.data(), h.raw(), out.size() * sizeof(uint16_t));
  return out;
}

Tensor bf16_on(const std::vector<float>& x, int64_t rows, int64_t cols, Device d) {
  std::vector<bf16> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf16(x[i]);
  return Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, Device::cpu()).to(d);
}

// Rows [r0, r1) of a [rows, cols] matrix set to zero (an expert's padding rows, the plan's spare rows).
void zero_rows(std::vector<float>& m, int64_t cols, int64_t r0, int64_t r1) {
  std::fill(m.begin() + r0 * cols, m.begin() + r1 * cols, 0.0f);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One forward + backward of a Linear of `groups` stacked [out, in] weights (offsets: the experts' rows, I32
// [groups + 1], empty for a dense Linear) under `spec` on `device`. The routed experts' W1|W3 takes its input the
// way the MoE gives it, quantized for the dispatch (power-of-two 1x128, row-major scales, on any device).
Products run_linear(const std::string& spec, recipe::LinearRole role, Device device, const std::vector<float>& w,
                    const std::vector<float>& x, const std::vector<float>& dy, int64_t tokens, int64_t in, int64_t out,
                    int64_t groups, const std::vector<int32_t>& offsets) {
  const recipe::RecipeConfig recipe = recipe::parse_recipe(spec);
  model::ParameterSet params;
  model::ActivationStore store(recipe);
  const Tensor weight = Tensor::from_vector(w, {groups * out, in}, MemCategory::Workspace, Device::cpu()).to(device);
  const Tensor grad = Tensor::zeros({groups * out, in}, DType::F32, MemCategory::Workspace, device);
  const model::Linear lin(params, weight, grad, "test.linear", role, 0, groups);
  model::StepContext ctx;
  ctx.exec = ExecCtx::on(device);
  ctx.batch = 1;
  ctx.training = true;
  ctx.recipe = &recipe;
  ctx.store = &store;
  ctx.dtype = DType::BF16;
  const Tensor off = offsets.empty() ? Tensor()
                                     : Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())},
                                                           MemCategory::Workspace, Device::cpu())
                                           .to(device);
  const Tensor xt = bf16_on(x, tokens, in, device), dyt = bf16_on(dy, tokens, out, device);
  const Tensor y = Tensor::empty({tokens, out}, DType::BF16, MemCategory::Workspace, device);
  const Tensor dx = Tensor::empty({tokens, in}, DType::BF16, MemCategory::Workspace, device);
  const recipe::LinearRecipe plan = recipe::linear_recipe(recipe, role);
  model::LinearInput li;
  if (plan.dispatched_input) {
    const quant::QTensor xq =
        ops::quantize(ctx.exec, xt, plan.fprop.a, ops::QuantizeOutputs::Rowwise, quant::ScaleLayout::RowMajor);
    li = lin.dispatched(ctx, xq, Tensor(), true);
  } else {
    li = lin.prepare(ctx, xt, true);
  }
  lin.forward(ctx, li, y, off);
  lin.backward(ctx, dyt, lin.kept(ctx, li), dx, false, off);
  return {bf16_codes(y), bf16_codes(dx), grad.to(Device::cpu()).to_vector<float>()};
}

void expect_same_products(const std::string& spec, recipe::LinearRole role, const std::vector<float>& w,
                          const std::vector<float>& x, const std::vector<float>& dy, int64_t tokens, int64_t in,
                          int64_t out, int64_t groups, const std::vector<int32_t>& offsets) {
  SCOPED_TRACE(spec + " " + std::string(recipe::linear_role_name(role)) + " [" + std::to_string(in) + " -> " +
               std::to_string(out) + "] x " + std::to_string(groups));
  const Products cpu = run_linear(spec, role, Device::cpu(), w, x, dy, tokens, in, out, groups, offsets);
  const Products gpu = run_linear(spec, role, Device::cuda(0), w, x, dy, tokens, in, out, groups, offsets);
  // Rows past the last expert are the plan's spare capacity: the MoE never reads them back.
  const int64_t used = offsets.empty() ? tokens : offsets.back();
  const auto head = [](const std::vector<uint16_t>& v, int64_t n) {
    return std::vector<uint16_t>(v.begin(), v.begin() + n);
  };
  EXPECT_EQ(head(gpu.y, used * out), head(cpu.y, used * out)) << "Fprop";
  EXPECT_EQ(head(gpu.dx, used * in), head(cpu.dx, used * in)) << "Dgrad";
  EXPECT_TRUE(same_bits(gpu.dw, cpu.dw)) << "Wgrad";
}

// The MoE's grouped Linears under the three recipes: 4 experts, expert 0 with 100 tokens (28 padding rows),
// expert 1 empty, expert 2 with 256 rows, expert 3 with 128, then 128 spare rows (zero, as the plan leaves them).
TEST(AblationGpu, GroupedExpertLinearsMatchTheCpuBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t experts = 4, tokens = 640;
  const std::vector<int32_t> offsets = {0, 128, 128, 384, 512};
  struct Shape {
    recipe::LinearRole role;
    int64_t in, out;
  };
  // W1|W3: hidden 256 -> 2F 256 (two K blocks in Fprop and Dgrad); W2: F 128 -> hidden 256.
  for (const Shape s :
       {Shape{recipe::LinearRole::ExpertUp, 256, 256}, Shape{recipe::LinearRole::ExpertDown, 128, 256}}) {
    const std::vector<float> w = random_matrix(experts * s.out, s.in, seed, 1.0f);
    std::vector<float> x = random_matrix(tokens, s.in, seed + 1), dy = random_matrix(tokens, s.out, seed + 2);
    for (std::vector<float>* m : {&x, &dy}) {
      const int64_t cols = m == &x ? s.in : s.out;
      zero_rows(*m, cols, 100, 128);
      zero_rows(*m, cols, 512, tokens);
    }
    for (const std::string spec : kSpecs)
      expect_same_products(spec, s.role, w, x, dy, tokens, s.in, s.out, experts, offsets);
  }
}

// Dense Linears whose outputs end in a partial 128 block (MLA's wkv_a is kv_rank + rope = 160 wide, wq_b
// heads x 96 = 192): dy's last 128x128 block is partial under dgrad_block, and Dgrad's K ends in a partial block.
TEST(AblationGpu, DenseLinearsWithPartialBlocksMatchTheCpuBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t tokens = 256, in = 128;
  for (const int64_t out : {int64_t{160}, int64_t{192}}) {
    const std::vector<float> w = random_matrix(out, in, seed, 1.0f), x = random_matrix(tokens, in, seed + 1);
    const std::vector<float> dy = random_matrix(tokens, out, seed + 2);
    for (const std::string spec : kSpecs)
      expect_same_products(spec, recipe::LinearRole::AttnKvDown, w, x, dy, tokens, in, out, 1, {});
  }
}

// ---- one step of the whole model ------------------------------------------------------------------------------

// TrainGpu's FP8 model (train_gpu_test.cpp kFp8Model): hidden 128, MLA with latent ranks 128 and heads of 64 + 32,
// one dense block (FFN 256) and one MoE block (8 experts of 128, top-2, one shared expert), MTP depth 1.
model::ModelConfig tiny_moe() {
  model::ModelConfig c;
  c.vocab_size = 259;
  c.hidden_size = 128;
  c.n_layers = 2;
  c.n_dense_layers = 1;
  c.n_heads = 2;
  c.q_lora_rank = 128;
  c.kv_lora_rank = 128;
  c.qk_nope_head_dim = 64;
  c.qk_rope_head_dim = 32;
  c.v_head_dim = 64;
  c.intermediate_size = 256;
  c.moe_intermediate_size = 128;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.mtp_depth = 1;
  return c;
}

// Tensors a model builds go to the default device: this sets it for a scope.
class DefaultDevice {
 public:
  explicit DefaultDevice(Device d) : saved_(default_device()) { select_default_device(d); }
  ~DefaultDevice() { select_default_device(saved_); }
  DefaultDevice(const DefaultDevice&) = delete;
  DefaultDevice& operator=(const DefaultDevice&) = delete;

 private:
  Device saved_;
};

struct Step {
  std::vector<std::string> names;
  std::vector<std::vector<float>> grads;
  double loss = 0;
  double norm() const {
    double s = 0;
    for (const auto& g : grads)
      for (float v : g) s += double(v) * double(v);
    return std::sqrt(s);
  }
};

// One forward + backward (4 sequences of 64 tokens: one of TrainGpu's micro-batches) under `spec` on `device`,
// the weights the CPU model of the same seed starts from.
Step one_step(const std::string& spec, Device device, const std::vector<std::vector<float>>& weights,
              const std::vector<int32_t>& in, const std::vector<int32_t>& tg) {
  const DefaultDevice scope(device);
  model::DeepSeekV3Model m(tiny_moe(), {.dtype = DType::F32, .seed = 5, .recipe = spec});
  const std::vector<model::Parameter*> params = m.parameters().trainable();
  EXPECT_EQ(params.size(), weights.size());
  for (size_t i = 0; i < params.size() && i < weights.size(); ++i)
    params[i]->value.copy_from(
        Tensor::from_vector(weights[i], params[i]->value.shape(), MemCategory::Workspace, Device::cpu()));
  m.mark_parameters_updated();
  m.zero_grad();
  const int64_t n = static_cast<int64_t>(in.size());
  const Tensor inputs = Tensor::from_vector(in, {n}, MemCategory::Workspace, Device::cpu()).to(device);
  const Tensor targets = Tensor::from_vector(tg, {n}, MemCategory::Workspace, Device::cpu()).to(device);
  Step s;
  s.loss = m.forward_backward(inputs, targets, 4).total;
  for (const model::Parameter* p : params) {
    s.names.push_back(p->name);
    s.grads.push_back(p->grad.to(Device::cpu()).to_vector<float>());
  }
  return s;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(AblationGpu, OneStepGradientsPerParameterFollowTheCpu) {
  std::vector<std::vector<float>> weights;
  {
    const DefaultDevice scope(Device::cpu());
    const model::DeepSeekV3Model init(tiny_moe(), {.dtype = DType::F32, .seed = 5, .recipe = "fp8-deepseek"});
    for (const model::Parameter* p : init.parameters().trainable()) weights.push_back(p->value.to_vector<float>());
  }
  std::mt19937_64 rng(11);
  const int64_t n = 4 * 64;
  std::vector<int32_t> in(n), tg(n);
  for (auto& t : in) t = static_cast<int32_t>(rng() % 256);
  for (int64_t i = 0; i < n; ++i) tg[i] = (i + 1) % 64 == 0 ? -1 : in[i + 1];

  std::vector<std::vector<double>> diffs;  // [spec][parameter]: GPU against CPU
  std::vector<std::string> names;
  double norm_cpu0 = 0, norm_gpu0 = 0;  // fp8-deepseek's gradient norms
  for (const std::string spec : kSpecs) {
    const Step cpu = one_step(spec, Device::cpu(), weights, in, tg);
    const Step gpu = one_step(spec, Device::cuda(0), weights, in, tg);
    ASSERT_EQ(cpu.grads.size(), gpu.grads.size());
    names = cpu.names;
    std::vector<double> d;
    for (size_t i = 0; i < cpu.grads.size(); ++i) d.push_back(rel_diff(gpu.grads[i], cpu.grads[i]));
    if (diffs.empty()) {
      norm_cpu0 = cpu.norm();
      norm_gpu0 = gpu.norm();
    }
    // The gradient norm against fp8-deepseek's on the same device: what the 20-step runs compare at step 1.
    std::printf(
        "%s: loss cpu %.9f gpu %.9f (rel %.2e); gradient norm cpu %.7f gpu %.7f (rel %.2e), moved from "
        "fp8-deepseek's by %.2e on the cpu and %.2e on the gpu\n",
        spec.c_str(), cpu.loss, gpu.loss, std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss), cpu.norm(), gpu.norm(),
        std::abs(gpu.norm() - cpu.norm()) / cpu.norm(), std::abs(cpu.norm() - norm_cpu0) / norm_cpu0,
        std::abs(gpu.norm() - norm_gpu0) / norm_gpu0);
    diffs.push_back(std::move(d));
  }
  std::printf("%-48s %12s %12s %12s   (relative gradient difference, GPU against CPU)\n", "parameter", kSpecs[0],
              "dgrad_block", "promote=never");
  for (size_t i = 0; i < names.size(); ++i)
    std::printf("%-48s %12.3e %12.3e %12.3e\n", names[i].c_str(), diffs[0][i], diffs[1][i], diffs[2][i]);
  // A step of this model is chaotic in its last bits: on the CPU alone, a relative 2^-14 change of 6 % of the
  // attention's outputs and gradients (the loss moves 1e-5, less than the two devices' 3.8e-5) moves the gradient
  // norm 5e-4 under each recipe, and moves an ablation's distance from fp8-deepseek from 1e-6 to 4e-5 (dgrad_block)
  // and from 1.4e-3 to 3.4e-4 (promote=never, whose FP22 truncations also move routing decisions). So an ablation
  // may part from the CPU by more than fp8-deepseek does; a GEMM taking another path parts by the size of the
  // quantization error itself (a few percent). The routed experts (a token routed elsewhere changes an expert's
  // gradient wholesale) are held by GroupedExpertLinearsMatchTheCpuBitForBit instead.
  for (size_t s = 1; s < 3; ++s)
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].find(".moe.experts.") != std::string::npos || names[i].find(".moe.gate.") != std::string::npos)
        continue;
      EXPECT_LE(diffs[s][i], std::max(20.0 * diffs[0][i], 2e-2)) << kSpecs[s] << ": " << names[i];
    }
}

}  // namespace
}  // namespace fp8train::gputest
