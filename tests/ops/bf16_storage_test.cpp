// BF16 as a storage dtype: every op that takes activations runs on BF16 tensors by widening them to FP32,
// computing exactly as its FP32 kernel does, and rounding its storage-dtype outputs once (to nearest even).
// So for inputs that are BF16 values, op(bf16) == round_bf16(op(f32)) bit for bit, and its compute-dtype outputs
// (statistics, gradients of FP32 parameters) are identical to the FP32 op's. Each test checks that relation on
// random inputs (never zeros), with outputs poisoned beforehand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "numerics/formats.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/moe_dispatch.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace fp8train {
namespace {

const ExecCtx& cpu() { return ExecCtx::cpu(); }

// Random BF16-representable values as an F32 tensor.
Tensor random_bf16_values(Shape shape, std::mt19937_64& rng, float sigma = 1.0f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    do x = num::bf16_round(dist(rng));
    while (x == 0.0f);
  }
  return Tensor::from_vector(v, std::move(shape));
}

// The same values as a BF16 tensor (built from codes, not through the op under test).
Tensor as_bf16(const Tensor& f32) {
  const std::vector<float> v = f32.to_vector<float>();
  std::vector<bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
  return Tensor::from_vector(b, f32.shape());
}

// A poisoned (NaN) tensor.
Tensor poisoned(Shape shape, DType dtype) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  std::memset(t.raw(), 0xFF, t.nbytes());
  return t;
}

// Every element of the BF16 tensor equals the FP32 tensor's element rounded to BF16.
void expect_rounded(const Tensor& got_bf16, const Tensor& want_f32, const char* what) {
  const std::vector<bf16> g = got_bf16.to_vector<bf16>();
  const std::vector<float> w = want_f32.to_vector<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].bits != num::bf16_encode(w[i])) ++bad;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
}

void expect_same(const Tensor& got, const Tensor& want, const char* what) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) ++bad;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
}

TEST(Bf16Storage, CopyCastsWithRoundToNearestEvenBothWays) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(1000);
  for (float& x : v) x = dist(rng);
  v[0] = std::nanf("");
  v[1] = -0.0f;
  v[2] = 1.0f + 1.0f / 256.0f;  // a tie: rounds to even (1.0)
  const Tensor f = Tensor::from_vector(v, {10, 100});
  const Tensor b = poisoned({10, 100}, DType::BF16);
  ops::copy(cpu(), f, b);
  const std::vector<bf16> got = b.to_vector<bf16>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i].bits, num::bf16_encode(v[i])) << i;
  const Tensor back = poisoned({10, 100}, DType::F32);
  ops::copy(cpu(), b, back);
  const std::vector<float> w = back.to_vector<float>();
  for (size_t i = 1; i < v.size(); ++i) ASSERT_EQ(w[i], num::bf16_round(v[i])) << i;
  EXPECT_TRUE(std::isnan(w[0]));
  EXPECT_THROW(ops::copy(cpu(), Tensor::zeros({10, 100}, DType::F64), b), Error);  // f64 mixes only with f64
}

TEST(Bf16Storage, AxpbyMixesF32AndBf16AndRoundsOnce) {
  std::mt19937_64 rng(2);
  const Tensor a = random_bf16_values({7, 33}, rng), b = random_bf16_values({7, 33}, rng);
  const Tensor want = poisoned({7, 33}, DType::F32);
  ops::axpby(cpu(), 0.75, a, -1.5, b, want);
  const Tensor got = poisoned({7, 33}, DType::BF16);
  ops::axpby(cpu(), 0.75, as_bf16(a), -1.5, b, got);  // bf16 a, f32 b, bf16 out
  expect_rounded(got, want, "axpby");
}

TEST(Bf16Storage, GemmOfBf16OperandsIsTheFp32ProductRoundedOnce) {
  std::mt19937_64 rng(3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t m = 37, n = 45, k = 70;
      const Tensor a = random_bf16_values(ta ? Shape{k, m} : Shape{m, k}, rng);
      const Tensor b = random_bf16_values(tb ? Shape{n, k} : Shape{k, n}, rng);
      const Tensor c0 = random_bf16_values({m, n}, rng);
      // beta = 1: the BF16 output is read, accumulated in FP32 and rounded once
      const Tensor want = c0.clone();
      ops::gemm(cpu(), a, ta, b, tb, want, {.alpha = 1.0, .beta = 1.0});
      const Tensor got = as_bf16(c0);
      ops::gemm(cpu(), as_bf16(a), ta, as_bf16(b), tb, got, {.alpha = 1.0, .beta = 1.0});
      expect_rounded(got, want, "gemm bf16 -> bf16");
      // BF16 operands into an FP32 output (a Wgrad into FP32 gradients): identical to the FP32 product
      const Tensor want32 = poisoned({m, n}, DType::F32), got32 = poisoned({m, n}, DType::F32);
      ops::gemm(cpu(), a, ta, b, tb, want32);
      ops::gemm(cpu(), as_bf16(a), ta, b, tb, got32);
      expect_same(got32, want32, "gemm bf16 x f32 -> f32");
    }
}

