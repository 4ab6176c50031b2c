// Inline-SVG charts (see svg_plot.h). Layout of every chart, in pixels of the figure:
//   title band on top; y-axis label and tick labels on the left; x tick labels and x-axis label below the
//   plot area; legend to the right of (or below) the plot area. Data are drawn inside a nested <svg> the
//   size of the plot area, which clips them without needing document-unique ids (several charts share a
//   page).
#include "common/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace fp8train::svg {
namespace {

constexpr double kCharWidth = 6.6;  // average width of a 12 px sans-serif character, for layout estimates
constexpr int kFontSize = 12;
constexpr int kTitleBand = 30;
constexpr int kLegendRow = 18;

bool usable(double v, Scale s) { return std::isfinite(v) && (s == Scale::Linear || v > 0); }
double to_axis(double v, Scale s) { return s == Scale::Linear ? v : std::log10(v); }

std::string num(double v) { return fmt::format("{:.2f}", v); }

// Category labels may hold '\n' line breaks.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    const size_t nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) return lines;
    start = nl + 1;
  }
}

std::string join_lines(const std::string& text) {
  std::string out = text;
  for (char& ch : out)
    if (ch == '\n') ch = ' ';
  return out;
}

double text_width(std::string_view text, double font = kFontSize) {
  return static_cast<double>(text.size()) * kCharWidth * font / kFontSize;
}

// 1, 2, 2.5 or 5 times a power of ten, the smallest not below `raw`.
double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10.0 * p;
}

// The resolved range of one numeric axis and its ticks.
struct AxisRange {
  Scale scale = Scale::Linear;
  double lo = 0, hi = 1;  // data units
  std::vector<double> ticks;
};

AxisRange resolve_axis(const Axis& axis, const std::vector<double>& data, bool include_zero = false) {
  AxisRange r;
  r.scale = axis.scale;
  double dmin = std::numeric_limits<double>::infinity(), dmax = -dmin;
  for (double v : data)
    if (usable(v, axis.scale)) {
      dmin = std::min(dmin, v);
      dmax = std::max(dmax, v);
    }
  if (include_zero && axis.scale == Scale::Linear && dmin <= dmax) {
    dmin = std::min(dmin, 0.0);
    dmax = std::max(dmax, 0.0);
  }
  if (!(dmin <= dmax)) {  // no data
    dmin = axis.scale == Scale::Linear ? 0.0 : 1.0;
    dmax = axis.scale == Scale::Linear ? 1.0 : 10.0;
  }
  const bool auto_lo = !std::isfinite(axis.min), auto_hi = !std::isfinite(axis.max);
  double lo = auto_lo ? dmin : axis.min, hi = auto_hi ? dmax : axis.max;
  if (axis.scale != Scale::Linear) {
    if (!(lo > 0)) lo = hi > 0 ? hi / 10 : 1.0;
    if (!(hi > lo)) hi = lo * 10;
  }
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    if (auto_lo) lo -= pad;
    if (auto_hi || !(hi > lo)) hi = lo + 2 * pad;
  }
  if (axis.scale == Scale::Linear) {
    const double step = nice_step((hi - lo) / 5);
    if (auto_lo) lo = std::floor(lo / step + 1e-9) * step;
    if (auto_hi) hi = std::ceil(hi / step - 1e-9) * step;
    if (!(hi > lo)) hi = lo + step;
  } else {  // log: pad 3 % of the span so points on the edge stay visible
    const double span = std::log10(hi) - std::log10(lo);
    if (auto_lo) lo = std::pow(10.0, std::log10(lo) - 0.03 * span);
    if (auto_hi) hi = std::pow(10.0, std::log10(hi) + 0.03 * span);
  }
  r.lo = lo;
  r.hi = hi;
  const double eps = (to_axis(hi, r.scale) - to_axis(lo, r.scale)) * 1e-9;
  auto inside = [&](double t) {
    return usable(t, r.scale) && to_axis(t, r.scale) >= to_axis(lo, r.scale) - eps &&
           to_axis(t, r.scale) <= to_axis(hi, r.scale) + eps;
  };
  if (!axis.ticks.empty()) {
    for (double t : axis.ticks)
      if (inside(t)) r.ticks.push_back(t);
    return r;
  }
  if (axis.scale == Scale::Linear) {
    const double step = nice_step((hi - lo) / 5);
    const long first = static_cast<long>(std::ceil(lo / step - 1e-9));
    const long last = static_cast<long>(std::floor(hi / step + 1e-9));
    for (long i = first; i <= last; ++i) r.ticks.push_back(static_cast<double>(i) * step);
  } else if (axis.scale == Scale::Log10) {
    const int e0 = static_cast<int>(std::floor(std::log10(lo))), e1 = static_cast<int>(std::ceil(std::log10(hi)));
    const bool subdivide = e1 - e0 <= 2;
    for (int e = e0; e <= e1; ++e)
      for (double m : subdivide ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
        const double t = m * std::pow(10.0, e);
        if (inside(t)) r.ticks.push_back(t);
      }
    while (r.ticks.size() > 10) {  // keep every other decade
      std::vector<double> thinned;
      for (std::size_t i = 0; i < r.ticks.size(); i += 2) thinned.push_back(r.ticks[i]);
      r.ticks = thinned;
    }
  } else {
    const int e0 = static_cast<int>(std::floor(std::log2(lo))), e1 = static_cast<int>(std::ceil(std::log2(hi)));
    int stride = 1;
    while ((e1 - e0) / stride > 9) ++stride;
    for (int e = e0; e <= e1; ++e)
      if ((e - e0) % stride == 0 && inside(std::ldexp(1.0, e))) r.ticks.push_back(std::ldexp(1.0, e));
  }
  return r;
}

