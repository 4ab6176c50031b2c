// svg_plot: escaping, tick labels, box-plot statistics, and the SVG each chart emits (escaped text, legends,
// log axes that leave out non-positive values, non-finite values left out, multi-line category labels).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/svg_plot.h"

using namespace fp8train;

namespace {
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}
}  // namespace

TEST(SvgPlot, EscapesText) {
  EXPECT_EQ(svg::escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(svg::escape("σ = 10⁻³"), "σ = 10⁻³");  // UTF-8 passes through
}

TEST(SvgPlot, TickLabels) {
  EXPECT_EQ(svg::format_tick(0), "0");
  EXPECT_EQ(svg::format_tick(16384), "16384");
  EXPECT_EQ(svg::format_tick(0.001), "0.001");
  EXPECT_EQ(svg::format_tick(2.5), "2.5");
  EXPECT_EQ(svg::format_tick(0.30000000000000004), "0.3");
  EXPECT_EQ(svg::format_tick(1e-6), "1e-6");
  EXPECT_EQ(svg::format_tick(-2.5e7), "-2.5e7");
}

TEST(SvgPlot, BoxStatistics) {
  const svg::BoxSummary b = svg::summarize_box({1, 2, 3, 4, 5, 6, 7, 8, 9, 100, NAN});
  EXPECT_EQ(b.count, 10u);
  EXPECT_DOUBLE_EQ(b.median, 5.5);
  EXPECT_DOUBLE_EQ(b.q1, 3.25);
  EXPECT_DOUBLE_EQ(b.q3, 7.75);
  EXPECT_DOUBLE_EQ(b.low_whisker, 1);
  EXPECT_DOUBLE_EQ(b.high_whisker, 9);  // 100 lies beyond q3 + 1.5 IQR = 14.5
  ASSERT_EQ(b.outliers.size(), 1u);
  EXPECT_DOUBLE_EQ(b.outliers[0], 100);
  EXPECT_DOUBLE_EQ(svg::quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_TRUE(std::isnan(svg::quantile({}, 0.5)));
}

TEST(SvgPlot, LineChartHasAxesLegendAndEscapedText) {
  svg::Chart c;
  c.title = "SNR <vs> K";
  c.x = {"K & more", svg::Scale::Log2};
  c.y.label = "SNR (dB)";
  const std::string s = svg::line_chart(c, {{"a<1", {128, 1024, 16384}, {10, 20, 30}, "", false, true},
                                            {"b", {128, 1024}, {5, NAN}, "#123456", true, false}});
  EXPECT_EQ(s.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(s.find("SNR &lt;vs&gt; K"), std::string::npos);
  EXPECT_NE(s.find("K &amp; more"), std::string::npos);
  EXPECT_NE(s.find(">a&lt;1</text>"), std::string::npos);  // legend entry
  EXPECT_NE(s.find(">16384</text>"), std::string::npos);   // a log2 tick
  EXPECT_NE(s.find("stroke-dasharray"), std::string::npos);
  EXPECT_EQ(count(s, "<circle"), 3u);  // markers of the first series only; NaN point left out
  EXPECT_EQ(s.find("nan"), std::string::npos);
  EXPECT_EQ(count(s, "<svg"), count(s, "</svg>"));
}

TEST(SvgPlot, LogAxisLeavesOutNonPositiveValues) {
  svg::Chart c;
  c.x = {"x", svg::Scale::Log10};
  c.y = {"y", svg::Scale::Log10};
  const std::string s = svg::line_chart(c, {{"s", {0.001, 0.01, 0, -1, 1}, {1, 10, 5, 5, 100}, "", false, true}});
  EXPECT_EQ(count(s, "<circle"), 3u);
  EXPECT_EQ(s.find("nan"), std::string::npos);
  EXPECT_EQ(s.find("inf"), std::string::npos);
}

TEST(SvgPlot, BoxHistogramAndBarCharts) {
  svg::Chart c;
  c.title = "t";
  c.y.label = "SNR (dB)";
  const std::string box = svg::box_chart(c, {"K = 128", "two\nlines"},
                                         {{"s1", {{1, 2, 3, 4, 50}, {2, 3, 4}}, ""}, {"s2", {{5, 6}, {}}, ""}});
  EXPECT_EQ(count(box, "<rect x="), 1u + 1u + 3u + 2u);  // background, frame, 3 boxes, 2 legend swatches
  EXPECT_NE(box.find(">two</text>"), std::string::npos);
  EXPECT_NE(box.find(">lines</text>"), std::string::npos);
  svg::Chart h;  // no y label: the histogram names its axis "count"
  const std::string hist = svg::histogram_chart(h, {{"h", {1, 2, 2, 3, 3, 3, NAN}, ""}}, 3);
  EXPECT_NE(hist.find(">count</text>"), std::string::npos);
  EXPECT_NE(hist.find("<path d=\"M0"), std::string::npos);
  const std::string bars = svg::bar_chart(c, {"a", "b"}, {{"x", {1, -2}, ""}, {"y", {3, NAN}, ""}});
  EXPECT_EQ(count(bars, "fill-opacity=\"0.75\""), 3u);  // NaN bar left out
}