TEST(Bf16Storage, RmsNormForwardAndBackward) {
  std::mt19937_64 rng(4);
  const int64_t rows = 70, dim = 48;
  const Tensor x = random_bf16_values({rows, dim}, rng), w = random_bf16_values({dim}, rng);
  const Tensor dy = random_bf16_values({rows, dim}, rng), dx0 = random_bf16_values({rows, dim}, rng);
  const Tensor y32 = poisoned({rows, dim}, DType::F32), rstd32 = poisoned({rows}, DType::F32);
  ops::rmsnorm_forward(cpu(), x, w, 1e-6, y32, rstd32);
  const Tensor y16 = poisoned({rows, dim}, DType::BF16), rstd16 = poisoned({rows}, DType::F32);
  ops::rmsnorm_forward(cpu(), as_bf16(x), w, 1e-6, y16, rstd16);
  expect_rounded(y16, y32, "rmsnorm y");
  expect_same(rstd16, rstd32, "rmsnorm rstd");
  // backward, accumulating into dx (read in BF16, summed in FP32, rounded once) and into the FP32 dweight
  const Tensor dx32 = dx0.clone(), dw32 = Tensor::zeros({dim}, DType::F32);
  ops::rmsnorm_backward(cpu(), x, w, rstd32, dy, dx32, dw32, true);
  const Tensor dx16 = as_bf16(dx0), dw16 = Tensor::zeros({dim}, DType::F32);
  ops::rmsnorm_backward(cpu(), as_bf16(x), w, rstd16, as_bf16(dy), dx16, dw16, true);
  expect_rounded(dx16, dx32, "rmsnorm dx");
  expect_same(dw16, dw32, "rmsnorm dweight");
  // the norm gain must be the compute dtype
  EXPECT_THROW(ops::rmsnorm_forward(cpu(), as_bf16(x), as_bf16(w), 1e-6, y16, rstd16), Error);
}

TEST(Bf16Storage, EmbeddingGathersRoundedRowsAndScatterAddsInFp32) {
  std::mt19937_64 rng(5);
  const Tensor table = random_bf16_values({9, 40}, rng, 0.3f);
  // FP32 table values that are not BF16 values: the gather rounds them
  std::vector<float> tv = table.to_vector<float>();
  for (float& v : tv) v *= 1.0f + 1.0f / 1024.0f;
  const Tensor master = Tensor::from_vector(tv, {9, 40});
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{3, 0, 3, 8, 3, 1}, {6});
  const Tensor out32 = poisoned({6, 40}, DType::F32), out16 = poisoned({6, 40}, DType::BF16);
  ops::embedding_forward(cpu(), ids, master, out32);
  ops::embedding_forward(cpu(), ids, master, out16);
  expect_rounded(out16, out32, "embedding out");
  const Tensor dout = random_bf16_values({6, 40}, rng);
  const Tensor d32 = Tensor::zeros({9, 40}, DType::F32), d16 = Tensor::zeros({9, 40}, DType::F32);
  ops::embedding_backward(cpu(), ids, dout, d32);
  ops::embedding_backward(cpu(), ids, as_bf16(dout), d16);
  expect_same(d16, d32, "embedding dtable");
}

TEST(Bf16Storage, RopeRotatesInFp32AndRoundsOnce) {
  std::mt19937_64 rng(6);
  const Tensor x = random_bf16_values({24, 3, 8}, rng);
  for (bool inverse : {false, true}) {
    const Tensor a = x.clone(), b = as_bf16(x);
    ops::rope_(cpu(), a, 12, 10000.0, inverse);
    ops::rope_(cpu(), b, 12, 10000.0, inverse);
    expect_rounded(b, a, "rope");
  }
}

TEST(Bf16Storage, SwigluForwardAndBackward) {
  std::mt19937_64 rng(7);
  const Tensor in = random_bf16_values({33, 2 * 20}, rng), dout = random_bf16_values({33, 20}, rng);
  const Tensor o32 = poisoned({33, 20}, DType::F32), o16 = poisoned({33, 20}, DType::BF16);
  ops::swiglu_forward(cpu(), in, o32);
  ops::swiglu_forward(cpu(), as_bf16(in), o16);
  expect_rounded(o16, o32, "swiglu out");
  const Tensor d32 = poisoned({33, 40}, DType::F32), d16 = poisoned({33, 40}, DType::BF16);
  ops::swiglu_backward(cpu(), in, dout, d32);
  ops::swiglu_backward(cpu(), as_bf16(in), as_bf16(dout), d16);
  expect_rounded(d16, d32, "swiglu din");
}

