// The optimizer ops over parameter arenas: adamw_update against the FP64 formula and, bit for bit, against the
// FP32 scalar expression it documents (FP32 and BF16 moments, decay and no decay), independent of the thread count;
// sum_squares_segments against the per-parameter chunked FP64 sum the gradient norm has always used, bit for bit,
// with gaps between segments; clear errors for bad arguments.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "../common/random_data.h"
#include "numerics/formats.h"
#include "ops/adamw.h"
#include "ops/sum_squares.h"

namespace fp8train {
namespace {

const ExecCtx& cpu() { return ExecCtx::cpu(); }

// The FP32 expression of ops/adamw.h for one element, written out independently of the kernel.
struct ScalarAdamW {
  float b1, omb1, b2, omb2, step_size, inv_sqrt_bias2, eps, decay;
  ScalarAdamW(const ops::AdamWHyper& h) {
    const double t = static_cast<double>(h.step);
    b1 = static_cast<float>(h.beta1);
    omb1 = static_cast<float>(1.0 - h.beta1);
    b2 = static_cast<float>(h.beta2);
    omb2 = static_cast<float>(1.0 - h.beta2);
    step_size = static_cast<float>(h.lr / (1.0 - std::pow(h.beta1, t)));
    inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t)));
    eps = static_cast<float>(h.eps);
    decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  }
  void apply(float& p, float g, float& m, float& v) const {
    m = b1 * m + omb1 * g;
    v = b2 * v + omb2 * (g * g);
    p = p * decay - step_size * (m / (std::sqrt(v) * inv_sqrt_bias2 + eps));
  }
};

TEST(AdamWOp, MatchesTheFormulaInFp64AndTheFp32ExpressionBitForBit) {
  const int64_t n = 1000;
  const std::vector<float> p0 = test_data::randn(n, 1), g1 = test_data::randn(n, 2, 0.1f),
                           g2 = test_data::randn(n, 3, 0.1f);
  for (double wd : {0.0, 0.1}) {
    SCOPED_TRACE(wd);
    Tensor p = Tensor::from_vector(p0, {n});
    const Tensor m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
    std::vector<double> P(p0.begin(), p0.end()), M(n, 0.0), V(n, 0.0);
    std::vector<float> ps = p0, ms(n, 0.0f), vs(n, 0.0f);
    const double lrs[2] = {1e-2, 3e-3};
    for (int t = 1; t <= 2; ++t) {
      const std::vector<float>& g = t == 1 ? g1 : g2;
      const ops::AdamWHyper h{
          .lr = lrs[t - 1], .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = wd, .step = t};
      ops::adamw_update(cpu(), p, Tensor::from_vector(g, {n}), m, v, h);
      const ScalarAdamW s(h);
      for (int64_t i = 0; i < n; ++i) {
        s.apply(ps[i], g[i], ms[i], vs[i]);
        M[i] = 0.9 * M[i] + 0.1 * g[i];
        V[i] = 0.95 * V[i] + 0.05 * g[i] * g[i];
        const double mhat = M[i] / (1 - std::pow(0.9, t)), vhat = V[i] / (1 - std::pow(0.95, t));
        P[i] = P[i] * (1 - lrs[t - 1] * wd) - lrs[t - 1] * mhat / (std::sqrt(vhat) + 1e-8);
      }
    }
    const std::vector<float> got_p = p.to_vector<float>(), got_m = m.to_vector<float>(), got_v = v.to_vector<float>();
    EXPECT_EQ(got_p, ps);
    EXPECT_EQ(got_m, ms);
    EXPECT_EQ(got_v, vs);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got_p[i], P[i], 1e-6 * (1 + std::fabs(P[i]))) << i;
      // m = 0.9·m + 0.1·g may cancel: bound its error by the size of the terms, not of the result
      ASSERT_NEAR(got_m[i], M[i], 1e-6 * 0.1 * (std::fabs(g1[i]) + std::fabs(g2[i])) + 1e-12) << i;
      ASSERT_NEAR(got_v[i], V[i], 1e-6 * std::fabs(V[i]) + 1e-15) << i;
    }
  }
}

TEST(AdamWOp, Bf16MomentsAreUpdatedInFp32AndRoundedToNearestEven) {
  const int64_t n = 777;
  const std::vector<float> p0 = test_data::randn(n, 4), g = test_data::randn(n, 5, 0.3f);
  // start from non-zero moments so the decode matters
  std::vector<bf16> m0(n), v0(n);
  const std::vector<float> mr = test_data::randn(n, 6, 0.05f), vr = test_data::randn(n, 7, 0.01f);
  for (int64_t i = 0; i < n; ++i) {
    m0[i] = bf16(mr[i]);
    v0[i] = bf16(vr[i] * vr[i]);
  }
  Tensor p = Tensor::from_vector(p0, {n});
  const Tensor m = Tensor::from_vector(m0, {n}), v = Tensor::from_vector(v0, {n});
  EXPECT_EQ(m.nbytes(), static_cast<size_t>(2 * n));
  const ops::AdamWHyper h{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .step = 3};
  ops::adamw_update(cpu(), p, Tensor::from_vector(g, {n}), m, v, h);
  const ScalarAdamW s(h);
  const std::vector<float> got_p = p.to_vector<float>();
  const std::vector<bf16> got_m = m.to_vector<bf16>(), got_v = v.to_vector<bf16>();
  for (int64_t i = 0; i < n; ++i) {
    float pi = p0[i], mi = static_cast<float>(m0[i]), vi = static_cast<float>(v0[i]);
    s.apply(pi, g[i], mi, vi);
    ASSERT_EQ(got_p[i], pi) << i;  // the update used the FP32 moments, before rounding
    ASSERT_EQ(got_m[i].bits, num::bf16_encode(mi)) << i;
    ASSERT_EQ(got_v[i].bits, num::bf16_encode(vi)) << i;
  }
}

