// `fp8train compare`: the same model, data, seed and batches trained once per precision recipe, then compared.
//   fp8train compare --recipes bf16,fp8-deepseek,fp8-tensorwise,int8-blockwise [--baseline bf16] [--out DIR]
//                    [--preset P] [--config FILE] [any `train` flag, e.g. --steps 1000 --data FILE]
//       Trains each recipe into DIR/<recipe>/ (a run directory like `train` makes), then writes DIR/compare.json
//       and DIR/compare.html. DIR defaults to a fresh runs/compare-<date>-<time>/ per invocation. A recipe whose
//       run in DIR already finished with the identical resolved configuration (every config key but the run
//       directory, and the same data) is reused, not retrained; a run of any other configuration there is an
//       error naming the keys that differ. The AdamW moment dtype follows each recipe exactly as in `train`
//       (train/config.h resolved_moment_dtype: fp32 moments, bf16 for fp8-deepseek, or the spec's ":moments=")
//       unless --moment-dtype or the config file sets it.
//   fp8train compare --analyze-only --recipes A,B --run-dirs DIR_A,DIR_B --out DIR
//       Only the comparison, from run directories made elsewhere: each must hold a run of the recipe it is
//       paired with, and the runs must agree on every setting that decides the computation except the recipe
//       (and the thread count).
// compare.json, per recipe: final train loss (mean of the last 10 steps), final held-out loss, the relative loss
// error vs the baseline = mean over the last 10 % of steps of |L − L_base| / L_base (L = the step's total training
// loss, same step, same batch), the same on the main loss, the error by tenth of the run, the memory table (bytes,
// measured from the allocations by the trainer: summary.json) with ratios to the baseline, tokens/s, wall time,
// and gemm_relative_error: per GEMM kind, each Linear GEMM's relative error against its FP32 reference
// ‖Y − R‖_F / ‖R‖_F on the health-sampled steps (train/metrics.h gemm_error_over_run; recipe/health.h) —
// a per-step, trajectory-independent measure of what the recipe does to the GEMMs.
// compare.html: overlaid loss curves, relative-error curves, held-out loss, memory bars, the GEMM-error table
// (self-contained SVG).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "common/svg_plot.h"
#include "recipe/recipe.h"
#include "train/atomic_file.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/metrics.h"
#include "train/model_adapter.h"
#include "train/rng.h"
#include "train/trainer.h"

