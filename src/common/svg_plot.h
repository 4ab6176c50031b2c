// Inline-SVG charts for self-contained HTML reports: no JavaScript, no external files, no fonts to load.
// Each chart function returns one `<svg>...</svg>` element (a string) to paste into an HTML page; the
// numbers plotted are given in data units and mapped onto the chart's axes here.
//
//   line_chart       x/y series (lines with optional markers), linear or log axes
//   histogram_chart  overlaid step histograms of raw values (shared bins), y = count
//   box_chart        grouped box plots (Tukey: box = quartiles, whiskers = furthest points within 1.5 IQR,
//                    outliers drawn as dots) over a categorical x axis
//   bar_chart        grouped bars over a categorical x axis
//
// Every chart has a title, axis labels, tick labels and a legend (one entry per series). All text is
// HTML-escaped. Category labels may contain '\n' line breaks (stacked lines; joined with spaces when the
// labels are too wide and get rotated). Non-finite values (and non-positive ones on a log axis) are left out of a plot, never
// drawn at a wrong place. Colours default to the Okabe–Ito palette (readable with colour-blindness).
//
// Example:
//   svg::Chart c;  c.title = "SNR vs length";  c.x = {"K (elements)", svg::Scale::Log2};  c.y = {"SNR (dB)"};
//   std::string html = svg::line_chart(c, {{"no promotion", ks, snr_np}, {"N_C = 128", ks, snr_128}});
#pragma once
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8train::svg {

// Escapes & < > " ' for HTML text and attribute values.
std::string escape(std::string_view text);

// The i-th colour of the default palette (cycles), as "#rrggbb".
std::string palette_color(std::size_t index);

enum class Scale {
  Linear,
  Log10,  // ticks at powers of ten (with 2 and 5 between when the range spans few decades)
  Log2,   // ticks at powers of two (every other one when there are many)
};

struct Axis {
  Axis() = default;
  Axis(std::string axis_label, Scale axis_scale = Scale::Linear)  // NOLINT: implicit, for c.x = {"K", Log2}
      : label(std::move(axis_label)), scale(axis_scale) {}

  std::string label;
  Scale scale = Scale::Linear;
  // Bounds in data units; NaN = taken from the data (and, on a linear axis, widened to whole ticks).
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  // Explicit tick positions (data units) replace the automatic ones when not empty.
  std::vector<double> ticks{};
};

enum class LegendPlacement { Right, Bottom, None };

struct Chart {
  std::string title;
  Axis x;  // ignored by box_chart/bar_chart except for its label (their x axis is categorical)
  Axis y;
  int width = 720;   // pixels, the whole figure including title, labels and legend
  int height = 400;
  LegendPlacement legend = LegendPlacement::Right;
};

// Every member has a default, so series can be brace-initialised with only the leading fields
// ({"name", x, y}) without -Wmissing-field-initializers warnings.
struct LineSeries {
  std::string name{};
  std::vector<double> x{};
  std::vector<double> y{};  // same length as x
  std::string color{};      // empty: palette colour of the series' index
  bool dashed = false;
  bool markers = true;
};
std::string line_chart(const Chart& chart, const std::vector<LineSeries>& series);

struct HistogramSeries {
  std::string name{};
  std::vector<double> values{};  // raw samples; binned over the shared x range
  std::string color{};
};
// `bins` equal-width bins over the x range (on a log x axis: equal width in log space).
std::string histogram_chart(const Chart& chart, const std::vector<HistogramSeries>& series, int bins = 30);

// Five-number summary of a sample as a Tukey box plot draws it (quartiles by linear interpolation).
struct BoxSummary {
  std::size_t count = 0;  // finite values summarised
  double low_whisker = 0, q1 = 0, median = 0, q3 = 0, high_whisker = 0;
  std::vector<double> outliers;  // values beyond the whiskers
};
BoxSummary summarize_box(std::vector<double> values);

// Quantile q in [0, 1] of the finite values (linear interpolation between order statistics); NaN if none.
double quantile(std::vector<double> values, double q);

struct BoxSeries {
  std::string name{};
  std::vector<std::vector<double>> values{};  // values[c] = the samples for category c
  std::string color{};
};
std::string box_chart(const Chart& chart, const std::vector<std::string>& categories,
                      const std::vector<BoxSeries>& series);

struct BarSeries {
  std::string name{};
  std::vector<double> values{};  // values[c] for category c
  std::string color{};
};
std::string bar_chart(const Chart& chart, const std::vector<std::string>& categories,
                      const std::vector<BarSeries>& series);

// Compact tick-label text for a number: "0.001", "16384", "1e-06", "2.5".
std::string format_tick(double value);

}  // namespace fp8train::svg