TEST(AdamWOp, ResultDoesNotDependOnTheThreadCount) {
  const int64_t n = 200003;  // above the parallel threshold
  const std::vector<float> p0 = test_data::randn(n, 8), g = test_data::randn(n, 9);
  auto run = [&](int threads, DType moments) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor p = Tensor::from_vector(p0, {n});
    const Tensor m = Tensor::zeros({n}, moments), v = Tensor::zeros({n}, moments);
    for (int t = 1; t <= 3; ++t)
      ops::adamw_update(cpu(), p, Tensor::from_vector(g, {n}), m, v, {.lr = 1e-3, .weight_decay = 0.1, .step = t});
    omp_set_num_threads(saved);
    return p.to_vector<float>();
  };
  for (DType dt : {DType::F32, DType::BF16}) EXPECT_EQ(run(1, dt), run(3, dt));
}

TEST(AdamWOp, RejectsBadArguments) {
  const Tensor p = Tensor::zeros({8}, DType::F32), g = Tensor::zeros({8}, DType::F32);
  const Tensor m = Tensor::zeros({8}, DType::F32), v = Tensor::zeros({8}, DType::F32);
  const ops::AdamWHyper ok{.lr = 1e-3, .step = 1};
  EXPECT_NO_THROW(ops::adamw_update(cpu(), p, g, m, v, ok));
  EXPECT_THROW(ops::adamw_update(cpu(), p, Tensor::zeros({7}, DType::F32), m, v, ok), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, Tensor::zeros({8}, DType::BF16), v, ok), Error);  // mixed moments
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, Tensor::zeros({8}, DType::F64), Tensor::zeros({8}, DType::F64), ok),
               Error);
  EXPECT_THROW(ops::adamw_update(cpu(), Tensor::zeros({8}, DType::F64), g, m, v, ok), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), Tensor::zeros({8, 2}, DType::F32).narrow(1, 0, 1), g, m, v, ok), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, Tensor::zeros({2, 8}, DType::F32).narrow(1, 0, 4), v, ok), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, m, v, {.lr = std::nan(""), .step = 1}), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, m, v, {.lr = 1e-3, .step = 0}), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, m, v, {.lr = 1e-3, .beta2 = 1.0, .step = 1}), Error);
  EXPECT_THROW(ops::adamw_update(cpu(), p, g, m, v, {.lr = 1e-3, .weight_decay = -1, .step = 1}), Error);
}

// The gradient norm's summation before it became an op: per parameter, chunks of 16384 summed in FP64 from 0,
// the chunk sums added in order from 0.
double chunked_sum_of_squares(const float* g, int64_t n) {
  double total = 0.0;
  for (int64_t begin = 0; begin < n; begin += 16384) {
    double s = 0.0;
    for (int64_t i = begin; i < std::min(n, begin + 16384); ++i)
      s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    total += s;
  }
  return total;
}

TEST(SumSquaresOp, EqualsTheChunkedFp64SumPerSegmentBitForBit) {
  const int64_t n = 150000;
  const std::vector<float> x = test_data::randn(n, 11, 0.02f);
  // segments of many sizes (0, < 1 chunk, exactly 1 chunk, several chunks), with gaps and out of order
  const std::vector<int64_t> bounds{0, 5, 5, 5, 128, 16512, 20000, 90001, 100000, 150000, 7, 40000};
  const int64_t segs = static_cast<int64_t>(bounds.size() / 2);
  const Tensor out = Tensor::empty({segs}, DType::F64);
  ops::sum_squares_segments(cpu(), Tensor::from_vector(x, {n}), Tensor::from_vector(bounds, {segs, 2}), out);
  const std::vector<double> got = out.to_vector<double>();
  for (int64_t s = 0; s < segs; ++s) {
    const int64_t b = bounds[2 * s], e = bounds[2 * s + 1];
    EXPECT_EQ(got[s], chunked_sum_of_squares(x.data() + b, e - b)) << "segment " << s;
    double naive = 0.0;
    for (int64_t i = b; i < e; ++i) naive += static_cast<double>(x[i]) * x[i];
    EXPECT_NEAR(got[s], naive, 1e-12 * naive) << "segment " << s;
  }
  EXPECT_EQ(got[1], 0.0);  // an empty segment
  // thread count independence
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor one = Tensor::empty({segs}, DType::F64);
  ops::sum_squares_segments(cpu(), Tensor::from_vector(x, {n}), Tensor::from_vector(bounds, {segs, 2}), one);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.to_vector<double>(), got);
}

TEST(SumSquaresOp, RejectsBadArguments) {
  const Tensor x = Tensor::zeros({10}, DType::F32), out = Tensor::empty({1}, DType::F64);
  auto seg = [](int64_t b, int64_t e) { return Tensor::from_vector(std::vector<int64_t>{b, e}, {1, 2}); };
  EXPECT_NO_THROW(ops::sum_squares_segments(cpu(), x, seg(0, 10), out));
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, seg(0, 11), out), Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, seg(6, 5), out), Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, seg(-1, 5), out), Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, seg(0, 5), Tensor::empty({1}, DType::F32)), Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, seg(0, 5), Tensor::empty({2}, DType::F64)), Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, Tensor::from_vector(std::vector<int32_t>{0, 5}, {1, 2}), out),
               Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), x, seg(0, 5), out, 0), Error);
  EXPECT_THROW(ops::sum_squares_segments(cpu(), Tensor::zeros({10}, DType::I32), seg(0, 5), out), Error);
}

}  // namespace
}  // namespace fp8train
