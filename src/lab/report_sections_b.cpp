// Report sections of experiments 4–6 (outliers, formats, the DeepSeek-V3-shaped GEMM) and the key findings.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/svg_plot.h"
#include "lab/report_parts.h"

namespace fp8train::lab::report {
namespace {

std::string superscript(int e) {
  static const char* const digits[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string out = e < 0 ? "⁻" : "";
  for (char ch : std::to_string(e < 0 ? -e : e)) out += digits[ch - '0'];
  return out;
}

std::string factor_label(double f) {
  if (f == 1.0) return "no outliers";
  const int e = static_cast<int>(std::lround(std::log10(f)));
  if (std::fabs(f - std::pow(10.0, e)) < 1e-9 * f && e >= 3) return "10" + superscript(e) + "×";
  return fmt::format("{:g}×", f);
}

// A recipe's chart label: its name broken into lines at ": ", ", " and " / ".
std::string recipe_label(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if ((name[i] == ':' || name[i] == ',') && i + 1 < name.size() && name[i + 1] == ' ') {
      out += '\n';
      ++i;
      continue;
    }
    if (name.compare(i, 3, " / ") == 0) {
      out += '\n';
      i += 2;
      continue;
    }
    out += name[i];
  }
  return out;
}

std::string act_scaling_label(const std::string& s) {
  if (s == "tensor") return "per-tensor";
  if (s == "1x128") return "1×128 tiles";
  if (s == "128x128") return "128×128 blocks";
  return s;
}

std::string chooses(bool condition, const std::string& yes, const std::string& no) { return condition ? yes : no; }

}  // namespace

// ---- experiment 4 ---------------------------------------------------------------------------------------
std::string section_outliers(const std::vector<SnrRow>& rows, int& figure) {
  if (snr_values(rows, 4, [](const SnrRow&) { return true; }).empty()) return {};
  const auto& factors = study_outlier_factors();
  const std::vector<std::string> scalings = {"tensor", "1x128", "128x128"};
  std::string out =
      "<section id=\"exp4\"><h2>4. Outlier channels</h2>\n"
      "<p>Activations X [128 tokens × 2048] ~ N(0, 1) in which 4 channels (columns) are multiplied by a factor "
      "(none, 100×, 10³×, 10⁴×, 10⁵×), times weight rows N(0, 1) quantized in 128×128 blocks. The activation side is "
      "scaled per tensor, per 1×128 tile or per 128×128 block; E4M3 uses the Hopper accumulator with N_C = 128, "
      "INT8 exact int32 accumulation (both through fp8train's reference GEMM, with every activation scale "
      "re-expressed as 1×128 tiles). The outputs are scored twice: with all channels, and with the outlier "
      "channels' weights set to zero (“ordinary channels”), which isolates what the outliers' scale does to "
      "every other channel — with the outlier products included they dominate every output.</p>\n";
  auto med = [&](const std::string& data, const std::string& fmt_name, const std::string& sc, double f) {
    return median_snr(rows, 4, [&](const SnrRow& r) {
      return r.data == data && r.format == fmt_name && r.scaling == sc && same(r.outlier_factor, f);
    });
  };
  std::vector<std::string> cats;
  for (double f : factors) cats.push_back(factor_label(f));
  for (const std::string fmt_name : {"e4m3", "int8"}) {
    std::vector<svg::BoxSeries> series;
    for (const std::string& sc : scalings) {
      svg::BoxSeries s{act_scaling_label(sc), {}, ""};
      for (double f : factors)
        s.values.push_back(snr_values(rows, 4, [&](const SnrRow& r) {
          return r.data == "ordinary-channels" && r.format == fmt_name && r.scaling == sc && same(r.outlier_factor, f);
        }));
      series.push_back(std::move(s));
    }
    svg::Chart c;
    c.title = fmt::format("{}: SNR of the ordinary channels vs outlier magnitude", fmt_name == "e4m3" ? "E4M3" : "INT8");
    c.x.label = "magnitude of the 4 outlier channels";
    c.y.label = "SNR (dB), per sample";
    c.width = 900;
    std::string reading;
    if (fmt_name == "e4m3") {
      reading = fmt::format(
          "E4M3's exponent absorbs moderate outliers: with 100× outliers per-tensor scaling still gives {} dB on "
          "the ordinary channels (1×128 tiles {} dB, 128×128 blocks {} dB). The per-tensor scale pushes the "
          "ordinary values down toward the subnormals as the outliers grow: {} dB at 10³×, {} dB at 10⁴× and {} dB "
          "at 10⁵×, where 1×128 tiles keep {} / {} / {} dB and 128×128 blocks {} / {} / {} dB. {}",
          db(med("ordinary-channels", "e4m3", "tensor", 100)), db(med("ordinary-channels", "e4m3", "1x128", 100)),
          db(med("ordinary-channels", "e4m3", "128x128", 100)), db(med("ordinary-channels", "e4m3", "tensor", 1e3)),
          db(med("ordinary-channels", "e4m3", "tensor", 1e4)), db(med("ordinary-channels", "e4m3", "tensor", 1e5)),
          db(med("ordinary-channels", "e4m3", "1x128", 1e3)), db(med("ordinary-channels", "e4m3", "1x128", 1e4)),
          db(med("ordinary-channels", "e4m3", "1x128", 1e5)), db(med("ordinary-channels", "e4m3", "128x128", 1e3)),
          db(med("ordinary-channels", "e4m3", "128x128", 1e4)), db(med("ordinary-channels", "e4m3", "128x128", 1e5)),
          chooses(med("ordinary-channels", "e4m3", "1x128", 1e5) > med("ordinary-channels", "e4m3", "tensor", 1e5),
                  "Fine-grained scaling wins because only the tiles that hold an outlier channel (4 of 16 per "
                  "row) share its scale.",
                  "At these magnitudes fine-grained scaling does not beat per-tensor scaling in this run."));
    } else {
      reading = fmt::format(
          "INT8 has no exponent, so one large value costs every value that shares its scale: with 100× outliers "
          "the ordinary channels keep {} dB with a per-tensor scale, {} dB with 128×128 blocks and {} dB with "
          "1×128 tiles (no outliers: {} / {} / {} dB); at 10³× per-tensor INT8 reads {} dB. Even 1×128 tiles "
          "lose the 127 ordinary channels that share a tile with an outlier ({} dB at 10⁴×).",
          db(med("ordinary-channels", "int8", "tensor", 100)), db(med("ordinary-channels", "int8", "128x128", 100)),
          db(med("ordinary-channels", "int8", "1x128", 100)), db(med("ordinary-channels", "int8", "tensor", 1)),
          db(med("ordinary-channels", "int8", "128x128", 1)), db(med("ordinary-channels", "int8", "1x128", 1)),
          db(med("ordinary-channels", "int8", "tensor", 1e3)), db(med("ordinary-channels", "int8", "1x128", 1e4)));
    }
    out += figure_block(++figure, svg::box_chart(c, cats, series),
                        "Per-sample SNR of the outputs (128 tokens × the weight rows) computed with weights whose "
                        "outlier-channel entries are zero.",
                        reading);
  }
  std::string t = "<table class=\"grid\"><caption>Median SNR (dB) of experiment 4, all channels / ordinary "
                  "channels.</caption>\n<tr><th>format</th><th>activation scaling</th>";
  for (double f : factors) t += "<th>" + html(factor_label(f)) + "</th>";
  t += "</tr>\n";
  for (const std::string fmt_name : {"e4m3", "int8"})
    for (const std::string& sc : scalings) {
      t += fmt::format("<tr><td>{}</td><td>{}</td>", fmt_name, html(act_scaling_label(sc)));
      for (double f : factors)
        t += "<td>" + db(med("all-channels", fmt_name, sc, f)) + " / " + db(med("ordinary-channels", fmt_name, sc, f)) +
             "</td>";
      t += "</tr>\n";
    }
  out += t + "</table>\n";
  out += fmt::format(
      "<p>With all channels in the outputs, E4M3 reads {} dB (per-tensor) and {} dB (1×128) at 10⁴×: the outputs are "
      "then almost entirely the 4 outlier products, and each tile's largest value is represented exactly by the "
      "amax scale, so the tiled variant is even a little better.</p>\n",
      db(med("all-channels", "e4m3", "tensor", 1e4)), db(med("all-channels", "e4m3", "1x128", 1e4)));
  return out + "</section>\n";
}

// ---- experiment 5 ---------------------------------------------------------------------------------------
std::string section_formats(const std::vector<SnrRow>& rows, int& figure) {
  if (snr_values(rows, 5, [](const SnrRow&) { return true; }).empty()) return {};
  const std::vector<std::string> dists = {"gaussian", "student-t3", "gradient-like"};
  struct Cfg {
    std::string label, format, scaling, rounding, color;
  };
  // One hue per format/rounding, dark for per-vector scales and light for 1×128 tiles.
  const std::vector<Cfg> cfgs = {
      {"E4M3 per-vector", "e4m3", "tensor", "rne", "#0072B2"},
      {"E4M3 1×128", "e4m3", "1x128", "rne", "#56B4E9"},
      {"E5M2 per-vector", "e5m2", "tensor", "rne", "#007A5A"},
      {"E5M2 1×128", "e5m2", "1x128", "rne", "#5CC9A7"},
      {"INT8 per-vector RNE", "int8", "tensor", "rne", "#C04A00"},
      {"INT8 1×128 RNE", "int8", "1x128", "rne", "#F0A060"},
      {"INT8 per-vector stochastic", "int8", "tensor", "stochastic", "#8E3B78"},
      {"INT8 1×128 stochastic", "int8", "1x128", "stochastic", "#D9A0C8"},
  };
  std::string out =
      "<section id=\"exp5\"><h2>5. Formats: E4M3, E5M2, INT8</h2>\n"
      "<p>K = 4096 inner products of Gaussian pairs, Student-t (ν = 3) pairs, and a Wgrad-like product of a "
      "gradient-like vector (per-token magnitude spread over decades, heavy-tailed elements) with a Gaussian "
      "activation vector. Both operands use the same format and scaling; FP8 accumulates in the Hopper model "
      "with N_C = 128, INT8 exactly in int32. INT8 is symmetric ([−127, 127]), rounded to nearest even or "
      "stochastically.</p>\n";
  std::vector<svg::BoxSeries> series;
  for (const auto& cfg : cfgs) {
    svg::BoxSeries s{cfg.label, {}, cfg.color};
    for (const auto& d : dists)
      s.values.push_back(snr_values(rows, 5, [&](const SnrRow& r) {
        return r.data == d && r.format == cfg.format && r.scaling == cfg.scaling && r.rounding == cfg.rounding;
      }));
    series.push_back(std::move(s));
  }
  svg::Chart c;
  c.title = "SNR by element format and scaling (K = 4096)";
  c.x.label = "data";
  c.y.label = "SNR (dB), per sample";
  c.width = 1040;
  c.height = 440;
  auto med = [&](const std::string& d, const std::string& f, const std::string& sc, const std::string& rd) {
    return median_snr(rows, 5, [&](const SnrRow& r) {
      return r.data == d && r.format == f && r.scaling == sc && r.rounding == rd;
    });
  };
  const std::string reading = fmt::format(
      "On Gaussian data E4M3 gives {} dB (1×128) and E5M2 {} dB: one mantissa bit less costs about {} dB. INT8 "
      "with 1×128 tiles reaches {} dB{}; per-vector INT8 gives {} dB. Heavy tails work against INT8's uniform "
      "grid: on Student-t data per-vector INT8 gives {} dB and per-vector E4M3 {} dB. On the gradient-like product E4M3 "
      "reads {} / {} dB (per-vector / 1×128), E5M2 {} / {} dB and INT8 {} / {} dB. Stochastic rounding costs INT8 "
      "{} dB (Gaussian, 1×128) in a single product: it removes bias across many steps, not error in one.",
      db(med("gaussian", "e4m3", "1x128", "rne")), db(med("gaussian", "e5m2", "1x128", "rne")),
      db(med("gaussian", "e4m3", "1x128", "rne") - med("gaussian", "e5m2", "1x128", "rne")),
      db(med("gaussian", "int8", "1x128", "rne")),
      med("gaussian", "int8", "1x128", "rne") > med("gaussian", "e4m3", "1x128", "rne")
          ? ", more than either FP8 format, because a bounded, well-scaled distribution uses its 7 bits evenly"
          : "",
      db(med("gaussian", "int8", "tensor", "rne")), db(med("student-t3", "int8", "tensor", "rne")), db(med("student-t3", "e4m3", "tensor", "rne")),
      db(med("gradient-like", "e4m3", "tensor", "rne")), db(med("gradient-like", "e4m3", "1x128", "rne")),
      db(med("gradient-like", "e5m2", "tensor", "rne")), db(med("gradient-like", "e5m2", "1x128", "rne")),
      db(med("gradient-like", "int8", "tensor", "rne")), db(med("gradient-like", "int8", "1x128", "rne")),
      db(med("gaussian", "int8", "1x128", "rne") - med("gaussian", "int8", "1x128", "stochastic")));
  std::vector<std::string> cats = {"Gaussian", "Student-t, ν = 3", "gradient-like × Gaussian"};
  out += figure_block(++figure, svg::box_chart(c, cats, series), "Per-sample SNR for each format configuration.",
                      reading);
  return out + "</section>\n";
}

// ---- experiment 6 ---------------------------------------------------------------------------------------
std::string section_gemm(const std::vector<SnrRow>& rows, const SnrStudyConfig& config, int& figure) {
  if (snr_values(rows, 6, [](const SnrRow&) { return true; }).empty()) return {};
  std::vector<std::string> recipes;
  int64_t k = 0;
  for (const SnrRow& r : rows)
    if (r.experiment == 6) {
      k = r.length;
      if (std::find(recipes.begin(), recipes.end(), r.recipe) == recipes.end()) recipes.push_back(r.recipe);
    }
  std::string out = fmt::format(
      "<section id=\"exp6\"><h2>6. A DeepSeek-V3-shaped GEMM</h2>\n"
      "<p>D = A·Bᵀ of shape M × N × K = {} × {} × {}{}, two ways: "
      "<b>fprop</b> — A = activations N(0, 1) with 4 outlier channels ×100, B = weights N(0, 0.02²); "
      "<b>dgrad-like</b> — A = a gradient-like tensor, B = the same weights. Whole tensors are generated and "
      "quantized (per-tensor scales see the whole tensor); products are evaluated on random output sub-blocks, "
      "each one sample. Scored with DeepGEMM's calc_diff = 1 − 2Σxy / Σ(x² + y²) and the SNR, both against the "
      "FP64 product of the unquantized tensors. Sub-blocks: {} of {} × {} outputs.</p>\n",
      config.gemm_m, config.gemm_n, k,
      config.quick ? " (the --quick preset's smaller GEMM; the default is 4096 × 7168 × 2048)" : "",
      config.gemm_blocks, config.gemm_block_m, config.gemm_block_n);
  std::vector<svg::BarSeries> series;
  for (const std::string g : {"fprop", "dgrad"}) {
    svg::BarSeries s{g == "fprop" ? "fprop (activations)" : "dgrad-like (gradients)", {}, ""};
    for (const auto& rc : recipes)
      s.values.push_back(median_snr(rows, 6, [&](const SnrRow& r) { return r.data == g && r.recipe == rc; }));
    series.push_back(std::move(s));
  }
  svg::Chart c;
  c.title = "GEMM SNR per precision recipe (median over sub-blocks)";
  c.x.label = "recipe";
  c.y.label = "median SNR (dB)";
  c.width = 1040;
  c.height = 470;
  c.legend = svg::LegendPlacement::Bottom;
  auto med = [&](const std::string& g, const std::string& rc_prefix, bool acc_only = false) {
    return median_snr(
        rows, 6, [&](const SnrRow& r) { return r.data == g && r.recipe.rfind(rc_prefix, 0) == 0; }, acc_only);
  };
  auto cd = [&](const std::string& g, const std::string& rc) {
    std::vector<double> v;
    for (const SnrRow& r : rows)
      if (r.experiment == 6 && r.data == g && r.recipe == rc) v.push_back(r.calc_diff);
    return median_of(v);
  };
  auto cd_prefix = [&](const std::string& g, const std::string& prefix) {
    std::vector<double> v;
    for (const SnrRow& r : rows)
      if (r.experiment == 6 && r.data == g && r.recipe.rfind(prefix, 0) == 0) v.push_back(r.calc_diff);
    return median_of(v);
  };
  const std::string reading = fmt::format(
      "On the fprop GEMM the DeepSeek-V3 recipe (E4M3, 1×128 activation tiles, 128×128 weight blocks, N_C = 128) "
      "reaches {} dB ({} dB with UE8M0 power-of-two scales) against {} dB for per-tensor E4M3 with the same "
      "promotion, {} dB for per-tensor E4M3 without promotion (K = {} is short enough that the accumulator "
      "costs little here: its own SNR is {} dB), {} dB with the A side in E5M2, {} dB for INT8 with the same "
      "tiles and {} dB for BF16 inputs. {}On the dgrad-like GEMM the same recipes give {} ({}), {}, {}, {}, {} "
      "and {} dB. DeepGEMM's calc_diff of the DeepSeek recipe is {:.2e} (fprop) and {:.2e} (dgrad-like); "
      "per-tensor E5M2 gives {:.2e} / {:.2e}.",
      db(med("fprop", "DeepSeek-V3:")), db(med("fprop", "DeepSeek-V3, UE8M0")),
      db(med("fprop", "per-tensor E4M3, N_C")), db(med("fprop", "per-tensor E4M3, no")), k,
      db(med("fprop", "per-tensor E4M3, no", true)), db(med("fprop", "per-tensor E5M2")), db(med("fprop", "INT8")),
      db(med("fprop", "BF16")),
      std::fabs(med("fprop", "DeepSeek-V3, UE8M0") - med("fprop", "per-tensor E4M3, N_C")) < 1.0 &&
              med("fprop", "DeepSeek-V3:") > med("fprop", "per-tensor E4M3, N_C") + 1.0
          ? "The recipe's gain over per-tensor scaling comes from each tile's largest value — here the outlier "
            "channels that dominate the outputs — being represented exactly by an amax scale: UE8M0 scales "
            "give that up and land on the per-tensor figure. "
          : "",
      db(med("dgrad", "DeepSeek-V3:")), db(med("dgrad", "DeepSeek-V3, UE8M0")),
      db(med("dgrad", "per-tensor E4M3, N_C")), db(med("dgrad", "per-tensor E4M3, no")),
      db(med("dgrad", "per-tensor E5M2")), db(med("dgrad", "INT8")), db(med("dgrad", "BF16")),
      cd_prefix("fprop", "DeepSeek-V3:"), cd_prefix("dgrad", "DeepSeek-V3:"), cd_prefix("fprop", "per-tensor E5M2"),
      cd_prefix("dgrad", "per-tensor E5M2"));
  std::vector<std::string> labels;
  for (const auto& rc : recipes) labels.push_back(recipe_label(rc));
  out += figure_block(++figure, svg::bar_chart(c, labels, series),
                      "Median SNR of the output sub-blocks for each recipe and GEMM.", reading);
  std::string t = "<table class=\"grid\"><caption>Experiment 6 medians over the output sub-blocks.</caption>\n"
                  "<tr><th>recipe</th><th>GEMM</th><th>SNR (dB)</th><th>accumulation-only SNR (dB)</th>"
                  "<th>calc_diff</th></tr>\n";
  for (const auto& rc : recipes)
    for (const std::string g : {"fprop", "dgrad"})
      t += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3e}</td></tr>\n", html(rc), g,
                       db(median_snr(rows, 6, [&](const SnrRow& r) { return r.data == g && r.recipe == rc; })),
                       db(median_snr(
                           rows, 6, [&](const SnrRow& r) { return r.data == g && r.recipe == rc; }, true)),
                       cd(g, rc));
  out += t + "</table>\n";
  return out + "</section>\n";
}