// Maps data units of one axis onto [0, length] pixels (flipped for y so larger values are higher).
struct Mapper {
  AxisRange range;
  double length = 1;
  bool flip = false;
  double operator()(double v) const {
    const double a = to_axis(range.lo, range.scale), b = to_axis(range.hi, range.scale);
    const double t = (to_axis(v, range.scale) - a) / (b - a);
    return flip ? length * (1 - t) : length * t;
  }
};

struct LegendItem {
  std::string name;
  std::string color;
  enum Kind { Line, DashedLine, Swatch } kind = Line;
};

// The frame shared by every chart: the plot area's position and the legend's layout.
struct Frame {
  const Chart& chart;
  std::vector<LegendItem> legend;
  double left = 0, top = 0, width = 0, height = 0;  // plot area
  double category_label_angle = 0;                   // degrees; non-zero when categories are rotated
  int category_lines = 1;                            // lines of the tallest horizontal category label
  int legend_rows_bottom = 0;
  double legend_width_right = 0;

  Frame(const Chart& c, std::vector<LegendItem> items, const std::vector<std::string>& categories = {})
      : chart(c), legend(std::move(items)) {
    double y_tick_room = 48;
    left = 20 + y_tick_room;  // rotated y label + tick labels
    top = chart.title.empty() ? 12 : kTitleBand;
    double right_room = 16, bottom_room = 44;
    if (chart.legend == LegendPlacement::Right && !legend.empty()) {
      double w = 0;
      for (const auto& it : legend) w = std::max(w, text_width(it.name));
      legend_width_right = w + 40;
      right_room = legend_width_right + 12;
    }
    width = std::max(80.0, chart.width - left - right_room);
    if (!categories.empty()) {
      double longest_line = 0, longest_joined = 0;
      size_t max_lines = 1;
      for (const auto& cat : categories) {
        const auto lines = split_lines(cat);
        max_lines = std::max(max_lines, lines.size());
        for (const auto& l : lines) longest_line = std::max(longest_line, text_width(l));
        longest_joined = std::max(longest_joined, text_width(join_lines(cat)));
      }
      const double slot = width / static_cast<double>(categories.size());
      if (longest_line > slot - 6) {
        category_label_angle = -35;
        bottom_room += longest_joined * 0.6;
      } else {
        category_lines = static_cast<int>(max_lines);
        bottom_room += (category_lines - 1) * 14.0;
      }
    }
    if (chart.legend == LegendPlacement::Bottom && !legend.empty()) {
      double x = 0;
      legend_rows_bottom = 1;
      for (const auto& it : legend) {
        const double w = text_width(it.name) + 40;
        if (x + w > chart.width - left && x > 0) {
          ++legend_rows_bottom;
          x = 0;
        }
        x += w;
      }
      bottom_room += legend_rows_bottom * kLegendRow + 6;
    }
    height = std::max(60.0, chart.height - top - bottom_room);
  }

