// Helpers of the SNR report (see report_parts.h): row selection, medians, formatting, figure blocks.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/svg_plot.h"
#include "lab/report_parts.h"

namespace fp8train::lab::report {

std::vector<double> snr_values(const std::vector<SnrRow>& rows, int experiment, const RowFilter& where,
                               bool accumulation_only) {
  std::vector<double> v;
  for (const SnrRow& r : rows)
    if (r.experiment == experiment && where(r)) v.push_back(accumulation_only ? r.accum_snr_db : r.snr_db);
  return v;
}

double median_of(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double x) { return std::isnan(x); }), values.end());
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n % 2 == 1) return values[n / 2];
  const double lo = values[n / 2 - 1], hi = values[n / 2];
  if (std::isinf(lo) || std::isinf(hi)) return lo == hi ? lo : (std::isinf(hi) ? hi : lo);
  return 0.5 * (lo + hi);
}

double median_snr(const std::vector<SnrRow>& rows, int experiment, const RowFilter& where, bool accumulation_only) {
  return median_of(snr_values(rows, experiment, where, accumulation_only));
}

std::string db(double value) {
  if (std::isnan(value)) return "n/a";
  if (std::isinf(value)) return value > 0 ? "∞" : "−∞";
  return fmt::format("{:.1f}", value);
}

std::string html(const std::string& text) { return svg::escape(text); }

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

std::string figure_block(int number, const std::string& svg, const std::string& caption, const std::string& reading) {
  return fmt::format(
      "<figure id=\"fig{0}\">\n{1}<figcaption><b>Figure {0}.</b> {2}</figcaption>\n</figure>\n"
      "<p class=\"reading\"><b>Reading.</b> {3}</p>\n",
      number, svg, caption, reading);
}

}  // namespace fp8train::lab::report
