// Error metrics (numerics/metrics.h): hand-computed values, the identities they must satisfy, the edge rules
// (identical, zero signal, ref = 0, NaN/Inf) and argument checking.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "numerics/metrics.h"

using namespace fp8train::num;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kInff = std::numeric_limits<float>::infinity();
}  // namespace

TEST(Metrics, HandComputedValues) {
  const std::vector<float> ref = {3.0f, 4.0f};
  const std::vector<float> test = {3.0f, 4.5f};
  // Σref² = 25, Σ(ref−test)² = 0.25: SNR = 10·log10(100) = 20 dB; ‖diff‖/‖ref‖ = 0.5/5.
  EXPECT_DOUBLE_EQ(snr_db(ref, test), 20.0);
  EXPECT_DOUBLE_EQ(rel_error_norm(test, ref), 0.1);
  EXPECT_DOUBLE_EQ(max_rel_error(test, ref), 0.125);  // 0.5 / 4
  // 1 − 2Σxy/Σ(x²+y²) = Σ(x−y)²/Σ(x²+y²) = 0.25 / 54.25. The first form (DeepGEMM's) cancels, so it is
  // accurate to about 1e-16 absolute, not to the last bit of the small result.
  EXPECT_NEAR(calc_diff(test, ref), 0.25 / 54.25, 1e-15);

  const ErrorReport r = compare_errors(test, ref);
  EXPECT_EQ(r.n, 2u);
  EXPECT_DOUBLE_EQ(r.snr_db, 20.0);
  EXPECT_DOUBLE_EQ(r.rel_error_norm, 0.1);
  EXPECT_DOUBLE_EQ(r.max_rel_error, 0.125);
  EXPECT_EQ(r.max_rel_index, 1u);
  EXPECT_DOUBLE_EQ(r.max_abs_error, 0.5);
  EXPECT_EQ(r.calc_diff, calc_diff(test, ref));
}

TEST(Metrics, MixedPrecisionOverloadsAgree) {
  const std::vector<double> ref = {1.0, -2.0, 0.5, 8.0};
  const std::vector<float> test = {1.25f, -2.0f, 0.25f, 7.0f};
  const std::vector<double> test_d(test.begin(), test.end());
  const std::vector<float> ref_f(ref.begin(), ref.end());  // exact: all values are floats
  EXPECT_DOUBLE_EQ(snr_db(ref, test), snr_db(ref, test_d));
  EXPECT_DOUBLE_EQ(snr_db(ref_f, test), snr_db(ref, test_d));
  EXPECT_DOUBLE_EQ(calc_diff(test, ref), calc_diff(test_d, ref));
  EXPECT_DOUBLE_EQ(calc_diff(test, ref_f), calc_diff(test_d, ref));
  EXPECT_DOUBLE_EQ(rel_error_norm(test, ref), rel_error_norm(test_d, ref));
  EXPECT_DOUBLE_EQ(rel_error_norm(test, ref_f), rel_error_norm(test_d, ref));
  EXPECT_DOUBLE_EQ(max_rel_error(test, ref), 0.5);  // |0.25 − 0.5| / 0.5
  EXPECT_DOUBLE_EQ(max_rel_error(test, ref_f), max_rel_error(test_d, ref));
  EXPECT_EQ(compare_errors(test_d, ref).max_rel_index, 2u);
}

TEST(Metrics, Identities) {
  const std::vector<double> x = {0.5, -1.5, 3.25, 1e-3, -7.0, 2.0};
  std::vector<double> minus_x, zeros(x.size(), 0.0), scaled_x, y;
  for (double v : x) {
    minus_x.push_back(-v);
    scaled_x.push_back(v * 1024.0);
    y.push_back(v * 1.01 + 0.003);
  }
  std::vector<double> scaled_y;
  for (double v : y) scaled_y.push_back(v * 1024.0);
  EXPECT_DOUBLE_EQ(calc_diff(x, minus_x), 2.0);  // opposite vectors: the maximum
  EXPECT_DOUBLE_EQ(calc_diff(x, zeros), 1.0);
  EXPECT_DOUBLE_EQ(calc_diff(x, y), calc_diff(y, x));  // symmetric
  const double cd = calc_diff(x, y);
  EXPECT_GT(cd, 0.0);
  EXPECT_LT(cd, 1e-3);
  // Scaling both by a power of two changes nothing.
  EXPECT_DOUBLE_EQ(snr_db(x, y), snr_db(scaled_x, scaled_y));
  EXPECT_DOUBLE_EQ(calc_diff(x, y), calc_diff(scaled_x, scaled_y));
  EXPECT_DOUBLE_EQ(rel_error_norm(y, x), rel_error_norm(scaled_y, scaled_x));
  EXPECT_DOUBLE_EQ(max_rel_error(y, x), max_rel_error(scaled_y, scaled_x));
  // SNR and the norm-wise error are two views of one ratio: SNR = −20·log10(rel).
  EXPECT_NEAR(snr_db(x, y), -20.0 * std::log10(rel_error_norm(y, x)), 1e-12);
  // The norm-wise error never exceeds the largest element-wise one.
  EXPECT_LE(rel_error_norm(y, x), max_rel_error(y, x));
}