  std::string open() const {
    std::string s = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
        "role=\"img\" aria-label=\"{}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
        "font-size=\"{}\">\n<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
        chart.width, chart.height, chart.width, chart.height, escape(chart.title), kFontSize, chart.width,
        chart.height);
    if (!chart.title.empty())
      s += fmt::format("<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                       num(left + width / 2), escape(chart.title));
    return s;
  }

  // Grid lines, tick marks and tick labels of a numeric y axis, and the rotated y label.
  std::string y_axis(const Mapper& my) const {
    std::string s;
    for (double t : my.range.ticks) {
      const double y = top + my(t);
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e3e3e3\"/>\n", num(left), num(y),
                       num(left + width), num(y));
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", num(left - 5), num(y),
                       num(left), num(y));
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", num(left - 8), num(y + 4),
                       escape(format_tick(t)));
    }
    const double cx = 14, cy = top + height / 2;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 {} {})\">{}</text>\n",
                     num(cx), num(cy), num(cx), num(cy), escape(chart.y.label));
    return s;
  }

  std::string x_label_at(double baseline_offset) const {
    return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(left + width / 2),
                       num(top + height + baseline_offset), escape(chart.x.label));
  }

  std::string x_axis(const Mapper& mx) const {
    std::string s;
    for (double t : mx.range.ticks) {
      const double x = left + mx(t);
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#eeeeee\"/>\n", num(x), num(top), num(x),
                       num(top + height));
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", num(x), num(top + height),
                       num(x), num(top + height + 5));
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(x), num(top + height + 18),
                       escape(format_tick(t)));
    }
    s += x_label_at(36);
    return s;
  }

  std::string categories_axis(const std::vector<std::string>& categories) const {
    std::string s;
    const double slot = width / static_cast<double>(categories.size());
    for (std::size_t c = 0; c < categories.size(); ++c) {
      const double x = left + (static_cast<double>(c) + 0.5) * slot;
      if (c > 0) {
        const double xb = left + static_cast<double>(c) * slot;
        s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#eeeeee\"/>\n", num(xb), num(top),
                         num(xb), num(top + height));
      }
      if (category_label_angle == 0) {
        const auto lines = split_lines(categories[c]);
        for (size_t l = 0; l < lines.size(); ++l)
          s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(x),
                           num(top + height + 18 + 14.0 * static_cast<double>(l)), escape(lines[l]));
      } else {
        const double y = top + height + 14;
        s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" transform=\"rotate({} {} {})\">{}</text>\n",
                         num(x), num(y), num(category_label_angle), num(x), num(y), escape(join_lines(categories[c])));
      }
    }
    double longest = 0;
    for (const auto& cat : categories) longest = std::max(longest, text_width(join_lines(cat)));
    s += x_label_at(category_label_angle == 0 ? 36 + 14.0 * (category_lines - 1) : 36 + longest * 0.6);
    return s;
  }

  std::string frame_box() const {
    return fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
                       num(left), num(top), num(width), num(height));
  }

  std::string plot_area_open() const {
    return fmt::format("<svg x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" overflow=\"hidden\">\n", num(left), num(top),
                       num(width), num(height));
  }

  std::string legend_svg() const {
    if (chart.legend == LegendPlacement::None || legend.empty()) return {};
    std::string s;
    auto item = [&](const LegendItem& it, double x, double y) {
      std::string t;
      if (it.kind == LegendItem::Swatch) {
        t += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"22\" height=\"11\" fill=\"{}\" fill-opacity=\"0.35\" "
                         "stroke=\"{}\"/>\n",
                         num(x), num(y - 9), it.color, it.color);
      } else {
        t += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", num(x),
                         num(y - 4), num(x + 22), num(y - 4), it.color,
                         it.kind == LegendItem::DashedLine ? " stroke-dasharray=\"5 3\"" : "");
      }
      t += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", num(x + 28), num(y), escape(it.name));
      return t;
    };
    if (chart.legend == LegendPlacement::Right) {
      const double x = left + width + 14;
      for (std::size_t i = 0; i < legend.size(); ++i)
        s += item(legend[i], x, top + 12 + static_cast<double>(i) * kLegendRow);
    } else {
      double x = 0;
      double y = chart.height - legend_rows_bottom * kLegendRow + 8;
      for (const auto& it : legend) {
        const double w = text_width(it.name) + 40;
        if (x + w > chart.width - left && x > 0) {
          x = 0;
          y += kLegendRow;
        }
        s += item(it, left + x, y);
        x += w;
      }
    }
    return s;
  }
};

