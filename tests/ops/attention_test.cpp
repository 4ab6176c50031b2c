// Causal attention: forward against a naive full-matrix softmax in FP64, lse, strided views (v inside a fused
// k|v buffer), sequences that cross the 64-row query blocks, FP64 gradient checks for q, k, v, FP32 vs FP64.
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/attention.h"

namespace fp8train {
namespace {
using testing::as_doubles;
using testing::random_tensor;

struct Naive {
  std::vector<double> o, lse;
};
Naive naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, double scale) {
  const int64_t rows = q.size(0), H = q.size(1), D = q.size(2), Dv = v.size(2), T = rows / batch;
  const std::vector<double> Q = as_doubles(q.clone()), K = as_doubles(k.clone()), V = as_doubles(v.clone());
  Naive n{std::vector<double>(static_cast<size_t>(rows * H * Dv)), std::vector<double>(static_cast<size_t>(rows * H))};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t qi = b * T + t;
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += Q[(qi * H + h) * D + c] * K[((b * T + j) * H + h) * D + c];
          s[j] = scale * d;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t c = 0; c < Dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= t; ++j) acc += s[j] / sum * V[((b * T + j) * H + h) * Dv + c];
          n.o[(qi * H + h) * Dv + c] = acc;
        }
        n.lse[(b * H + h) * T + t] = mx + std::log(sum);
      }
  return n;
}

struct Inputs {
  Tensor q, kv_buf, k, v;
};
// q: [rows, H, D]; k and v live in one [rows, H, D + Dv] buffer (v a strided view), as MLA produces them.
Inputs make_inputs(std::mt19937_64& rng, DType dt, int64_t rows, int64_t H, int64_t D, int64_t Dv) {
  Inputs in;
  in.q = random_tensor({rows, H, D}, dt, rng);
  in.kv_buf = random_tensor({rows, H, D + Dv}, dt, rng);
  in.k = in.kv_buf.narrow(2, 0, D);
  in.v = in.kv_buf.narrow(2, D, Dv);
  return in;
}

TEST(Attention, ForwardMatchesNaiveAcrossQueryBlocks) {
  std::mt19937_64 rng(1);
  const int64_t batch = 2, T = 150, H = 3, D = 12, Dv = 8;
  const Inputs in = make_inputs(rng, DType::F64, batch * T, H, D, Dv);
  const Tensor o = Tensor::empty({batch * T, H, Dv}, DType::F64), lse = Tensor::empty({batch, H, T}, DType::F64);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  ops::attention_forward(ExecCtx::cpu(), in.q, in.k, in.v, o, lse, batch, scale);
  const Naive n = naive_attention(in.q, in.k, in.v, batch, scale);
  EXPECT_LT(testing::max_rel_diff(o.to_vector<double>(), n.o), 1e-13);
  EXPECT_LT(testing::max_rel_diff(lse.to_vector<double>(), n.lse), 1e-13);
  // the first token attends only to itself: o_0 = v_0
  const std::vector<double> O = o.to_vector<double>(), V = as_doubles(in.v.clone());
  for (int64_t c = 0; c < Dv; ++c) EXPECT_NEAR(O[c], V[c], 1e-15);
}

TEST(Attention, GradCheckF64) {
  std::mt19937_64 rng(2);
  const int64_t batch = 2, T = 70, H = 2, D = 5, Dv = 3;  // 70 > 64: two query blocks
  const Inputs in = make_inputs(rng, DType::F64, batch * T, H, D, Dv);
  const Tensor w = random_tensor({batch * T, H, Dv}, DType::F64, rng);
  const Tensor o = Tensor::empty({batch * T, H, Dv}, DType::F64), lse = Tensor::empty({batch, H, T}, DType::F64);
  const double scale = 0.7;
  auto loss = [&] {
    ops::attention_forward(ExecCtx::cpu(), in.q, in.k, in.v, o, lse, batch, scale);
    return testing::weighted_sum(o, w);
  };
  loss();
  const Tensor dq = Tensor::empty({batch * T, H, D}, DType::F64);
  const Tensor dkv = Tensor::zeros({batch * T, H, D + Dv}, DType::F64);
  ops::attention_backward(ExecCtx::cpu(), in.q, in.k, in.v, o, lse, w, dq, dkv.narrow(2, 0, D), dkv.narrow(2, D, Dv),
                          batch, scale);
  EXPECT_LT(testing::grad_check_error(loss, in.q, dq.to_vector<double>(), 1e-6, 400), 1e-6);
  EXPECT_LT(testing::grad_check_error(loss, in.kv_buf, dkv.to_vector<double>(), 1e-6, 600), 1e-6);
}

TEST(Attention, F32MatchesF64) {
  std::mt19937_64 rng(3);
  const int64_t batch = 2, T = 100, H = 4, D = 24, Dv = 16;
  const Inputs in = make_inputs(rng, DType::F64, batch * T, H, D, Dv);
  const Tensor dout = random_tensor({batch * T, H, Dv}, DType::F64, rng);
  auto run = [&](DType dt) {
    const Tensor q = testing::convert(in.q, dt), k = testing::convert(in.k, dt), v = testing::convert(in.v, dt);
    const Tensor d = testing::convert(dout, dt);
    const Tensor o = Tensor::empty({batch * T, H, Dv}, dt), lse = Tensor::empty({batch, H, T}, dt);
    const Tensor dq = Tensor::empty({batch * T, H, D}, dt), dk = Tensor::empty({batch * T, H, D}, dt);
    const Tensor dv = Tensor::empty({batch * T, H, Dv}, dt);
    ops::attention_forward(ExecCtx::cpu(), q, k, v, o, lse, batch, 0.2);
    ops::attention_backward(ExecCtx::cpu(), q, k, v, o, lse, d, dq, dk, dv, batch, 0.2);
    return std::vector<std::vector<double>>{as_doubles(o), as_doubles(dq), as_doubles(dk), as_doubles(dv)};
  };
  const auto a = run(DType::F32), b = run(DType::F64);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(testing::max_rel_diff(a[i], b[i]), 1e-5) << i;
}

TEST(Attention, RejectsBadShapes) {
  const Tensor q = Tensor::zeros({10, 2, 4}, DType::F32), v = Tensor::zeros({10, 2, 3}, DType::F32);
  const Tensor o = Tensor::zeros({10, 2, 3}, DType::F32), lse = Tensor::zeros({2, 2, 5}, DType::F32);
  EXPECT_NO_THROW(ops::attention_forward(ExecCtx::cpu(), q, q, v, o, lse, 2, 1.0));
  EXPECT_THROW(ops::attention_forward(ExecCtx::cpu(), q, q, v, o, lse, 3, 1.0), Error);  // 10 rows, 3 sequences
  EXPECT_THROW(ops::attention_forward(ExecCtx::cpu(), q, v, v, o, lse, 2, 1.0), Error);  // k dim differs from q
  EXPECT_THROW(ops::attention_forward(ExecCtx::cpu(), q, q, v, o, Tensor::zeros({4}, DType::F32), 2, 1.0), Error);
}

}  // namespace
}  // namespace fp8train
