// Error metrics between a reference array and a test array of the same length n (any shape, flattened;
// float or double elements). Every sum is accumulated in double. Used by the reference GEMM study, the
// numerics lab and the CUDA-vs-CPU tests.
//
//   snr_db(ref, test)          10·log10(Σref² / Σ(ref−test)²) in dB
//   calc_diff(x, y)            DeepGEMM's 1 − 2Σxy / Σ(x²+y²): 0 when x == y, symmetric, in [0, 2]
//   rel_error_norm(test, ref)  ‖test−ref‖₂ / ‖ref‖₂ (norm-wise relative error)
//   max_rel_error(test, ref)   max_i |test_i−ref_i| / max(|ref_i|, abs_floor)
//
// Edge rules (chosen so that "identical" is always the best possible value and never NaN):
//   - identical inputs (including all-zero ones): snr_db = +Inf, calc_diff = 0, both relative errors = 0;
//   - zero signal (ref all zero) but test not: snr_db = −Inf, rel_error_norm = +Inf;
//   - max_rel_error where the denominator max(|ref_i|, abs_floor) is 0 (ref_i = 0, abs_floor = 0): the
//     element counts 0 when test_i == 0, +Inf otherwise. Pass abs_floor > 0 (e.g. an absolute tolerance
//     or the typical magnitude of the output) to measure elements near zero absolutely instead;
//   - any NaN in either input, or the same infinity in both at one element (Inf − Inf), makes every metric
//     NaN; any other Inf gives what the IEEE arithmetic of the formula gives (snr_db −Inf, relative
//     errors +Inf, calc_diff NaN for an Inf in test facing a finite ref);
//   - n == 0 or mismatched lengths: fp8train::Error.
#pragma once
#include <cstddef>
#include <span>

namespace fp8train::num {

double snr_db(std::span<const double> ref, std::span<const double> test);
double snr_db(std::span<const float> ref, std::span<const float> test);
double snr_db(std::span<const double> ref, std::span<const float> test);

double calc_diff(std::span<const double> x, std::span<const double> y);
double calc_diff(std::span<const float> x, std::span<const float> y);
double calc_diff(std::span<const float> x, std::span<const double> y);

double rel_error_norm(std::span<const double> test, std::span<const double> ref);
double rel_error_norm(std::span<const float> test, std::span<const float> ref);
double rel_error_norm(std::span<const float> test, std::span<const double> ref);

double max_rel_error(std::span<const double> test, std::span<const double> ref, double abs_floor = 0.0);
double max_rel_error(std::span<const float> test, std::span<const float> ref, double abs_floor = 0.0);
double max_rel_error(std::span<const float> test, std::span<const double> ref, double abs_floor = 0.0);

// All of the above in one pass over the data (test against ref), plus where the largest relative error is.
struct ErrorReport {
  size_t n = 0;
  double snr_db = 0.0;
  double calc_diff = 0.0;
  double rel_error_norm = 0.0;
  double max_rel_error = 0.0;
  size_t max_rel_index = 0;  // element with the largest relative error (first one on ties; 0 if all are 0)
  double max_abs_error = 0.0;
};
ErrorReport compare_errors(std::span<const float> test, std::span<const double> ref, double abs_floor = 0.0);
ErrorReport compare_errors(std::span<const float> test, std::span<const float> ref, double abs_floor = 0.0);
ErrorReport compare_errors(std::span<const double> test, std::span<const double> ref, double abs_floor = 0.0);

}  // namespace fp8train::num