// ---- key findings ---------------------------------------------------------------------------------------
std::string key_findings(const std::vector<SnrRow>& rows) {
  std::string out;
  auto m1 = [&](int64_t k, int nc, bool acc_only) {
    return median_snr(
        rows, 1,
        [&](const SnrRow& r) {
          return r.length == k && r.scaling == "1x128" && same(r.sigma, 1.0) && r.accumulation == "hopper" &&
                 r.promote_interval == nc;
        },
        acc_only);
  };
  if (!snr_values(rows, 1, [](const SnrRow&) { return true; }).empty())
    out += fmt::format(
        "<li>No promotion: the accumulator's own SNR falls from {} dB (K = 128) to {} dB (K = 16384); with "
        "N_C = 128 it stays at {} dB (K = 16384). For independent vectors both errors stay far below the E4M3 "
        "input rounding error (total SNR ≈ {} dB), so the total SNR barely moves.</li>\n",
        db(m1(128, 0, true)), db(m1(16384, 0, true)), db(m1(16384, 128, true)), db(m1(16384, 128, false)));
  auto m2 = [&](double rho, int nc) {
    return median_snr(rows, 2, [&](const SnrRow& r) {
      return same(r.rho, rho) && r.scaling == "1x128" && r.accumulation == "hopper" && r.promote_interval == nc;
    });
  };
  if (!snr_values(rows, 2, [](const SnrRow&) { return true; }).empty())
    out += fmt::format(
        "<li>Correlated vectors (K = 4096, 1×128 tiles): without promotion the median SNR is {} dB at ρ = 0 and "
        "{} dB at ρ = 0.99; promotion every 128 gives {} dB and {} dB.</li>\n",
        db(m2(0.0, 0)), db(m2(0.99, 0)), db(m2(0.0, 128)), db(m2(0.99, 128)));
  auto m4 = [&](const std::string& f, const std::string& sc, double fac) {
    return median_snr(rows, 4, [&](const SnrRow& r) {
      return r.data == "ordinary-channels" && r.format == f && r.scaling == sc && same(r.outlier_factor, fac);
    });
  };
  if (!snr_values(rows, 4, [](const SnrRow&) { return true; }).empty())
    out += fmt::format(
        "<li>Outlier channels: INT8 per-tensor scaling leaves the ordinary channels {} dB at 100× (1×128 tiles: "
        "{} dB); E4M3 per-tensor holds {} dB at 100× and falls to {} dB at 10⁵× (1×128 tiles: {} dB).</li>\n",
        db(m4("int8", "tensor", 100)), db(m4("int8", "1x128", 100)), db(m4("e4m3", "tensor", 100)),
        db(m4("e4m3", "tensor", 1e5)), db(m4("e4m3", "1x128", 1e5)));
  auto m6 = [&](const std::string& g, const std::string& prefix) {
    return median_snr(rows, 6, [&](const SnrRow& r) { return r.data == g && r.recipe.rfind(prefix, 0) == 0; });
  };
  if (!snr_values(rows, 6, [](const SnrRow&) { return true; }).empty())
    out += fmt::format(
        "<li>GEMM (fprop): DeepSeek-V3 recipe {} dB, per-tensor E4M3 {} dB, per-tensor E5M2 A-side {} dB, INT8 "
        "1×128/128×128 {} dB, BF16 {} dB.</li>\n",
        db(m6("fprop", "DeepSeek-V3:")), db(m6("fprop", "per-tensor E4M3, N_C")), db(m6("fprop", "per-tensor E5M2")),
        db(m6("fprop", "INT8")), db(m6("fprop", "BF16")));
  return out;
}

}  // namespace fp8train::lab::report
