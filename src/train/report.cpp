// HTML report of a run (see report.h), drawn with the shared inline-SVG helper common/svg_plot.h.
#include "train/report.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/svg_plot.h"
#include "train/atomic_file.h"
#include "train/metrics.h"

namespace fp8train::train {
namespace {

namespace fs = std::filesystem;

double number_or_nan(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nan("");
  return j[key].get<double>();
}

// Column of a JSON-lines log as x (step) / y vectors; nulls become NaN (left out of the plot).
struct Column {
  std::vector<double> x, y;
};
Column column(const std::vector<nlohmann::json>& rows, const char* key) {
  Column c;
  for (const auto& r : rows) {
    c.x.push_back(number_or_nan(r, "step"));
    c.y.push_back(number_or_nan(r, key));
  }
  return c;
}

// Exponential moving average that skips NaNs (the noisy per-step train loss is easier to read smoothed).
std::vector<double> smooth(const std::vector<double>& y, double alpha) {
  std::vector<double> out(y.size(), std::nan(""));
  double ema = std::nan("");
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;
    ema = std::isfinite(ema) ? alpha * y[i] + (1 - alpha) * ema : y[i];
    out[i] = ema;
  }
  return out;
}

std::string figure(const std::string& svg, const std::string& caption) {
  return fmt::format("<figure>{}<figcaption>{}</figcaption></figure>\n", svg, svg::escape(caption));
}

svg::Chart chart(const std::string& title, const std::string& y_label, svg::Scale y_scale = svg::Scale::Linear) {
  svg::Chart c;
  c.title = title;
  c.x.label = "optimizer step";
  c.y.label = y_label;
  c.y.scale = y_scale;
  c.width = 640;
  c.height = 360;
  c.legend = svg::LegendPlacement::Bottom;
  return c;
}

// Table text of a JSON value: numbers compact, empty strings "(none)".
std::string format_value(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>().empty() ? "(none)" : v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

}  // namespace

std::string write_report(const std::string& run_dir) {
  const fs::path dir(run_dir);
  const auto metrics = read_jsonl((dir / "metrics.jsonl").string());
  const auto evals = read_jsonl((dir / "eval.jsonl").string());
  const auto loads = read_jsonl((dir / "expert_load.jsonl").string());
  const auto events = read_jsonl((dir / "events.jsonl").string());
  nlohmann::json config;
  nlohmann::ordered_json summary;
  if (fs::exists(dir / "config.json")) config = nlohmann::json::parse(read_file((dir / "config.json").string()), nullptr, false);
  if (fs::exists(dir / "summary.json")) summary = nlohmann::ordered_json::parse(read_file((dir / "summary.json").string()), nullptr, false);

  std::string body;
  // ---- summary ----------------------------------------------------------------------------------------
  body += "<h1>fp8train run report</h1>\n<p class=\"dir\">" + svg::escape(fs::absolute(dir).string()) + "</p>\n";
  body += "<table class=\"summary\">\n";
  const auto row = [&](const std::string& k, const std::string& v) {
    body += "<tr><th>" + svg::escape(k) + "</th><td>" + svg::escape(v) + "</td></tr>\n";
  };
  // What ran, and on what: the recipe and preset from config.json (there from the first step on), the device
  // from summary.json (written at the end).
  if (config.is_object() && config.contains("train") && config["train"].is_object())
    row("recipe", format_value(config["train"].value("recipe", nlohmann::json("?"))));
  if (config.is_object() && config.contains("preset")) row("preset", format_value(config["preset"]));
  if (summary.is_object() && summary.contains("device")) row("device", format_value(nlohmann::json(summary["device"])));
  if (summary.is_object())
    for (auto it = summary.begin(); it != summary.end(); ++it) {
      if (it.key() == "recipe" || it.key() == "device") continue;
      if (!it.value().is_object()) {
        row(it.key(), format_value(nlohmann::json(it.value())));
        continue;
      }
      // Nested groups (e.g. memory in bytes): one row per entry, byte counts also in MiB.
      for (auto sub = it.value().begin(); sub != it.value().end(); ++sub) {
        std::string text = format_value(nlohmann::json(sub.value()));
        if (sub.key().ends_with("_bytes") && sub.value().is_number())
          text += fmt::format(" ({:.2f} MiB)", sub.value().template get<double>() / (1024.0 * 1024.0));
        row(it.key() + ": " + sub.key(), text);
      }
    }
  row("steps logged", std::to_string(metrics.size()));
  // GEMM accuracy against the FP32 reference on the health-sampled steps (recipe/linear_gemm.h).
  const nlohmann::ordered_json gemm_error = gemm_error_over_run(metrics);
  if (gemm_error.is_object())
    for (auto it = gemm_error.begin(); it != gemm_error.end(); ++it)
      row("GEMM rel. error vs FP32: " + it.key(),
          fmt::format("{:.3e} mean over Linears, {:.3e} pooled, {:.3e} worst Linear, {} row-wise ({} sampled steps)",
                      it.value()["mean"].get<double>(), it.value()["pooled"].get<double>(),
                      it.value()["max"].get<double>(),
                      it.value().contains("row_mean") ? fmt::format("{:.3e}", it.value()["row_mean"].get<double>())
                                                      : std::string("–"),
                      it.value()["samples"].get<int64_t>()));
  int skipped = 0;
  for (const auto& e : events)
    if (e.value("event", "") == "skipped_nonfinite") ++skipped;
  row("non-finite steps skipped", std::to_string(skipped));
  body += "</table>\n";

  body += "<div class=\"figs\">\n";
  // ---- losses -----------------------------------------------------------------------------------------
  const Column loss = column(metrics, "loss"), main = column(metrics, "loss_main"), mtp = column(metrics, "loss_mtp"),
               balance = column(metrics, "loss_balance");
  const bool bytes = !evals.empty() && evals.front().contains("eval_bpb");
  const Column eval_loss = column(evals, "eval_loss"), eval_bits = column(evals, bytes ? "eval_bpb" : "eval_bits_per_token");
  const double alpha = metrics.size() > 200 ? 0.05 : 0.2;
  {
    std::vector<svg::LineSeries> s;
    s.push_back({"train loss (per step)", loss.x, loss.y, "#b8b8b8", false, false});
    s.push_back({"train loss (EMA)", loss.x, smooth(loss.y, alpha), svg::palette_color(0), false, false});
    s.push_back({"train main CE (EMA)", main.x, smooth(main.y, alpha), svg::palette_color(2), true, false});
    s.push_back({"held-out loss", eval_loss.x, eval_loss.y, svg::palette_color(1), false, true});
    body += figure(svg::line_chart(chart("Loss", "loss (nats per token)"), s),
                   "Training loss (total = main + MTP + balance) per step and smoothed, and the held-out "
                   "next-token loss at each evaluation.");
  }
  {
    std::vector<svg::LineSeries> s;
    s.push_back({"main CE", main.x, smooth(main.y, alpha), svg::palette_color(0), false, false});
    s.push_back({"MTP (weighted)", mtp.x, smooth(mtp.y, alpha), svg::palette_color(1), false, false});
    s.push_back({"balance (weighted)", balance.x, smooth(balance.y, alpha), svg::palette_color(2), false, false});
    body += figure(svg::line_chart(chart("Loss components (EMA)", "nats per token", svg::Scale::Log10), s),
                   "The three terms of the training loss, smoothed: next-token cross-entropy, the MTP loss "
                   "(lambda-weighted) and the sequence-wise balance loss (alpha-weighted), log scale.");
  }
  if (!evals.empty()) {  // (the unit comes from the evaluations' own key: a run without one has no panel)
    std::vector<svg::LineSeries> s;
    s.push_back({bytes ? "held-out bits per byte" : "held-out bits per token", eval_bits.x, eval_bits.y,
                 svg::palette_color(1), false, true});
    body += figure(svg::line_chart(chart(bytes ? "Held-out bits per byte" : "Held-out bits per token",
                                         bytes ? "bits per byte" : "bits per token"),
                                   s),
                   "Held-out loss in bits (loss / ln 2) at each evaluation.");
  }
  // ---- optimisation -----------------------------------------------------------------------------------
  {
    const Column lr = column(metrics, "lr");
    body += figure(svg::line_chart(chart("Learning rate", "learning rate"),
                                   {{"lr", lr.x, lr.y, svg::palette_color(4), false, false}}),
                   "Learning-rate schedule: warmup, constant, cosine decay, final constant.");
  }
  {
    const Column g = column(metrics, "grad_norm");
    std::vector<svg::LineSeries> s{{"global grad norm (before clipping)", g.x, g.y, svg::palette_color(5), false, false}};
    const double clip = config.is_object() ? config.value("/optim/grad_clip"_json_pointer, 0.0) : 0.0;
    if (clip > 0 && !g.x.empty())
      s.push_back({"clipping threshold", {g.x.front(), g.x.back()}, {clip, clip}, "#555555", true, false});
    body += figure(svg::line_chart(chart("Gradient norm", "global L2 norm", svg::Scale::Log10), s),
                   "Global gradient norm of each step before clipping; steps above the threshold were scaled down to it.");
  }
  {
    const Column t = column(metrics, "tokens_per_s");
    body += figure(svg::line_chart(chart("Throughput", "tokens per second"),
                                   {{"tokens/s", t.x, t.y, svg::palette_color(6), false, false}}),
                   "Training tokens processed per second of wall time, per step.");
  }
  // ---- GEMM accuracy ----------------------------------------------------------------------------------
  if (gemm_error.is_object()) {
    std::vector<svg::LineSeries> s;
    int color = 0;
    for (const char* kind : {"fprop", "dgrad", "wgrad"}) {
      svg::LineSeries line{kind, {}, {}, svg::palette_color(color++), false, true};
      for (const auto& r : metrics) {
        if (!r.contains("gemm_error") || !r["gemm_error"].contains(kind)) continue;
        line.x.push_back(number_or_nan(r, "step"));
        line.y.push_back(number_or_nan(r["gemm_error"][kind], "mean"));
      }
      if (!line.x.empty()) s.push_back(std::move(line));
    }
    bool positive = false;  // the fp32 recipe's errors are all 0: nothing to draw
    for (const auto& line : s)
      for (double y : line.y) positive |= y > 0;
    if (positive)
      body += figure(svg::line_chart(chart("GEMM error vs FP32 reference", "relative error"), s),
                   "Each Linear GEMM of a health-sampled step against the same GEMM in FP32 on the operands "
                   "before quantization, ||Y - R||_F / ||R||_F, mean over the Linears, per GEMM kind.");
  }
  // ---- quantization health: saturation and underflow of the quantized GEMM operands --------------------------
  {
    const std::string recipe = config.is_object() ? config.value("/train/recipe"_json_pointer, std::string()) : "";
    const std::string format = recipe.rfind("int8", 0) == 0 ? "INT8" : "FP8";
    std::vector<svg::LineSeries> saturation, underflow;
    int color = 0;
    for (const char* role : {"activations", "weights", "gradients"}) {
      svg::LineSeries sat{role, {}, {}, svg::palette_color(color), false, true};
      svg::LineSeries und{role, {}, {}, svg::palette_color(color++), false, true};
      for (const auto& r : metrics) {
        if (!r.contains("health")) continue;
        const nlohmann::ordered_json q = quantization_health_summary(r["health"]);
        if (!q.is_object() || !q.contains(role)) continue;
        sat.x.push_back(number_or_nan(r, "step"));
        sat.y.push_back(100.0 * q[role]["saturated_fraction"].get<double>());
        und.x.push_back(number_or_nan(r, "step"));
        und.y.push_back(100.0 * q[role]["underflow_fraction"].get<double>());
      }
      if (!sat.x.empty()) {
        saturation.push_back(std::move(sat));
        underflow.push_back(std::move(und));
      }
    }
    if (!saturation.empty()) {
      body += figure(svg::line_chart(chart(format + " saturation", "% of elements clamped"), saturation),
                     "Share of each role's quantized GEMM operand elements (over every Linear of a health-sampled "
                     "step) beyond the format's largest magnitude, clamped to it; only stale (delayed) scales can "
                     "cause it, so per-tile scaling shows 0.");
      body += figure(svg::line_chart(chart(format + " underflow", "% of nonzero elements flushed to zero"), underflow),
                     "Share of each role's nonzero quantized GEMM operand elements that became zero after "
                     "quantization (too small for their tile's scale), on the health-sampled steps.");
    }
  }
  // ---- experts ----------------------------------------------------------------------------------------
  {
    const Column r = column(metrics, "max_expert_load_ratio");
    body += figure(svg::line_chart(chart("Max expert load ratio", "max load / mean load"),
                                   {{"max over layers and experts", r.x, r.y, svg::palette_color(3), false, false},
                                    {"balanced", {r.x.empty() ? 0 : r.x.front(), r.x.empty() ? 1 : r.x.back()},
                                     {1.0, 1.0}, "#555555", true, false}}),
                   "The busiest expert's share of routed tokens relative to the mean (1 = perfectly balanced).");
  }
  if (!loads.empty() && loads.front().contains("load")) {
    const size_t layers = loads.front()["load"].size();
    for (size_t l = 0; l < layers; ++l) {
      const size_t experts = loads.front()["load"][l].size();
      std::vector<svg::LineSeries> s(experts);
      for (size_t e = 0; e < experts; ++e) {
        s[e].name = "expert " + std::to_string(e);
        s[e].markers = false;
      }
      for (const auto& rec : loads) {
        if (!rec.contains("load") || rec["load"].size() <= l || rec["load"][l].size() != experts) continue;
        for (size_t e = 0; e < experts; ++e) {
          s[e].x.push_back(number_or_nan(rec, "step"));
          // relative load: fraction × experts, so 1 = the balanced share
          s[e].y.push_back(rec["load"][l][e].get<double>() * static_cast<double>(experts));
        }
      }
      const nlohmann::json& names = loads.front().contains("layers") ? loads.front()["layers"] : nlohmann::json();
      const std::string layer = names.is_array() && names.size() > l && names[l].is_string()
                                    ? names[l].get<std::string>()
                                    : fmt::format("MoE layer {}", l);
      body += figure(svg::line_chart(chart("Per-expert load: " + layer, "load / balanced share"), s),
                     fmt::format("Share of routed token assignments each expert of {} received, relative to the "
                                 "balanced share 1/{} (the auxiliary-loss-free router-bias update pulls these toward 1).",
                                 layer, experts));
    }
  }
  body += "</div>\n";
  // ---- config -----------------------------------------------------------------------------------------
  if (config.is_object()) {
    body += "<h2>Configuration</h2>\n<table class=\"config\">\n";
    for (auto section = config.begin(); section != config.end(); ++section) {
      if (!section.value().is_object()) {
        row(section.key(), format_value(section.value()));
        continue;
      }
      for (auto it = section.value().begin(); it != section.value().end(); ++it)
        row(section.key() + "." + it.key(), format_value(it.value()));
    }
    body += "</table>\n";
  }

  const std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                           "<title>fp8train run report</title>\n<style>\n"
                           "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\n"
                           "h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:28px}\n"
                           ".dir{color:#666;margin-top:0}\n"
                           ".figs{display:flex;flex-wrap:wrap;gap:8px 24px}\n"
                           "figure{margin:8px 0 16px 0;width:640px}\n"
                           "figcaption{font-size:13px;color:#444;margin-top:4px}\n"
                           "table{border-collapse:collapse;font-size:13px}th{white-space:nowrap}th,td{padding:2px 10px;text-align:left;"
                           "border-bottom:1px solid #e4e4e4}th{font-weight:600}\n"
                           "</style></head><body>\n" +
                           body + "</body></html>\n";
  const std::string path = (dir / "report.html").string();
  write_file_atomic(path, html);
  return path;
}

}  // namespace fp8train::train
