// Report sections of experiments 1–3 (vector length, correlation, promotion interval): figures, readings
// (every number computed from the rows) and tables.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/svg_plot.h"
#include "lab/report_parts.h"

namespace fp8train::lab::report {
namespace {

struct AccumChoice {
  std::string label;
  std::string name;
  int promote_interval;
};
const std::vector<AccumChoice>& accum_choices() {
  static const std::vector<AccumChoice> v = {
      {"Hopper, no promotion", "hopper", 0}, {"Hopper, N_C = 128", "hopper", 128}, {"FP32 accumulation", "fp32", -1}};
  return v;
}
bool is_accum(const SnrRow& r, const AccumChoice& a) {
  return r.accumulation == a.name && r.promote_interval == a.promote_interval;
}

std::string scaling_label(const std::string& s) {
  if (s == "none") return "no scaling";
  if (s == "tensor") return "per-vector amax";
  if (s == "1x128") return "1×128 tiles";
  if (s == "1x32") return "1×32 tiles";
  return s;
}

std::string k_label(int64_t k) { return fmt::format("K = {}", k); }

}  // namespace

// ---- experiment 1 ---------------------------------------------------------------------------------------
std::string section_length(const std::vector<SnrRow>& rows, int& figure) {
  if (snr_values(rows, 1, [](const SnrRow&) { return true; }).empty()) return {};
  const auto& ks = study_lengths();
  std::string out =
      "<section id=\"exp1\"><h2>1. Vector length × scaling × accumulation</h2>\n"
      "<p>Independent vectors a, b ~ N(0, σ²) (σ = 10⁻³, 10⁻², 1), quantized to E4M3 with no scaling, one amax "
      "scale per vector, 1×128 or 1×32 tiles, and multiplied with the Hopper accumulator without promotion, with "
      "promotion every 128 elements, or in FP32.</p>\n";

  // Figure: SNR vs K for the three accumulations (1×128 tiles, σ = 1).
  {
    std::vector<svg::BoxSeries> series;
    for (const auto& a : accum_choices()) {
      svg::BoxSeries s{a.label, {}, ""};
      for (int64_t k : ks)
        s.values.push_back(snr_values(rows, 1, [&](const SnrRow& r) {
          return r.length == k && r.scaling == "1x128" && same(r.sigma, 1.0) && is_accum(r, a);
        }));
      series.push_back(std::move(s));
    }
    std::vector<std::string> cats;
    for (int64_t k : ks) cats.push_back(k_label(k));
    svg::Chart c;
    c.title = "SNR of E4M3 inner products vs length (1×128 tiles, σ = 1)";
    c.x.label = "vector length K";
    c.y.label = "SNR (dB), per sample";
    c.width = 900;
    auto med = [&](int64_t k, int acc_index) {
      const auto& a = accum_choices()[acc_index];
      return median_snr(rows, 1, [&](const SnrRow& r) {
        return r.length == k && r.scaling == "1x128" && same(r.sigma, 1.0) && is_accum(r, a);
      });
    };
    const std::string reading = fmt::format(
        "For independent Gaussian vectors the E4M3 rounding of the inputs sets the SNR: the median is {} dB at "
        "K = 128 and {} dB at K = 16384 without promotion, {} / {} dB with promotion every 128 and {} / {} dB "
        "with FP32 accumulation. Growing K from 128 to 16384 moves no accumulation by more than {} dB, because "
        "the accumulator's own error (next figure) stays far below the rounding noise of the inputs when the "
        "vectors are uncorrelated.",
        db(med(128, 0)), db(med(16384, 0)), db(med(128, 1)), db(med(16384, 1)), db(med(128, 2)),
        db(med(16384, 2)),
        db(std::max({std::fabs(med(16384, 0) - med(128, 0)), std::fabs(med(16384, 1) - med(128, 1)),
                     std::fabs(med(16384, 2) - med(128, 2))})));
    out += figure_block(++figure, svg::box_chart(c, cats, series),
                        "Per-sample SNR (each sample: 8 inner products) against the FP64 product of the unquantized "
                        "inputs. Boxes: quartiles; line: median; whiskers: 1.5 IQR; circles: outliers.",
                        reading);
  }

  // Figure: accumulation-only SNR vs K.
  {
    std::vector<svg::LineSeries> series;
    std::vector<double> xs(ks.begin(), ks.end());
    for (size_t ai = 0; ai < accum_choices().size(); ++ai) {
      const auto& a = accum_choices()[ai];
      for (const std::string sc : {"1x128", "tensor"}) {
        svg::LineSeries s;
        s.name = a.label + ", " + scaling_label(sc);
        s.x = xs;
        s.color = svg::palette_color(ai);
        s.dashed = sc == "tensor";
        for (int64_t k : ks)
          s.y.push_back(median_snr(
              rows, 1,
              [&](const SnrRow& r) { return r.length == k && r.scaling == sc && same(r.sigma, 1.0) && is_accum(r, a); },
              true));
        series.push_back(std::move(s));
      }
    }
    svg::Chart c;
    c.title = "Accumulation error alone vs length (σ = 1)";
    c.x = {"vector length K", svg::Scale::Log2};
    c.x.ticks = xs;
    c.y.label = "median accumulation-only SNR (dB)";
    c.width = 900;
    auto acc_med = [&](int64_t k, int ai) {
      const auto& a = accum_choices()[ai];
      return median_snr(
          rows, 1,
          [&](const SnrRow& r) { return r.length == k && r.scaling == "1x128" && same(r.sigma, 1.0) && is_accum(r, a); },
          true);
    };
    const double drop = acc_med(128, 0) - acc_med(16384, 0);
    const std::string reading = fmt::format(
        "Measured against the exact product of the quantized inputs, the accumulator's own error grows with K when "
        "it is never promoted: the median accumulation-only SNR falls from {} dB at K = 128 to {} dB at K = 1024, "
        "{} dB at K = 4096 and {} dB at K = 16384 ({} dB per doubling of K), because every 32-product block is "
        "aligned to, and truncated relative to, an ever larger running sum. Promotion every 128 elements keeps it "
        "between {} and {} dB at every length; FP32 accumulation sits at {}–{} dB.",
        db(acc_med(128, 0)), db(acc_med(1024, 0)), db(acc_med(4096, 0)), db(acc_med(16384, 0)),
        db(drop / std::log2(16384.0 / 128.0)),
        db(std::min({acc_med(128, 1), acc_med(1024, 1), acc_med(4096, 1), acc_med(16384, 1)})),
        db(std::max({acc_med(128, 1), acc_med(1024, 1), acc_med(4096, 1), acc_med(16384, 1)})),
        db(std::min(acc_med(16384, 2), acc_med(128, 2))), db(std::max(acc_med(16384, 2), acc_med(128, 2))));
    out += figure_block(++figure, svg::line_chart(c, series),
                        "Median SNR of the quantized computation against the exact (FP64) product of the same "
                        "quantized inputs: the accumulator's share of the error. Solid: 1×128 tiles; dashed: one "
                        "scale per vector.",
                        reading);
  }

  // Figure: SNR vs σ for the scalings (K = 4096, N_C = 128).
  {
    const auto& sigmas = study_sigmas();
    std::vector<svg::BoxSeries> series;
    for (const std::string& sc : study_scalings()) {
      svg::BoxSeries s{scaling_label(sc), {}, ""};
      for (double sg : sigmas)
        s.values.push_back(snr_values(rows, 1, [&](const SnrRow& r) {
          return r.length == 4096 && r.scaling == sc && same(r.sigma, sg) && r.accumulation == "hopper" &&
                 r.promote_interval == 128;
        }));
      series.push_back(std::move(s));
    }
    std::vector<std::string> cats;
    for (double sg : sigmas) cats.push_back(fmt::format("σ = {:g}", sg));
    svg::Chart c;
    c.title = "Scaling vs input magnitude (K = 4096, Hopper N_C = 128)";
    c.x.label = "standard deviation of the inputs";
    c.y.label = "SNR (dB), per sample";
    c.width = 900;
    auto med = [&](const std::string& sc, double sg) {
      return median_snr(rows, 1, [&](const SnrRow& r) {
        return r.length == 4096 && r.scaling == sc && same(r.sigma, sg) && r.accumulation == "hopper" &&
               r.promote_interval == 128;
      });
    };
    double lo = INFINITY, hi = -INFINITY;
    for (const std::string sc : {"tensor", "1x128", "1x32"})
      for (double sg : sigmas) {
        lo = std::min(lo, med(sc, sg));
        hi = std::max(hi, med(sc, sg));
      }
    const std::string reading = fmt::format(
        "Without scaling, inputs with σ = 10⁻³ lie almost entirely below half of E4M3's smallest subnormal "
        "(2⁻⁹ ≈ 0.00195) and flush to zero or to a single code: the median SNR is {} dB. At σ = 10⁻² the values "
        "sit in the subnormal range and the SNR is {} dB; at σ = 1 they already fill E4M3's normal range and "
        "no scaling gives {} dB. With an amax scale (the largest value mapped to 448) every σ gives {}–{} dB: "
        "per-vector {} dB, 1×128 tiles {} dB, 1×32 tiles {} dB at σ = 1. For Gaussian data having a scale "
        "matters, its granularity moves the SNR by {} dB — mostly because each tile's largest value is "
        "represented exactly, and smaller tiles have more of them.",
        db(med("none", 1e-3)), db(med("none", 1e-2)), db(med("none", 1.0)), db(lo), db(hi), db(med("tensor", 1.0)),
        db(med("1x128", 1.0)), db(med("1x32", 1.0)),
        db(std::max({med("tensor", 1.0), med("1x128", 1.0), med("1x32", 1.0)}) -
           std::min({med("tensor", 1.0), med("1x128", 1.0), med("1x32", 1.0)})));
    out += figure_block(++figure, svg::box_chart(c, cats, series),
                        "Per-sample SNR for each scaling at three input magnitudes.", reading);
  }

  // Table: every configuration's median.
  {
    std::string t = "<table class=\"grid\"><caption>Median SNR (dB) of every configuration of experiment 1 "
                    "(columns: K; sub-columns: no promotion / N_C = 128 / FP32).</caption>\n<tr><th>σ</th><th>scaling</th>";
    for (int64_t k : ks) t += fmt::format("<th colspan=\"3\">K = {}</th>", k);
    t += "</tr>\n<tr><th></th><th></th>";
    for (size_t i = 0; i < ks.size(); ++i) t += "<th>none</th><th>128</th><th>FP32</th>";
    t += "</tr>\n";
    for (double sg : study_sigmas())
      for (const std::string& sc : study_scalings()) {
        t += fmt::format("<tr><td>{:g}</td><td>{}</td>", sg, html(scaling_label(sc)));
        for (int64_t k : ks)
          for (const auto& a : accum_choices())
            t += "<td>" + db(median_snr(rows, 1, [&](const SnrRow& r) {
                   return r.length == k && r.scaling == sc && same(r.sigma, sg) && is_accum(r, a);
                 })) + "</td>";
        t += "</tr>\n";
      }
    out += t + "</table>\n";
  }
  return out + "</section>\n";
}

// ---- experiment 2 ---------------------------------------------------------------------------------------
std::string section_correlation(const std::vector<SnrRow>& rows, int& figure) {
  if (snr_values(rows, 2, [](const SnrRow&) { return true; }).empty()) return {};
  const auto& rhos = study_correlations();
  std::string out =
      "<section id=\"exp2\"><h2>2. Correlated vectors</h2>\n"
      "<p>a ~ N(0, 1), b = ρ·a + √(1−ρ²)·z with z ~ N(0, 1) independent, so the correlation of a and b is "
      "exactly ρ; K = 4096, E4M3, the same scaling × accumulation grid as experiment 1.</p>\n";
  auto med = [&](double rho, const std::string& sc, int ai, bool acc_only = false) {
    const auto& a = accum_choices()[ai];
    return median_snr(
        rows, 2, [&](const SnrRow& r) { return same(r.rho, rho) && r.scaling == sc && is_accum(r, a); }, acc_only);
  };
  {
    std::vector<svg::BoxSeries> series;
    for (const auto& a : accum_choices()) {
      svg::BoxSeries s{a.label, {}, ""};
      for (double rho : rhos)
        s.values.push_back(
            snr_values(rows, 2, [&](const SnrRow& r) { return same(r.rho, rho) && r.scaling == "1x128" && is_accum(r, a); }));
      series.push_back(std::move(s));
    }
    std::vector<std::string> cats;
    for (double rho : rhos) cats.push_back(fmt::format("ρ = {:g}", rho));
    svg::Chart c;
    c.title = "SNR vs correlation of the two vectors (K = 4096, 1×128 tiles)";
    c.width = 900;
    c.x.label = "Pearson correlation ρ of a and b";
    c.y.label = "SNR (dB), per sample";
    double worst_gap = -INFINITY, worst_rho = 0;
    for (double rho : rhos) {
      const double gap = med(rho, "1x128", 2) - med(rho, "1x128", 0);
      if (gap > worst_gap) {
        worst_gap = gap;
        worst_rho = rho;
      }
    }
    const std::string reading = fmt::format(
        "With FP32 accumulation the SNR rises with the correlation, from {} dB at ρ = 0 to {} dB at ρ = 0.5 and "
        "{} dB at ρ = 0.99: the signal a·b grows like ρK while the input rounding noise grows like √K. Without "
        "promotion the accumulator puts a ceiling on it that correlation lowers: {} dB at ρ = 0.1, {} dB at "
        "ρ = 0.5, {} dB at ρ = 0.9 and {} dB at ρ = 0.99, because the running sum grows like ρK and every block "
        "of 32 products is truncated relative to it; the loss against FP32 reaches {} dB (at ρ = {:g}). "
        "Promotion every 128 elements restores the SNR: {} dB at ρ = 0.99, within {} dB of FP32. With one scale "
        "per vector and the same promotion the SNR at ρ = 0.99 is {} dB, so {}.",
        db(med(0.0, "1x128", 2)), db(med(0.5, "1x128", 2)), db(med(0.99, "1x128", 2)), db(med(0.1, "1x128", 0)),
        db(med(0.5, "1x128", 0)), db(med(0.9, "1x128", 0)), db(med(0.99, "1x128", 0)), db(worst_gap), worst_rho,
        db(med(0.99, "1x128", 1)), db(med(0.99, "1x128", 2) - med(0.99, "1x128", 1)), db(med(0.99, "tensor", 1)),
        std::fabs(med(0.99, "tensor", 1) - med(0.99, "1x128", 1)) < 3.0
            ? "the promotion, not the tile size, restores it"
            : "the tile size matters here as well");
    out += figure_block(++figure, svg::box_chart(c, cats, series), "Per-sample SNR against the FP64 product of the "
                        "unquantized inputs.", reading);
  }
  {
    std::vector<svg::HistogramSeries> series;
    for (const auto& a : accum_choices())
      series.push_back({a.label, snr_values(rows, 2, [&](const SnrRow& r) {
                          return same(r.rho, 0.99) && r.scaling == "1x128" && is_accum(r, a);
                        }), ""});
    series.push_back({"Hopper, N_C = 128, no scaling", snr_values(rows, 2, [&](const SnrRow& r) {
                        return same(r.rho, 0.99) && r.scaling == "none" && r.accumulation == "hopper" &&
                               r.promote_interval == 128;
                      }), ""});
    svg::Chart c;
    c.title = "Distribution of per-sample SNR at ρ = 0.99 (K = 4096)";
    c.x.label = "SNR (dB)";
    c.y.label = "samples";
    c.width = 900;
    const auto never = series[0].values, promoted = series[1].values;
    const double never_max = never.empty() ? NAN : *std::max_element(never.begin(), never.end());
    const double never_min = never.empty() ? NAN : *std::min_element(never.begin(), never.end());
    const double promoted_min = promoted.empty() ? NAN : *std::min_element(promoted.begin(), promoted.end());
    const std::string reading = fmt::format(
        "At ρ = 0.99 (1×128 tiles) the samples without promotion lie between {} and {} dB and those with "
        "N_C = 128 at {} dB or more{}; the medians are {}, {} and {} dB (no promotion, N_C = 128, FP32). The "
        "no-promotion spread is narrow because its error is a systematic truncation bias proportional to the "
        "sum, not noise. Without any scaling (E4M3 codes of the raw N(0, 1) values) promotion gives {} dB.",
        db(never_min), db(never_max), db(promoted_min),
        never_max < promoted_min ? ": the distributions do not overlap" : "",
        db(med(0.99, "1x128", 0)), db(med(0.99, "1x128", 1)), db(med(0.99, "1x128", 2)),
        db(median_snr(rows, 2, [&](const SnrRow& r) {
          return same(r.rho, 0.99) && r.scaling == "none" && r.accumulation == "hopper" && r.promote_interval == 128;
        })));
    out += figure_block(++figure, svg::histogram_chart(c, series, 40), "Histogram of per-sample SNR.", reading);
  }
  {
    std::string t = "<table class=\"grid\"><caption>Target ρ, the correlation measured on our samples (mean over "
                    "samples of the pooled Pearson ρ), and the true correlation of the published construction "
                    "b = ρ·z1 + (1−ρ)·z2, which is ρ / √(ρ² + (1−ρ)²).</caption>\n"
                    "<tr><th>target ρ</th><th>measured ρ (this study)</th><th>published construction's ρ</th></tr>\n";
    for (double rho : rhos) {
      double sum = 0;
      int n = 0;
      for (const SnrRow& r : rows)
        if (r.experiment == 2 && same(r.rho, rho) && r.scaling == "none" && r.accumulation == "fp32" &&
            !std::isnan(r.measured_rho)) {
          sum += r.measured_rho;
          ++n;
        }
      const double published = rho / std::sqrt(rho * rho + (1 - rho) * (1 - rho));
      t += fmt::format("<tr><td>{:g}</td><td>{}</td><td>{:.4f}</td></tr>\n", rho,
                       n ? fmt::format("{:.4f}", sum / n) : std::string("n/a"), published);
    }
    out += t + "</table>\n";
  }
  return out + "</section>\n";
}

// ---- experiment 3 ---------------------------------------------------------------------------------------
std::string section_promotion(const std::vector<SnrRow>& rows, int& figure) {
  if (snr_values(rows, 3, [](const SnrRow&) { return true; }).empty()) return {};
  std::string out =
      "<section id=\"exp3\"><h2>3. Promotion interval N_C</h2>\n"
      "<p>E4M3 with one amax scale per vector; the Hopper accumulator promotes its FP22 chain into FP32 every "
      "N_C elements (N_C = 32 … 1024), or never (one chain over all of K). Independent (ρ = 0) and correlated "
      "(ρ = 0.9) pairs at K = 4096 and 16384.</p>\n";
  std::vector<std::string> cats;
  struct Cat {
    std::string acc;
    int nc;
  };
  std::vector<Cat> cat_keys;
  for (int nc : study_promote_intervals()) {
    cats.push_back(nc == 0 ? "never" : fmt::format("{}", nc));
    cat_keys.push_back({"hopper", nc});
  }
  cats.push_back("FP32");
  cat_keys.push_back({"fp32", -1});
  struct Ser {
    int64_t k;
    double rho;
  };
  const std::vector<Ser> sers = {{4096, 0.0}, {16384, 0.0}, {4096, 0.9}, {16384, 0.9}};
  std::vector<svg::BoxSeries> series;
  for (const auto& s : sers) {
    svg::BoxSeries b{fmt::format("K = {}, ρ = {:g}", s.k, s.rho), {}, ""};
    for (const auto& ck : cat_keys)
      b.values.push_back(snr_values(rows, 3, [&](const SnrRow& r) {
        return r.length == s.k && same(r.rho, s.rho) && r.accumulation == ck.acc && r.promote_interval == ck.nc;
      }));
    series.push_back(std::move(b));
  }
  svg::Chart c;
  c.title = "SNR vs promotion interval N_C (E4M3, per-vector scaling)";
  c.x.label = "promotion interval N_C (elements of K)";
  c.y.label = "SNR (dB), per sample";
  c.width = 960;
  auto med = [&](int64_t k, double rho, const std::string& acc, int nc) {
    return median_snr(rows, 3, [&](const SnrRow& r) {
      return r.length == k && same(r.rho, rho) && r.accumulation == acc && r.promote_interval == nc;
    });
  };
  double spread_lo = INFINITY, spread_hi = -INFINITY;
  for (int nc : study_promote_intervals())
    for (int64_t k : {4096, 16384}) {
      spread_lo = std::min(spread_lo, med(k, 0.0, "hopper", nc) - med(k, 0.0, "fp32", -1));
      spread_hi = std::max(spread_hi, med(k, 0.0, "hopper", nc) - med(k, 0.0, "fp32", -1));
    }
  const std::string reading = fmt::format(
      "For correlated vectors (ρ = 0.9) at K = 16384 the median SNR is {} dB with N_C = 32, {} dB with 128, "
      "{} dB with 256, {} dB with 1024 and {} dB without promotion (FP32: {} dB); at K = 4096 the same "
      "intervals give {}, {}, {}, {} and {} dB. From N_C = 256 to 1024 each doubling costs about {} dB, while "
      "N_C = 128 stays within {} dB of FP32 at K = 16384. For independent vectors every interval, even no "
      "promotion, lies within {} to {} dB of FP32: the input rounding dominates.",
      db(med(16384, 0.9, "hopper", 32)), db(med(16384, 0.9, "hopper", 128)), db(med(16384, 0.9, "hopper", 256)),
      db(med(16384, 0.9, "hopper", 1024)), db(med(16384, 0.9, "hopper", 0)), db(med(16384, 0.9, "fp32", -1)),
      db(med(4096, 0.9, "hopper", 32)), db(med(4096, 0.9, "hopper", 128)), db(med(4096, 0.9, "hopper", 256)),
      db(med(4096, 0.9, "hopper", 1024)), db(med(4096, 0.9, "hopper", 0)),
      db((med(16384, 0.9, "hopper", 256) - med(16384, 0.9, "hopper", 1024)) / 2.0),
      db(med(16384, 0.9, "fp32", -1) - med(16384, 0.9, "hopper", 128)), db(spread_lo), db(spread_hi));
  out += figure_block(++figure, svg::box_chart(c, cats, series),
                      "Per-sample SNR for each promotion interval; 'never' chains all of K in the tensor core.",
                      reading);
  return out + "</section>\n";
}

}  // namespace fp8train::lab::report