namespace fp8train::cli {
namespace {

namespace fs = std::filesystem;
using namespace fp8train::train;

struct CompareArgs {
  std::string recipes = "bf16,fp8-deepseek,fp8-tensorwise,int8-blockwise";
  std::string baseline;  // empty: the first recipe
  std::string out;  // empty: a fresh runs/compare-<date>-<time>
  std::string preset = "small";
  std::string config_file;
  std::string run_dirs;
  bool analyze_only = false;
  std::map<std::string, std::string> flag_values;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// A directory name for a recipe spec ("fp8-deepseek:promote=never" -> "fp8-deepseek_promote-never").
std::string run_name(const std::string& spec) {
  std::string s = spec;
  for (char& c : s)
    if (c == ':') c = '_';
    else if (c == '=') c = '-';
  return s;
}

// One finished run, read back from its directory.
struct RunData {
  std::string recipe, dir;
  std::vector<double> steps, loss, loss_main, tokens_per_s;
  std::vector<double> eval_steps, eval_loss;
  nlohmann::json summary;
  nlohmann::ordered_json gemm_error;  // gemm_error_over_run of metrics.jsonl (null: no sampled GEMM errors)
};

RunData read_run(const std::string& recipe, const std::string& dir) {
  RunData r;
  r.recipe = recipe;
  r.dir = dir;
  const std::vector<nlohmann::json> rows = read_jsonl((fs::path(dir) / "metrics.jsonl").string());
  FP8T_CHECK(!rows.empty(), "compare: run directory '{}' has no metrics.jsonl rows", dir);
  for (const nlohmann::json& m : rows) {
    if (!m["loss"].is_number()) continue;  // a skipped (non-finite) step
    r.steps.push_back(m["step"].get<double>());
    r.loss.push_back(m["loss"].get<double>());
    r.loss_main.push_back(m["loss_main"].get<double>());
    r.tokens_per_s.push_back(m["tokens_per_s"].get<double>());
  }
  r.gemm_error = gemm_error_over_run(rows);
  for (const nlohmann::json& e : read_jsonl((fs::path(dir) / "eval.jsonl").string())) {
    if (!e["eval_loss"].is_number()) continue;
    r.eval_steps.push_back(e["step"].get<double>());
    r.eval_loss.push_back(e["eval_loss"].get<double>());
  }
  std::ifstream in(fs::path(dir) / "summary.json");
  if (in) r.summary = nlohmann::json::parse(in, nullptr, false);
  if (!r.summary.is_object()) r.summary = nlohmann::json::object();  // an unfinished run has no summary
  return r;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? std::nan("") : s / static_cast<double>(v.size());
}

// |a − b| / b per step shared by both runs (same step = same batch).
// (step, |a − b| / b) per step both runs logged; signed: (a − b) / b.
std::vector<std::pair<double, double>> relative_errors(const std::vector<double>& steps, const std::vector<double>& a,
                                                       const RunData& base, const std::vector<double>& b,
                                                       bool signed_difference = false) {
  std::map<double, double> by_step;
  for (size_t i = 0; i < base.steps.size(); ++i) by_step[base.steps[i]] = b[i];
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto it = by_step.find(steps[i]);
    if (it == by_step.end() || it->second == 0) continue;
    const double d = (a[i] - it->second) / it->second;
    out.emplace_back(steps[i], signed_difference ? d : std::fabs(d));
  }
  return out;
}

double mean_after(const std::vector<std::pair<double, double>>& errs, double from_step) {
  std::vector<double> v;
  for (const auto& [s, e] : errs)
    if (s > from_step) v.push_back(e);
  return mean(v);
}

std::vector<double> moving_average(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size());
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

nlohmann::json finite(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

const char* const kMemoryKeys[] = {"master_weights_bytes", "compute_weights_bytes", "gradient_bytes",
                                   "optimizer_state_bytes", "activation_cache_peak_bytes"};

void write_comparison(const std::vector<RunData>& runs, size_t baseline, const std::string& out_dir) {
  const RunData& base = runs[baseline];
  const double total_steps = base.steps.empty() ? 0 : base.steps.back();
  const double last_tenth_from = std::floor(0.9 * total_steps);
  nlohmann::ordered_json doc;
  doc["baseline"] = base.recipe;
  doc["relative_error_definition"] =
      "mean over steps > 0.9*steps of |L - L_baseline| / L_baseline, L = the step's total training loss (same batch); "
      "the *_difference_* fields are the same means without the absolute value";
  nlohmann::ordered_json recipes = nlohmann::ordered_json::array();
  const nlohmann::json base_memory = base.summary.value("memory (bytes, max over steps)", nlohmann::json::object());
  for (const RunData& r : runs) {
    nlohmann::ordered_json j;
    j["recipe"] = r.recipe;
    j["run_dir"] = r.dir;
    j["steps"] = r.steps.empty() ? 0 : r.steps.back();
    std::vector<double> tail(r.loss.end() - std::min<ptrdiff_t>(10, static_cast<ptrdiff_t>(r.loss.size())), r.loss.end());
    j["final_train_loss"] = finite(mean(tail));
    j["final_eval_loss"] = r.eval_loss.empty() ? nlohmann::json(nullptr) : finite(r.eval_loss.back());
    const auto errs = relative_errors(r.steps, r.loss, base, base.loss);
    const auto errs_main = relative_errors(r.steps, r.loss_main, base, base.loss_main);
    j["relative_loss_error_vs_baseline"] = finite(mean_after(errs, last_tenth_from));
    j["relative_main_loss_error_vs_baseline"] = finite(mean_after(errs_main, last_tenth_from));
    // The same means of the signed difference (negative: below the baseline), which the error's |·| hides.
    const auto diffs = relative_errors(r.steps, r.loss, base, base.loss, true);
    j["relative_loss_difference_vs_baseline"] = finite(mean_after(diffs, last_tenth_from));
    const auto by_tenth = [&](const std::vector<std::pair<double, double>>& e) {
      nlohmann::json tenths = nlohmann::json::array();
      for (int t = 0; t < 10; ++t) {
        std::vector<double> v;
        for (const auto& [s, x] : e)
          if (s > t * total_steps / 10 && s <= (t + 1) * total_steps / 10) v.push_back(x);
        tenths.push_back(finite(mean(v)));
      }
      return tenths;
    };
    j["relative_loss_error_by_tenth"] = by_tenth(errs);
    j["relative_loss_difference_by_tenth"] = by_tenth(diffs);
    j["tokens_per_s"] = finite(mean(r.tokens_per_s));
    j["wall_seconds"] = r.summary.contains("wall time (s)")
                            ? r.summary["wall time (s)"]
                            : r.summary.value("wall time this session (s)", nlohmann::json(nullptr));
    const nlohmann::json memory = r.summary.value("memory (bytes, max over steps)", nlohmann::json::object());
    j["memory_bytes"] = memory;
    nlohmann::ordered_json ratios;
    for (const char* k : kMemoryKeys)
      if (memory.contains(k) && base_memory.contains(k) && base_memory[k].get<double>() > 0)
        ratios[k] = memory[k].get<double>() / base_memory[k].get<double>();
    j["memory_ratio_vs_baseline"] = ratios;
    j["gemm_relative_error"] = r.gemm_error;
    recipes.push_back(j);
  }
  doc["gemm_relative_error_definition"] =
      "per GEMM kind: rel = ||Y_recipe - Y_fp32ref||_F / ||Y_fp32ref||_F of each Linear's GEMM on a health-sampled "
      "step, reference = FP32 SGEMM on the operands before quantization; 'mean' = mean over Linears, 'pooled' = "
      "sqrt(sum err^2 / sum ref^2) over Linears, 'row_mean' = mean over Linears of the mean over output rows of "
      "||Y_r - R_r|| / ||R_r||, each averaged over the sampled steps; 'max' = largest Linear";
  doc["recipes"] = recipes;
  write_file_atomic((fs::path(out_dir) / "compare.json").string(), doc.dump(2) + "\n");

  // ---- compare.html ----
  // Moving averages over a tenth of the run, at most 20 (loss) and 50 (error) steps: a short run is not
  // flattened into one averaged value.
  const size_t loss_window = std::clamp<size_t>(static_cast<size_t>(total_steps / 10), 1, 20);
  const size_t error_window = std::clamp<size_t>(static_cast<size_t>(total_steps / 10), 1, 50);
  const auto averaged = [](size_t window) {
    return window > 1 ? fmt::format("moving average of {} steps", window) : std::string("per step");
  };
  std::vector<svg::LineSeries> loss_series, err_series, eval_series;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const std::string color = svg::palette_color(i);  // one colour per recipe in every chart
    loss_series.push_back({r.recipe, r.steps, moving_average(r.loss, loss_window), color, false, false});
    if (!r.eval_steps.empty()) eval_series.push_back({r.recipe, r.eval_steps, r.eval_loss, color, false, true});
    if (&r == &base) continue;
    const auto errs = relative_errors(r.steps, r.loss, base, base.loss);
    std::vector<double> xs, ys;
    for (const auto& [s, e] : errs) {
      xs.push_back(s);
      ys.push_back(100.0 * e);
    }
    err_series.push_back({r.recipe, xs, moving_average(ys, error_window), color, false, false});
  }
  svg::Chart lc;
  lc.title = fmt::format("Training loss ({})", averaged(loss_window));
  lc.x = {"step"};
  lc.y = {"total loss (nats/token)"};
  svg::Chart ec;
  ec.title = fmt::format("Relative loss error vs {} ({})", base.recipe, averaged(error_window));
  ec.x = {"step"};
  ec.y = {"|L - L_base| / L_base (%)"};
  svg::Chart vc;
  vc.title = "Held-out loss";
  vc.x = {"step"};
  vc.y = {"loss (nats/token)"};
  std::vector<std::string> categories = {"master weights", "compute weights", "gradients", "optimizer state",
                                         "peak cached activations"};
  std::vector<svg::BarSeries> bars;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const nlohmann::json memory = r.summary.value("memory (bytes, max over steps)", nlohmann::json::object());
    svg::BarSeries b{r.recipe, {}, svg::palette_color(i)};
    for (const char* k : kMemoryKeys)
      b.values.push_back(memory.contains(k) ? memory[k].get<double>() / (1024.0 * 1024.0) : std::nan(""));
    bars.push_back(b);
  }
  svg::Chart mc;
  mc.title = "Memory per recipe (allocations, max over steps)";
  mc.y = {"MiB"};
  mc.x = {"category"};