TEST(Bf16Storage, AttentionForwardAndBackward) {
  std::mt19937_64 rng(8);
  const int64_t batch = 2, seq = 70, heads = 3, dqk = 12, dv = 8, n = batch * seq;  // two query blocks
  const Tensor q = random_bf16_values({n, heads, dqk}, rng), k = random_bf16_values({n, heads, dqk}, rng);
  const Tensor v = random_bf16_values({n, heads, dv}, rng), dout = random_bf16_values({n, heads, dv}, rng);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dqk));
  const Tensor o32 = poisoned({n, heads, dv}, DType::F32), lse32 = poisoned({batch, heads, seq}, DType::F32);
  ops::attention_forward(cpu(), q, k, v, o32, lse32, batch, scale);
  const Tensor o16 = poisoned({n, heads, dv}, DType::BF16), lse16 = poisoned({batch, heads, seq}, DType::F32);
  ops::attention_forward(cpu(), as_bf16(q), as_bf16(k), as_bf16(v), o16, lse16, batch, scale);
  expect_rounded(o16, o32, "attention o");
  expect_same(lse16, lse32, "attention lse");
  // the backward reads o: give both the same (BF16) o
  const Tensor o_values = Tensor::empty({n, heads, dv}, DType::F32);
  ops::copy(cpu(), o16, o_values);
  const Tensor dq32 = poisoned({n, heads, dqk}, DType::F32), dk32 = poisoned({n, heads, dqk}, DType::F32);
  const Tensor dv32 = poisoned({n, heads, dv}, DType::F32);
  ops::attention_backward(cpu(), q, k, v, o_values, lse32, dout, dq32, dk32, dv32, batch, scale);
  const Tensor dq16 = poisoned({n, heads, dqk}, DType::BF16), dk16 = poisoned({n, heads, dqk}, DType::BF16);
  const Tensor dv16 = poisoned({n, heads, dv}, DType::BF16);
  ops::attention_backward(cpu(), as_bf16(q), as_bf16(k), as_bf16(v), o16, lse16, as_bf16(dout), dq16, dk16, dv16, batch,
                          scale);
  expect_rounded(dq16, dq32, "attention dq");
  expect_rounded(dk16, dk32, "attention dk");
  expect_rounded(dv16, dv32, "attention dv");
}

TEST(Bf16Storage, MoePermuteAndWeightedCombine) {
  std::mt19937_64 rng(9);
  const int64_t tokens = 40, K = 2, experts = 5, dim = 24;
  std::vector<int32_t> sel(static_cast<size_t>(tokens * K));
  for (int64_t t = 0; t < tokens; ++t) {
    sel[t * K] = static_cast<int32_t>(t % experts);
    sel[t * K + 1] = static_cast<int32_t>((t * 3 + 1) % experts);
  }
  const ops::MoePlan plan = ops::moe_build_plan(cpu(), Tensor::from_vector(sel, {tokens, K}), experts);
  const Tensor x = random_bf16_values({tokens, dim}, rng), gates = random_bf16_values({tokens * K}, rng);
  const Tensor xp32 = poisoned({tokens * K, dim}, DType::F32), xp16 = poisoned({tokens * K, dim}, DType::BF16);
  ops::moe_permute(cpu(), x, plan, xp32);
  ops::moe_permute(cpu(), as_bf16(x), plan, xp16);
  expect_rounded(xp16, xp32, "permute");
  // combine, accumulating into y: Σ_k in FP32 on top of the widened y, rounded once
  const Tensor yp = random_bf16_values({tokens * K, dim}, rng), y0 = random_bf16_values({tokens, dim}, rng);
  const Tensor y32 = y0.clone(), y16 = as_bf16(y0);
  ops::moe_unpermute(cpu(), yp, plan, gates, y32, true);
  ops::moe_unpermute(cpu(), as_bf16(yp), plan, gates, y16, true);
  expect_rounded(y16, y32, "unpermute");
  const Tensor dx32 = poisoned({tokens, dim}, DType::F32), dx16 = poisoned({tokens, dim}, DType::BF16);
  ops::moe_permute_backward(cpu(), xp32, plan, dx32, false);
  ops::moe_permute_backward(cpu(), xp16, plan, dx16, false);
  expect_rounded(dx16, dx32, "permute backward");
  const Tensor dy = random_bf16_values({tokens, dim}, rng);
  const Tensor dyp32 = poisoned({tokens * K, dim}, DType::F32), dg32 = poisoned({tokens * K}, DType::F32);
  const Tensor dyp16 = poisoned({tokens * K, dim}, DType::BF16), dg16 = poisoned({tokens * K}, DType::F32);
  ops::moe_unpermute_backward(cpu(), dy, yp, plan, gates, dyp32, dg32);
  ops::moe_unpermute_backward(cpu(), as_bf16(dy), as_bf16(yp), plan, gates, dyp16, dg16);
  expect_rounded(dyp16, dyp32, "unpermute backward dyp");
  expect_same(dg16, dg32, "unpermute backward dgates");
}

}  // namespace
}  // namespace fp8train
