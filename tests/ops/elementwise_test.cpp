// Elementwise ops on matrix views: add, axpy, copy, scale, fill, including strided (column-block) views.
#include <gtest/gtest.h>

#include "gradcheck.h"
#include "ops/elementwise.h"

namespace fp8train {
namespace {

TEST(Elementwise, AddAxpyCopyScaleFillOnStridedViews) {
  std::mt19937_64 rng(1);
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor a = testing::random_tensor({9, 12}, dt, rng), b = testing::random_tensor({9, 12}, dt, rng);
    const Tensor av = a.cols(2, 7), bv = b.cols(5, 10);
    const std::vector<double> A = testing::as_doubles(av), B = testing::as_doubles(bv);
    Tensor out = Tensor::empty({9, 5}, dt);
    ops::add(ExecCtx::cpu(), av, bv, out);
    std::vector<double> got = testing::as_doubles(out);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], A[i] + B[i], 1e-6);
    ops::axpy(ExecCtx::cpu(), -2.0, av, out);  // out = a + b − 2a = b − a
    got = testing::as_doubles(out);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], B[i] - A[i], 1e-6);
    ops::copy(ExecCtx::cpu(), av, bv);  // writes into b's columns 5..9 only
    EXPECT_EQ(testing::as_doubles(bv), A);
    EXPECT_NE(testing::as_doubles(b.cols(0, 5)), A);
    ops::scale(ExecCtx::cpu(), bv, 3.0);
    got = testing::as_doubles(bv);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], 3 * A[i], 1e-6);
    ops::fill(ExecCtx::cpu(), bv, 0.25);
    for (double v : testing::as_doubles(bv)) EXPECT_EQ(v, 0.25);
  }
}

TEST(Elementwise, RejectsShapeAndDtypeMismatch) {
  const Tensor a = Tensor::zeros({3, 4}, DType::F32);
  EXPECT_THROW(ops::add(ExecCtx::cpu(), a, Tensor::zeros({4, 3}, DType::F32), a), Error);
  EXPECT_THROW(ops::add(ExecCtx::cpu(), a, Tensor::zeros({3, 4}, DType::F64), a), Error);
  EXPECT_THROW(ops::fill(ExecCtx::cpu(), Tensor::zeros({3}, DType::I32), 1.0), Error);
}

}  // namespace
}  // namespace fp8train