std::string color_of(const std::string& given, std::size_t index) {
  return given.empty() ? palette_color(index) : given;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string palette_color(std::size_t index) {
  // Okabe–Ito (without its yellow, too pale on white) plus black and grey.
  static const char* const colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                       "#56B4E9", "#000000", "#999999"};
  return colors[index % (sizeof(colors) / sizeof(colors[0]))];
}

std::string format_tick(double value) {
  if (value == 0 || !std::isfinite(value)) return value == 0 ? "0" : fmt::format("{}", value);
  const double a = std::fabs(value);
  if (a >= 1e-3 && a < 1e6) return fmt::format("{:.6g}", value);
  std::string s = fmt::format("{:.3g}", value);  // e.g. 1e-06, 2.5e+07
  const auto e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  const bool neg = exp[0] == '-';
  exp = exp.substr(1);
  while (exp.size() > 1 && exp[0] == '0') exp.erase(0, 1);
  return mant + "e" + (neg ? "-" : "") + exp;
}

double quantile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const std::size_t i = static_cast<std::size_t>(std::floor(pos));
  const double frac = pos - static_cast<double>(i);
  return i + 1 < values.size() ? values[i] + frac * (values[i + 1] - values[i]) : values[i];
}

BoxSummary summarize_box(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
               values.end());
  BoxSummary b;
  b.count = values.size();
  if (values.empty()) return b;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const std::size_t i = static_cast<std::size_t>(std::floor(pos));
    const double frac = pos - static_cast<double>(i);
    return i + 1 < values.size() ? values[i] + frac * (values[i + 1] - values[i]) : values[i];
  };
  b.q1 = at(0.25);
  b.median = at(0.5);
  b.q3 = at(0.75);
  const double iqr = b.q3 - b.q1;
  const double lo_fence = b.q1 - 1.5 * iqr, hi_fence = b.q3 + 1.5 * iqr;
  b.low_whisker = b.q1;
  b.high_whisker = b.q3;
  for (double v : values) {
    if (v < lo_fence || v > hi_fence) {
      b.outliers.push_back(v);
      continue;
    }
    b.low_whisker = std::min(b.low_whisker, v);
    b.high_whisker = std::max(b.high_whisker, v);
  }
  return b;
}

