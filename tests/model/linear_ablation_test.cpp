// The fp8-deepseek ablations reach the MoE's grouped GEMMs as they reach the dense ones: a Linear of E stacked
// expert weights over expert-ordered rows (grouped Fprop and Dgrad over M, the K-grouped Wgrad) gives, under
// fp8-deepseek, promote=never and dgrad_block=on, each expert's rows and weight gradient bit for bit what a dense
// Linear of that expert's weight gives on those rows: every expert's rows start on a 128-row boundary, so its 1x128
// tiles, 128x1 Wgrad tiles and (dgrad_block) 128x128 dy blocks are the dense Linear's. Experts: one with padding
// rows, one empty, and the plan's spare rows past the last offset (what a GPU plan carries), all zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/activation_store.h"
#include "model/linear.h"
#include "recipe/recipe.h"

namespace fp8train::model {
namespace {

struct Products {
  std::vector<uint16_t> y, dx;  // BF16 codes
  std::vector<float> dw;
};

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decades(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(gen) * std::pow(10.0f, decades(gen));
  return v;
}

Tensor bf16_matrix(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<bf16> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf16(x[i]);
  return Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, Device::cpu());
}

std::vector<uint16_t> codes(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.raw(), out.size() * sizeof(uint16_t));
  return out;
}

// One forward + backward of a Linear of `groups` stacked [out, in] weights (offsets: the experts' rows; empty for
// a dense Linear) under `spec`, BF16 activations.
Products run(const std::string& spec, const std::vector<float>& w, const std::vector<float>& x,
             const std::vector<float>& dy, int64_t tokens, int64_t in, int64_t out, int64_t groups,
             const std::vector<int32_t>& offsets) {
  const recipe::RecipeConfig recipe = recipe::parse_recipe(spec);
  ParameterSet params;
  ActivationStore store(recipe);
  const Tensor weight = Tensor::from_vector(w, {groups * out, in}, MemCategory::Workspace, Device::cpu());
  const Tensor grad = Tensor::zeros({groups * out, in}, DType::F32, MemCategory::Workspace, Device::cpu());
  const Linear lin(params, weight, grad, "test.linear", recipe::LinearRole::DenseUp, 0, groups);
  StepContext ctx;
  ctx.exec = ExecCtx::cpu();
  ctx.batch = 1;
  ctx.training = true;
  ctx.recipe = &recipe;
  ctx.store = &store;
  ctx.dtype = DType::BF16;
  const Tensor off = offsets.empty() ? Tensor()
                                     : Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())},
                                                           MemCategory::Workspace, Device::cpu());
  const Tensor y = Tensor::empty({tokens, out}, DType::BF16, MemCategory::Workspace, Device::cpu());
  const Tensor dx = Tensor::empty({tokens, in}, DType::BF16, MemCategory::Workspace, Device::cpu());
  const LinearInput li = lin.prepare(ctx, bf16_matrix(x, tokens, in), true);
  lin.forward(ctx, li, y, off);
  lin.backward(ctx, bf16_matrix(dy, tokens, out), lin.kept(ctx, li), dx, false, off);
  return {codes(y), codes(dx), grad.to_vector<float>()};
}

template <class T>
std::vector<T> slice(const std::vector<T>& v, int64_t begin, int64_t end) {
  return std::vector<T>(v.begin() + begin, v.begin() + end);
}

TEST(LinearAblation, GroupedExpertGemmsFollowTheAblationsAsDenseOnesDo) {
  const int64_t experts = 4, tokens = 640, in = 256, out = 384;
  const std::vector<int32_t> offsets = {0, 128, 128, 384, 512};  // expert 1 empty; rows 512.. spare
  const std::vector<float> w = random_values(experts * out * in, 1);
  std::vector<float> x = random_values(tokens * in, 2), dy = random_values(tokens * out, 3);
  for (int64_t r = 0; r < tokens; ++r) {
    if (!((r >= 100 && r < 128) || r >= 512)) continue;  // expert 0's padding rows and the spare rows
    std::fill(x.begin() + r * in, x.begin() + (r + 1) * in, 0.0f);
    std::fill(dy.begin() + r * out, dy.begin() + (r + 1) * out, 0.0f);
  }
  std::vector<Products> grouped;
  for (const std::string spec : {"fp8-deepseek", "fp8-deepseek:dgrad_block=on", "fp8-deepseek:promote=never"}) {
    SCOPED_TRACE(spec);
    const Products g = run(spec, w, x, dy, tokens, in, out, experts, offsets);
    for (int64_t e = 0; e < experts; ++e) {
      SCOPED_TRACE("expert " + std::to_string(e));
      const int64_t r0 = offsets[e], r1 = offsets[e + 1], rows = r1 - r0;
      const std::vector<float> we = slice(w, e * out * in, (e + 1) * out * in);
      if (rows == 0) {
        EXPECT_EQ(slice(g.dw, e * out * in, (e + 1) * out * in), std::vector<float>(out * in, 0.0f));
        continue;
      }
      const Products d = run(spec, we, slice(x, r0 * in, r1 * in), slice(dy, r0 * out, r1 * out), rows, in, out, 1, {});
      EXPECT_EQ(slice(g.y, r0 * out, r1 * out), d.y) << "Fprop";
      EXPECT_EQ(slice(g.dx, r0 * in, r1 * in), d.dx) << "Dgrad";
      const std::vector<float> gw = slice(g.dw, e * out * in, (e + 1) * out * in);
      EXPECT_EQ(std::memcmp(gw.data(), d.dw.data(), gw.size() * sizeof(float)), 0) << "Wgrad";
    }
    grouped.push_back(g);
  }
  // Each ablation changed what it is about on these rows: dgrad_block the Dgrad, promote=never all three GEMMs
  // (K = 256 in Fprop, 384 in Dgrad, 384 tokens of expert 2 in Wgrad: several 128 blocks each).
  EXPECT_EQ(grouped[1].y, grouped[0].y);
  EXPECT_NE(grouped[1].dx, grouped[0].dx);
  EXPECT_NE(grouped[2].y, grouped[0].y);
  EXPECT_NE(grouped[2].dx, grouped[0].dx);
  EXPECT_NE(grouped[2].dw, grouped[0].dw);
}

}  // namespace
}  // namespace fp8train::model