  std::string html = "<!doctype html><html><head><meta charset=\"utf-8\"><title>fp8train compare</title>"
                     "<style>body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse}"
                     "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}th{background:#eee}"
                     "td:first-child{text-align:left}pre{background:#f6f6f6;padding:8px}</style></head><body>";
  html += "<h1>fp8train compare</h1><p>Same model, data, seed and batches under each precision recipe. Relative "
          "loss error = mean over the last 10&nbsp;% of steps of |L &minus; L<sub>" +
          svg::escape(base.recipe) + "</sub>| / L<sub>" + svg::escape(base.recipe) + "</sub>.</p>";
  html += "<table><tr><th>recipe</th><th>steps</th><th>final train loss</th><th>final held-out loss</th>"
          "<th>rel. loss error (last 10%)</th><th>tokens/s</th><th>peak cached activations</th>"
          "<th>optimizer state</th></tr>";
  for (const auto& j : doc["recipes"]) {
    auto num = [](const nlohmann::json& v, const char* f) { return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("–"); };
    const auto& ratio = j["memory_ratio_vs_baseline"];
    auto mem = [&](const char* k) {
      if (!j["memory_bytes"].contains(k)) return std::string("–");
      std::string s = fmt::format("{:.2f} MiB", j["memory_bytes"][k].get<double>() / 1048576.0);
      if (ratio.contains(k)) s += fmt::format(" ({:.1f}%)", 100.0 * ratio[k].get<double>());
      return s;
    };
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        svg::escape(j["recipe"].get<std::string>()), num(j["steps"], "{:.0f}"),
                        num(j["final_train_loss"], "{:.4f}"), num(j["final_eval_loss"], "{:.4f}"),
                        j["relative_loss_error_vs_baseline"].is_number()
                            ? fmt::format("{:.3f}%", 100.0 * j["relative_loss_error_vs_baseline"].get<double>())
                            : std::string("–"),
                        num(j["tokens_per_s"], "{:.0f}"), mem("activation_cache_peak_bytes"), mem("optimizer_state_bytes"));
  }
  html += "</table>";
  bool any_gemm_error = false;
  for (const auto& j : doc["recipes"]) any_gemm_error |= j["gemm_relative_error"].is_object();
  if (any_gemm_error) {
    html += "<h2>GEMM error against the FP32 reference</h2><p>Each Linear GEMM on the health-sampled steps "
            "(<code>--health-every</code>) against the same GEMM in FP32 on the operands before quantization: "
            "&#8214;Y &minus; R&#8214;<sub>F</sub> / &#8214;R&#8214;<sub>F</sub>, mean over the Linears (in brackets: "
            "pooled over the Linears), and the row-wise error (mean over output rows of "
            "&#8214;Y<sub>r</sub> &minus; R<sub>r</sub>&#8214; / &#8214;R<sub>r</sub>&#8214;, mean over the Linears), "
            "averaged over the sampled steps. Unlike the loss error it does not depend on how far two training "
            "trajectories drift apart.</p><table><tr><th>recipe</th><th>samples</th><th>Fprop</th><th>Dgrad</th>"
            "<th>Wgrad</th><th>Fprop, rows</th><th>Dgrad, rows</th><th>Wgrad, rows</th></tr>";
    for (const auto& j : doc["recipes"]) {
      const auto& e = j["gemm_relative_error"];
      auto cell = [&](const char* kind) {
        if (!e.is_object() || !e.contains(kind)) return std::string("–");
        return fmt::format("{:.3e} ({:.3e})", e[kind]["mean"].get<double>(), e[kind]["pooled"].get<double>());
      };
      auto row_cell = [&](const char* kind) {
        if (!e.is_object() || !e.contains(kind) || !e[kind].contains("row_mean")) return std::string("–");
        return fmt::format("{:.3e}", e[kind]["row_mean"].get<double>());
      };
      int64_t samples = 0;
      if (e.is_object())
        for (const auto& [kind, v] : e.items()) samples = std::max(samples, v["samples"].get<int64_t>());
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                          svg::escape(j["recipe"].get<std::string>()), samples, cell("fprop"), cell("dgrad"),
                          cell("wgrad"), row_cell("fprop"), row_cell("dgrad"), row_cell("wgrad"));
    }
    html += "</table>";
  }
  html += svg::line_chart(lc, loss_series);
  if (!err_series.empty()) html += svg::line_chart(ec, err_series);
  if (!eval_series.empty()) html += svg::line_chart(vc, eval_series);
  html += svg::bar_chart(mc, categories, bars);
  html += "<h2>Recipes</h2>";
  for (const RunData& r : runs) {
    std::string desc;
    try {
      desc = recipe::describe_recipe(recipe::parse_recipe(r.recipe));
    } catch (const Error&) {
      desc = r.recipe + " (not a recipe spec)\n";
    }
    html += "<pre>" + svg::escape(desc) + "</pre>";
  }
  html += "</body></html>\n";
  write_file_atomic((fs::path(out_dir) / "compare.html").string(), html);
}