std::string line_chart(const Chart& chart, const std::vector<LineSeries>& series) {
  std::vector<double> xs, ys;
  std::vector<LegendItem> items;
  for (std::size_t i = 0; i < series.size(); ++i) {
    xs.insert(xs.end(), series[i].x.begin(), series[i].x.end());
    ys.insert(ys.end(), series[i].y.begin(), series[i].y.end());
    items.push_back({series[i].name, color_of(series[i].color, i),
                     series[i].dashed ? LegendItem::DashedLine : LegendItem::Line});
  }
  Frame f(chart, items);
  const Mapper mx{resolve_axis(chart.x, xs), f.width, false};
  const Mapper my{resolve_axis(chart.y, ys), f.height, true};
  std::string s = f.open() + f.y_axis(my) + f.x_axis(mx) + f.plot_area_open();
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto& sr = series[i];
    const std::string color = color_of(sr.color, i);
    std::string path, dots;
    bool pen_down = false;
    const std::size_t n = std::min(sr.x.size(), sr.y.size());
    for (std::size_t j = 0; j < n; ++j) {
      if (!usable(sr.x[j], chart.x.scale) || !usable(sr.y[j], chart.y.scale)) {
        pen_down = false;
        continue;
      }
      const double px = mx(sr.x[j]), py = my(sr.y[j]);
      path += fmt::format("{}{} {} ", pen_down ? "L" : "M", num(px), num(py));
      pen_down = true;
      if (sr.markers)
        dots += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>", num(px), num(py), color);
    }
    if (!path.empty())
      s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", path, color,
                       sr.dashed ? " stroke-dasharray=\"5 3\"" : "");
    s += dots + "\n";
  }
  s += "</svg>\n" + f.frame_box() + f.legend_svg() + "</svg>\n";
  return s;
}

std::string histogram_chart(const Chart& chart, const std::vector<HistogramSeries>& series, int bins) {
  bins = std::max(1, bins);
  std::vector<double> all;
  std::vector<LegendItem> items;
  for (std::size_t i = 0; i < series.size(); ++i) {
    all.insert(all.end(), series[i].values.begin(), series[i].values.end());
    items.push_back({series[i].name, color_of(series[i].color, i), LegendItem::Swatch});
  }
  Chart labelled = chart;
  if (labelled.y.label.empty()) labelled.y.label = "count";
  Frame f(labelled, items);
  const Mapper mx{resolve_axis(chart.x, all), f.width, false};
  const double a = to_axis(mx.range.lo, chart.x.scale), b = to_axis(mx.range.hi, chart.x.scale);
  std::vector<std::vector<double>> counts(series.size(), std::vector<double>(bins, 0.0));
  double peak = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    for (double v : series[i].values) {
      if (!usable(v, chart.x.scale)) continue;
      const double t = (to_axis(v, chart.x.scale) - a) / (b - a);
      if (t < 0 || t > 1) continue;
      const int bin = std::min(bins - 1, static_cast<int>(t * bins));
      peak = std::max(peak, ++counts[i][bin]);
    }
  }
  const Mapper my{resolve_axis(labelled.y, {0.0, peak}), f.height, true};
  std::string s = f.open() + f.y_axis(my) + f.x_axis(mx) + f.plot_area_open();
  const double bin_px = f.width / bins;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const std::string color = color_of(series[i].color, i);
    const double base = my(std::max(my.range.lo, 0.0));
    std::string path = fmt::format("M0 {} ", num(base));
    for (int k = 0; k < bins; ++k) {
      const double y0 = my(counts[i][k]);
      path += fmt::format("L{} {} L{} {} ", num(k * bin_px), num(y0), num((k + 1) * bin_px), num(y0));
    }
    path += fmt::format("L{} {} Z", num(f.width), num(base));
    s += fmt::format("<path d=\"{}\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"{}\" stroke-width=\"1.6\"/>\n", path,
                     color, color);
  }
  s += "</svg>\n" + f.frame_box() + f.legend_svg() + "</svg>\n";
  return s;
}

