// Error metrics (see metrics.h for the definitions and the edge rules). One pass accumulates every sum in
// double; the public functions pick their metric from it.
#include "numerics/metrics.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace fp8train::num {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T, typename R>
ErrorReport accumulate(const char* what, std::span<const T> test, std::span<const R> ref, double abs_floor) {
  FP8T_CHECK(test.size() == ref.size(), "{}: the two arrays differ in length ({} vs {} elements)", what,
             test.size(), ref.size());
  FP8T_CHECK(!test.empty(), "{}: nothing to compare (empty arrays)", what);
  FP8T_CHECK(abs_floor >= 0.0, "{}: abs_floor must be >= 0, got {}", what, abs_floor);
  double sum_ref2 = 0.0, sum_test2 = 0.0, sum_cross = 0.0, sum_diff2 = 0.0;
  double max_rel = 0.0, max_abs = 0.0;
  size_t max_rel_index = 0;
  bool any_nan = false;
  for (size_t i = 0; i < test.size(); ++i) {
    const double t = static_cast<double>(test[i]), r = static_cast<double>(ref[i]);
    const double d = t - r;
    if (std::isnan(d)) any_nan = true;  // a NaN input, or Inf - Inf
    sum_ref2 += r * r;
    sum_test2 += t * t;
    sum_cross += t * r;
    sum_diff2 += d * d;
    const double abs_err = std::fabs(d);
    const double denom = std::fmax(std::fabs(r), abs_floor);
    // ref_i == 0 with no floor: an exact zero is no error, anything else is infinitely wrong.
    const double rel = denom == 0.0 ? (abs_err == 0.0 ? 0.0 : kInf) : abs_err / denom;
    if (rel > max_rel) {
      max_rel = rel;
      max_rel_index = i;
    }
    if (abs_err > max_abs) max_abs = abs_err;
  }
  ErrorReport e;
  e.n = test.size();
  if (any_nan) {
    e.snr_db = e.calc_diff = e.rel_error_norm = e.max_rel_error = e.max_abs_error = kNaN;
    return e;
  }
  e.snr_db = sum_diff2 == 0.0 ? kInf : 10.0 * std::log10(sum_ref2 / sum_diff2);  // log10(0) = -Inf
  const double energy = sum_ref2 + sum_test2;
  e.calc_diff = energy == 0.0 ? 0.0 : 1.0 - 2.0 * sum_cross / energy;
  if (sum_ref2 == 0.0) {
    e.rel_error_norm = sum_diff2 == 0.0 ? 0.0 : kInf;
  } else {
    e.rel_error_norm = std::sqrt(sum_diff2 / sum_ref2);
  }
  e.max_rel_error = max_rel;
  e.max_rel_index = max_rel_index;
  e.max_abs_error = max_abs;
  return e;
}

}  // namespace

double snr_db(std::span<const double> ref, std::span<const double> test) {
  return accumulate("snr_db", test, ref, 0.0).snr_db;
}
double snr_db(std::span<const float> ref, std::span<const float> test) {
  return accumulate("snr_db", test, ref, 0.0).snr_db;
}
double snr_db(std::span<const double> ref, std::span<const float> test) {
  return accumulate("snr_db", test, ref, 0.0).snr_db;
}

double calc_diff(std::span<const double> x, std::span<const double> y) {
  return accumulate("calc_diff", x, y, 0.0).calc_diff;
}
double calc_diff(std::span<const float> x, std::span<const float> y) {
  return accumulate("calc_diff", x, y, 0.0).calc_diff;
}
double calc_diff(std::span<const float> x, std::span<const double> y) {
  return accumulate("calc_diff", x, y, 0.0).calc_diff;
}

double rel_error_norm(std::span<const double> test, std::span<const double> ref) {
  return accumulate("rel_error_norm", test, ref, 0.0).rel_error_norm;
}
double rel_error_norm(std::span<const float> test, std::span<const float> ref) {
  return accumulate("rel_error_norm", test, ref, 0.0).rel_error_norm;
}
double rel_error_norm(std::span<const float> test, std::span<const double> ref) {
  return accumulate("rel_error_norm", test, ref, 0.0).rel_error_norm;
}

double max_rel_error(std::span<const double> test, std::span<const double> ref, double abs_floor) {
  return accumulate("max_rel_error", test, ref, abs_floor).max_rel_error;
}
double max_rel_error(std::span<const float> test, std::span<const float> ref, double abs_floor) {
  return accumulate("max_rel_error", test, ref, abs_floor).max_rel_error;
}
double max_rel_error(std::span<const float> test, std::span<const double> ref, double abs_floor) {
  return accumulate("max_rel_error", test, ref, abs_floor).max_rel_error;
}

ErrorReport compare_errors(std::span<const float> test, std::span<const double> ref, double abs_floor) {
  return accumulate("compare_errors", test, ref, abs_floor);
}
ErrorReport compare_errors(std::span<const float> test, std::span<const float> ref, double abs_floor) {
  return accumulate("compare_errors", test, ref, abs_floor);
}
ErrorReport compare_errors(std::span<const double> test, std::span<const double> ref, double abs_floor) {
  return accumulate("compare_errors", test, ref, abs_floor);
}

}  // namespace fp8train::num
