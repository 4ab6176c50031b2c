// A Linear on the GPU against the same Linear on the CPU, on the same weights, input and output gradient: under
// the two ablations -- dgrad_block=on (dy quantized in 128×128 blocks for Dgrad, the block scales repeated per row
// for the 1×128 · 128×128 GEMM) and promote=never (the kernels' pending FP22 sum) -- the three products, y, dx and
// dW, are the CPU's bit for bit, as for every other FP8 form: the quantizers round alike and the FP8 GEMMs are the
// CPU's Hopper model.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "model/activation_store.h"
#include "model/linear.h"
#include "recipe/recipe.h"
#include "tensor/exec_ctx.h"

namespace fp8train::gputest {
namespace {

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

// One forward + backward of a [in -> out] Linear under `spec` on `device` (weights F32, activations BF16).
Products run_linear(const std::string& spec, Device device, const std::vector<float>& w, const std::vector<float>& x,
                    const std::vector<float>& dy, int64_t tokens, int64_t in, int64_t out) {
  const recipe::RecipeConfig recipe = recipe::parse_recipe(spec);
  model::ParameterSet params;
  model::ActivationStore store(recipe);
  const Tensor weight = Tensor::from_vector(w, {out, in}, MemCategory::Workspace, Device::cpu()).to(device);
  const Tensor grad = Tensor::zeros({out, in}, DType::F32, MemCategory::Workspace, device);
  model::Linear lin(params, weight, grad, "test.linear", recipe::LinearRole::DenseUp, 0);
  model::StepContext ctx;
  ctx.exec = ExecCtx::on(device);
  ctx.batch = 1;
  ctx.training = true;
  ctx.recipe = &recipe;
  ctx.store = &store;
  ctx.dtype = DType::BF16;
  const Tensor xt = bf16_on(x, tokens, in, device), dyt = bf16_on(dy, tokens, out, device);
  const Tensor y = Tensor::empty({tokens, out}, DType::BF16, MemCategory::Workspace, device);
  const Tensor dx = Tensor::empty({tokens, in}, DType::BF16, MemCategory::Workspace, device);
  const model::LinearInput li = lin.prepare(ctx, xt, true);
  lin.forward(ctx, li, y);
  lin.backward(ctx, dyt, lin.kept(ctx, li), dx, false);
  return {bf16_codes(y), bf16_codes(dx), grad.to(Device::cpu()).to_vector<float>()};
}

TEST(LinearGpu, AblationsMatchTheCpuBitForBit) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // 320 tokens: two whole 128-row blocks of dy and a short third one; out 384: three 128-column blocks.
  const int64_t tokens = 320, in = 256, out = 384;
  const std::vector<float> w = random_matrix(out, in, seed, 1.0f), x = random_matrix(tokens, in, seed + 1);
  const std::vector<float> dy = random_matrix(tokens, out, seed + 2);
  for (const std::string spec : {"fp8-deepseek", "fp8-deepseek:dgrad_block=on", "fp8-deepseek:promote=never"}) {
    SCOPED_TRACE(spec);
    const Products cpu = run_linear(spec, Device::cpu(), w, x, dy, tokens, in, out);
    const Products gpu = run_linear(spec, Device::cuda(0), w, x, dy, tokens, in, out);
    EXPECT_EQ(gpu.y, cpu.y) << "Fprop";
    EXPECT_EQ(gpu.dx, cpu.dx) << "Dgrad";
    ASSERT_EQ(gpu.dw.size(), cpu.dw.size());
    EXPECT_EQ(std::memcmp(gpu.dw.data(), cpu.dw.data(), cpu.dw.size() * sizeof(float)), 0) << "Wgrad";
  }
  // The ablation changed Dgrad (the block scales are coarser than the 1×128 tiles on these rows).
  const Products tiles = run_linear("fp8-deepseek", Device::cpu(), w, x, dy, tokens, in, out);
  const Products blocks = run_linear("fp8-deepseek:dgrad_block=on", Device::cpu(), w, x, dy, tokens, in, out);
  EXPECT_NE(tiles.dx, blocks.dx);
}

}  // namespace
}  // namespace fp8train::gputest