std::string box_chart(const Chart& chart, const std::vector<std::string>& categories,
                      const std::vector<BoxSeries>& series) {
  std::vector<double> all;
  std::vector<LegendItem> items;
  std::vector<std::vector<BoxSummary>> boxes(series.size());
  for (std::size_t i = 0; i < series.size(); ++i) {
    items.push_back({series[i].name, color_of(series[i].color, i), LegendItem::Swatch});
    for (std::size_t c = 0; c < categories.size(); ++c) {
      boxes[i].push_back(c < series[i].values.size() ? summarize_box(series[i].values[c]) : BoxSummary{});
      const BoxSummary& bx = boxes[i].back();
      if (bx.count == 0) continue;
      all.insert(all.end(), {bx.low_whisker, bx.high_whisker});
      all.insert(all.end(), bx.outliers.begin(), bx.outliers.end());
    }
  }
  Frame f(chart, items, categories);
  const Mapper my{resolve_axis(chart.y, all), f.height, true};
  std::string s = f.open() + f.y_axis(my) + f.categories_axis(categories) + f.plot_area_open();
  const double slot = f.width / static_cast<double>(std::max<std::size_t>(1, categories.size()));
  const double sub = slot * 0.84 / static_cast<double>(std::max<std::size_t>(1, series.size()));
  const double box_w = std::max(2.0, sub * 0.72);
  for (std::size_t i = 0; i < series.size(); ++i) {
    const std::string color = color_of(series[i].color, i);
    for (std::size_t c = 0; c < categories.size(); ++c) {
      const BoxSummary& bx = boxes[i][c];
      if (bx.count == 0) continue;
      const double cx = (static_cast<double>(c) + 0.08) * slot + (static_cast<double>(i) + 0.5) * sub;
      auto y = [&](double v) { return my(v); };
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\"/>", num(cx), num(y(bx.low_whisker)),
                       num(cx), num(y(bx.high_whisker)), color);
      for (double w : {bx.low_whisker, bx.high_whisker})
        s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\"/>", num(cx - box_w / 4),
                         num(y(w)), num(cx + box_w / 4), num(y(w)), color);
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" fill-opacity=\"0.3\" "
                       "stroke=\"{}\"/>",
                       num(cx - box_w / 2), num(y(bx.q3)), num(box_w), num(std::max(0.5, y(bx.q1) - y(bx.q3))), color,
                       color);
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2.5\"/>",
                       num(cx - box_w / 2), num(y(bx.median)), num(cx + box_w / 2), num(y(bx.median)), color);
      for (double o : bx.outliers)
        if (usable(o, chart.y.scale))
          s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"1.8\" fill=\"none\" stroke=\"{}\"/>", num(cx), num(y(o)),
                           color);
      s += "\n";
    }
  }
  s += "</svg>\n" + f.frame_box() + f.legend_svg() + "</svg>\n";
  return s;
}

std::string bar_chart(const Chart& chart, const std::vector<std::string>& categories,
                      const std::vector<BarSeries>& series) {
  std::vector<double> all;
  std::vector<LegendItem> items;
  for (std::size_t i = 0; i < series.size(); ++i) {
    all.insert(all.end(), series[i].values.begin(), series[i].values.end());
    items.push_back({series[i].name, color_of(series[i].color, i), LegendItem::Swatch});
  }
  Frame f(chart, items, categories);
  const Mapper my{resolve_axis(chart.y, all, /*include_zero=*/true), f.height, true};
  std::string s = f.open() + f.y_axis(my) + f.categories_axis(categories) + f.plot_area_open();
  const double slot = f.width / static_cast<double>(std::max<std::size_t>(1, categories.size()));
  const double sub = slot * 0.84 / static_cast<double>(std::max<std::size_t>(1, series.size()));
  const double base_value = chart.y.scale == Scale::Linear ? std::clamp(0.0, my.range.lo, my.range.hi) : my.range.lo;
  const double base = my(base_value);
  for (std::size_t i = 0; i < series.size(); ++i) {
    const std::string color = color_of(series[i].color, i);
    for (std::size_t c = 0; c < categories.size() && c < series[i].values.size(); ++c) {
      const double v = series[i].values[c];
      if (!usable(v, chart.y.scale)) continue;
      const double x0 = (static_cast<double>(c) + 0.08) * slot + static_cast<double>(i) * sub + sub * 0.08;
      const double yv = my(v);
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" fill-opacity=\"0.75\"/>\n",
                       num(x0), num(std::min(yv, base)), num(sub * 0.84), num(std::fabs(base - yv)), color);
    }
  }
  s += "</svg>\n" + f.frame_box() + f.legend_svg() + "</svg>\n";
  return s;
}

}  // namespace fp8train::svg