TEST(Metrics, IdenticalInputsAreBestValues) {
  const std::vector<float> a = {1.0f, -2.0f, 0.0f, 3.5f};
  EXPECT_EQ(snr_db(a, a), kInf);
  EXPECT_EQ(calc_diff(a, a), 0.0);
  EXPECT_EQ(rel_error_norm(a, a), 0.0);
  EXPECT_EQ(max_rel_error(a, a), 0.0);  // a[2] = 0 == 0: no error at the zero element
  const std::vector<float> zeros(5, 0.0f);
  EXPECT_EQ(snr_db(zeros, zeros), kInf);
  EXPECT_EQ(calc_diff(zeros, zeros), 0.0);  // 0/0 defined as identical
  EXPECT_EQ(rel_error_norm(zeros, zeros), 0.0);
  EXPECT_EQ(max_rel_error(zeros, zeros), 0.0);
}

TEST(Metrics, ZeroSignalAndZeroReference) {
  const std::vector<float> zeros = {0.0f, 0.0f};
  const std::vector<float> test = {1.0f, 0.0f};
  EXPECT_EQ(snr_db(zeros, test), -kInf);
  EXPECT_EQ(rel_error_norm(test, zeros), kInf);
  EXPECT_EQ(max_rel_error(test, zeros), kInf);
  EXPECT_EQ(calc_diff(test, zeros), 1.0);

  // ref_i = 0 counts as infinitely wrong unless a floor measures it absolutely.
  const std::vector<double> ref = {0.0, 10.0};
  const std::vector<double> got = {1e-3, 10.5};
  EXPECT_EQ(max_rel_error(got, ref), kInf);
  EXPECT_EQ(compare_errors(got, ref).max_rel_index, 0u);
  EXPECT_DOUBLE_EQ(max_rel_error(got, ref, 1.0), 0.05);  // max(1e-3 / 1, 0.5 / 10)
  EXPECT_EQ(compare_errors(got, ref, 1.0).max_rel_index, 1u);
  EXPECT_DOUBLE_EQ(max_rel_error(got, ref, 100.0), 0.005);  // the floor also caps small |ref_i|
}

TEST(Metrics, NaNAndInf) {
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f};
  const std::vector<float> with_nan = {1.0f, kNaNf, 3.0f};
  EXPECT_TRUE(std::isnan(snr_db(ref, with_nan)));
  EXPECT_TRUE(std::isnan(snr_db(with_nan, ref)));
  EXPECT_TRUE(std::isnan(calc_diff(with_nan, ref)));
  EXPECT_TRUE(std::isnan(rel_error_norm(with_nan, ref)));
  EXPECT_TRUE(std::isnan(max_rel_error(with_nan, ref)));
  const ErrorReport r = compare_errors(ref, with_nan);
  EXPECT_TRUE(std::isnan(r.max_abs_error));
  // NaN even when the reference is all zero (the zero-signal rule must not turn it into Inf).
  const std::vector<float> zeros(3, 0.0f);
  EXPECT_TRUE(std::isnan(rel_error_norm(with_nan, zeros)));
  EXPECT_TRUE(std::isnan(max_rel_error(with_nan, zeros)));

  const std::vector<float> with_inf = {1.0f, kInff, 3.0f};
  EXPECT_EQ(snr_db(ref, with_inf), -kInf);
  EXPECT_EQ(rel_error_norm(with_inf, ref), kInf);
  EXPECT_EQ(max_rel_error(with_inf, ref), kInf);
  EXPECT_TRUE(std::isnan(snr_db(with_inf, with_inf)));  // Inf − Inf
}

// Sums are accumulated in double: with float accumulation 2^48 + 1000 would collapse to 2^48 and calc_diff
// would be exactly 0.
TEST(Metrics, AccumulatesInDouble) {
  std::vector<float> x(1001, 1.0f), y(1001, 0.0f);
  x[0] = y[0] = 16777216.0f;  // 2^24
  const double expected = 1000.0 / (std::ldexp(1.0, 49) + 1000.0);
  EXPECT_NEAR(calc_diff(x, y), expected, expected * 1e-3);
  EXPECT_NEAR(rel_error_norm(y, x), std::sqrt(1000.0 / (std::ldexp(1.0, 48) + 1000.0)), 1e-15);
}

TEST(Metrics, BadArguments) {
  const std::vector<float> a = {1.0f, 2.0f}, b = {1.0f, 2.0f, 3.0f}, empty;
  try {
    (void)snr_db(a, b);
    ADD_FAILURE() << "length mismatch accepted";
  } catch (const fp8train::Error& e) {
    EXPECT_NE(std::string(e.what()).find("differ in length (3 vs 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)calc_diff(empty, empty), fp8train::Error);
  EXPECT_THROW((void)rel_error_norm(a, b), fp8train::Error);
  EXPECT_THROW((void)max_rel_error(a, a, -1.0), fp8train::Error);
  EXPECT_THROW((void)max_rel_error(a, a, std::nan("")), fp8train::Error);
}