// The resolved config.json of a run folder (the one the trainer wrote), or an error naming the folder.
nlohmann::json run_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  FP8T_CHECK(fs::exists(path), "compare: '{}' is not a run folder (it has no config.json)", dir);
  const nlohmann::json config = nlohmann::json::parse(read_file(path.string()), nullptr, false);
  FP8T_CHECK(config.is_object(), "compare: '{}' is not valid JSON", path.string());
  return config;
}

// "optim.lr (0.001 here, 0.01 in the run)" for each key.
std::string describe_differences(const std::vector<std::string>& keys, const nlohmann::json& mine,
                                 const nlohmann::json& theirs) {
  std::vector<std::string> parts;
  for (const std::string& k : keys)
    parts.push_back(fmt::format("{} ({} vs {})", k, config_value_text(mine, k), config_value_text(theirs, k)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Whether the run in c.out can stand for this recipe's run: finished, with the identical resolved configuration
// (every key but the run directory) on the same data. A folder holding any other run is an error: compare never
// overwrites a run, and never passes off a run of other settings as this one.
bool reusable(const TrainConfig& c, const std::string& spec, const std::string& fingerprint) {
  const fs::path dir(c.out);
  if (!fs::exists(dir / "metrics.jsonl") && !fs::exists(dir / "config.json")) return false;
  const nlohmann::json theirs = run_config(c.out);
  const nlohmann::json mine = config_to_json(c);
  const std::vector<std::string> diffs = config_differences(mine, theirs, {"train.out"});
  FP8T_CHECK(diffs.empty(),
             "compare: '{}' holds a run of {} with other settings: {}; remove it or choose another --out", c.out, spec,
             describe_differences(diffs, mine, theirs));
  nlohmann::json summary;
  if (fs::exists(dir / "summary.json")) summary = nlohmann::json::parse(read_file((dir / "summary.json").string()), nullptr, false);
  FP8T_CHECK(summary.is_object() && summary.value("steps", int64_t{-1}) == c.steps,
             "compare: '{}' holds an unfinished run of {}; finish it with fp8train train --resume {}, or remove it",
             c.out, spec, c.out);
  const std::string recorded = summary.value("data fingerprint (FNV-1a 64 of the tokens)", std::string());
  FP8T_CHECK(recorded == fingerprint,
             "compare: '{}' holds a run of {} on other data (token fingerprint {}, this data's is {}); remove it or "
             "choose another --out",
             c.out, spec, recorded.empty() ? "unknown" : recorded, fingerprint);
  return true;
}

// --analyze-only: every folder holds a run of the recipe it is paired with, and the runs agree on everything
// that decides the computation except the recipe (its moment dtype included) and the thread count.
void check_comparable(const std::vector<std::string>& specs, const std::vector<std::string>& dirs) {
  std::vector<nlohmann::json> configs;
  for (size_t i = 0; i < specs.size(); ++i) {
    configs.push_back(run_config(dirs[i]));
    const std::string recipe = config_value_text(configs.back(), "train.recipe");
    FP8T_CHECK(recipe == specs[i],
               "compare: '{}' was trained with recipe '{}', not '{}' (--recipes and --run-dirs pair up in order)",
               dirs[i], recipe, specs[i]);
  }
  for (size_t i = 1; i < specs.size(); ++i) {
    std::vector<std::string> diffs;
    for (const std::string& k :
         config_differences(configs[0], configs[i], {"train.recipe", "optim.moment_dtype", "train.threads"}))
      if (config_key_changes_training(k)) diffs.push_back(k);
    FP8T_CHECK(diffs.empty(),
               "compare: the runs in '{}' and '{}' differ in {}; a comparison needs the same model, data, seed and "
               "schedule",
               dirs[0], dirs[i], describe_differences(diffs, configs[0], configs[i]));
  }
}

void run_compare(const CompareArgs& given) {
  CompareArgs args = given;
  const std::vector<std::string> specs = split_list(args.recipes);
  FP8T_CHECK(!specs.empty(), "compare: --recipes lists no recipe");
  for (const std::string& s : specs) (void)recipe::parse_recipe(s);  // a bad spec fails before any training
  const std::string baseline = args.baseline.empty() ? specs.front() : args.baseline;
  const auto bit = std::find(specs.begin(), specs.end(), baseline);
  FP8T_CHECK(bit != specs.end(), "compare: the baseline '{}' is not among --recipes", baseline);

  std::vector<std::string> dirs;
  if (args.analyze_only) {
    if (args.out.empty()) args.out = fresh_run_dir("compare");
    dirs = split_list(args.run_dirs);
    FP8T_CHECK(dirs.size() == specs.size(), "compare: --run-dirs lists {} directories for {} recipes", dirs.size(),
               specs.size());
    check_comparable(specs, dirs);
    fs::create_directories(args.out);
  } else {
    FP8T_CHECK(args.run_dirs.empty(), "compare: --run-dirs needs --analyze-only");
    if (args.out.empty()) args.out = fresh_run_dir("compare");
    nlohmann::json file_json;
    if (!args.config_file.empty()) file_json = read_config_file(args.config_file);
    std::string preset = args.preset;
    if (file_json.is_object() && file_json.contains("preset") && file_json["preset"].is_string())
      preset = file_json["preset"].get<std::string>();
    TrainConfig common = preset_config(preset);
    ConfigSources sources;
    if (!args.config_file.empty())
      apply_config_json(common, file_json, fmt::format("config file '{}'", args.config_file), &sources);
    for (const auto& [flag, text] : args.flag_values) apply_config_flag(common, flag, text, &sources);
    validate_config(common);
    common.device = start_device(common.device);  // every recipe trains on the same device
    // Every recipe's config, resolved and validated before anything is trained or created.
    std::vector<TrainConfig> configs;
    for (const std::string& spec : specs) {
      TrainConfig c = common;
      c.recipe = spec;
      c.out = (fs::path(args.out) / run_name(spec)).string();
      validate_config(c);
      resolve_moment_dtype(c, nullptr);  // the rule `train` applies
      configs.push_back(c);
    }
    const TokenData data = common.data_path.empty()
                               ? embedded_corpus_data(static_cast<uint64_t>(common.seed),
                                                      static_cast<size_t>(common.corpus_bytes))
                               : load_token_data(common.data_path);
    const std::string fingerprint = data_fingerprint(data);
    std::vector<bool> reuse;
    for (size_t i = 0; i < specs.size(); ++i) reuse.push_back(reusable(configs[i], specs[i], fingerprint));
    if (common.threads > 0) omp_set_num_threads(static_cast<int>(common.threads));
    fs::create_directories(args.out);
    for (size_t i = 0; i < specs.size(); ++i) {
      const TrainConfig& c = configs[i];
      dirs.push_back(c.out);
      if (reuse[i]) {
        std::printf("compare: %s already finished in %s with the same settings; reusing it\n", specs[i].c_str(),
                    c.out.c_str());
        continue;
      }
      std::printf("compare: training %s (%lld steps, moments %s) into %s\n", specs[i].c_str(),
                  static_cast<long long>(c.steps), c.moment_dtype.c_str(), c.out.c_str());
      std::fflush(stdout);
      DeepSeekTrainable model(c.model, derive_seed(static_cast<uint64_t>(c.seed), 0), c.recipe);
      TrainOptions options;
      options.run_dir = c.out;
      options.out = stdout;
      options.terminal = ::isatty(::fileno(stdout)) != 0;
      options.device = device_description();
      run_training(c, model, data, options);
    }
  }
  std::vector<RunData> runs;
  for (size_t i = 0; i < specs.size(); ++i) runs.push_back(read_run(specs[i], dirs[i]));
  const size_t base_index = static_cast<size_t>(std::find(specs.begin(), specs.end(), baseline) - specs.begin());
  write_comparison(runs, base_index, args.out);
  const nlohmann::json doc = [&] {
    std::ifstream in(fs::path(args.out) / "compare.json");
    return nlohmann::json::parse(in);
  }();
  for (const auto& j : doc["recipes"]) {
    const auto& e = j["relative_loss_error_vs_baseline"];
    std::printf("%-34s final train loss %s  held-out %s  rel. error vs %s (last 10%%) %s\n",
                j["recipe"].get<std::string>().c_str(), j["final_train_loss"].dump().c_str(),
                j["final_eval_loss"].dump().c_str(), baseline.c_str(),
                e.is_number() ? fmt::format("{:.3f}%", 100.0 * e.get<double>()).c_str() : "n/a");
    const auto& g = j["gemm_relative_error"];
    if (!g.is_object()) continue;
    std::string line;
    for (const char* kind : {"fprop", "dgrad", "wgrad"})
      if (g.contains(kind))
        line += fmt::format("  {} {:.3e} (rows {:.3e})", kind, g[kind]["mean"].get<double>(),
                            g[kind].contains("row_mean") ? g[kind]["row_mean"].get<double>() : std::nan(""));
    std::printf("%-34s GEMM rel. error vs FP32 (mean over Linears, sampled steps):%s\n", "", line.c_str());
  }
  std::printf("compare: %s/compare.json, %s/compare.html\n", args.out.c_str(), args.out.c_str());
}

void add_compare(CLI::App& root) {
  static CompareArgs args;
  static std::map<std::string, std::string> flag_storage;
  auto* cmd = root.add_subcommand("compare", "Train one model under several precision recipes and compare them");
  cmd->option_defaults()->always_capture_default();
  cmd->add_option("--recipes", args.recipes, "comma-separated recipe specs (name[:key=value...], src/recipe/recipe.h)");
  cmd->add_option("--baseline", args.baseline, "the recipe the others are compared with (default: the first)");
  cmd->add_option("--out", args.out,
                  "directory for the runs, compare.json and compare.html (default: a new runs/compare-<date>-<time>)");
  cmd->add_option("--preset", args.preset, "tiny | small | base");
  cmd->add_option("--config", args.config_file, "JSON config file (layout: src/train/config.h)");
  cmd->add_flag("--analyze-only", args.analyze_only, "only compare finished runs given by --run-dirs");
  cmd->add_option("--run-dirs", args.run_dirs, "comma-separated run directories, one per recipe (--analyze-only)");
  std::vector<std::pair<std::string, CLI::Option*>> options;
  for (const ConfigFlag& f : config_flags()) {
    if (f.flag == "recipe" || f.flag == "out") continue;  // set per recipe by compare
    CLI::Option* o = cmd->add_option("--" + f.flag, flag_storage[f.flag], f.help)
                         ->group("Training options")
                         ->type_name(f.type_name);
    options.emplace_back(f.flag, o);
  }
  cmd->callback([options] {
    for (const auto& [flag, option] : options)
      if (option->count() > 0) args.flag_values[flag] = flag_storage[flag];
    run_compare(args);
  });
}

const bool registered = register_command("compare", 20, &add_compare);

}  // namespace
}  // namespace fp8train::cli
