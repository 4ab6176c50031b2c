// JSON-lines logs (see metrics.h).
#include "train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/error.h"
#include "train/atomic_file.h"

namespace fp8train::train {

nlohmann::ordered_json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
}

namespace {
const char* const kGemmKinds[] = {"fprop", "dgrad", "wgrad"};
}  // namespace

nlohmann::ordered_json gemm_error_summary(const nlohmann::json& health) {
  if (!health.is_array()) return nullptr;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* kind : kGemmKinds) {
    double err = 0, ref = 0, sum = 0, max = -1, row_sum = 0;
    int64_t n = 0, with_rows = 0;
    std::string max_linear;
    for (const nlohmann::json& g : health) {
      if (!g.is_object() || g.value("gemm", "") != kind || !g.contains("err_sq") || !g.contains("ref_sq") ||
          !g.contains("rel_error") || !g["rel_error"].is_number())
        continue;
      err += g["err_sq"].get<double>();
      ref += g["ref_sq"].get<double>();
      const double r = g["rel_error"].get<double>();
      sum += r;
      if (g.contains("row_rel_error") && g["row_rel_error"].is_number()) {
        row_sum += g["row_rel_error"].get<double>();
        ++with_rows;
      }
      if (r > max) {
        max = r;
        max_linear = g.value("linear", "");
      }
      ++n;
    }
    if (n == 0) continue;
    nlohmann::ordered_json k;
    k["linears"] = n;
    k["pooled"] = finite_or_null(ref > 0 ? std::sqrt(err / ref) : (err > 0 ? INFINITY : 0.0));
    k["mean"] = finite_or_null(sum / static_cast<double>(n));
    k["max"] = finite_or_null(max);
    k["max_linear"] = max_linear;
    if (with_rows > 0) k["row_mean"] = finite_or_null(row_sum / static_cast<double>(with_rows));
    out[kind] = k;
  }
  if (out.empty()) return nullptr;
  return out;
}

nlohmann::ordered_json quantization_health_summary(const nlohmann::json& health) {
  if (!health.is_array()) return nullptr;
  struct Counts {
    double elements = 0, nonzero = 0, saturated = 0, underflow = 0;
    bool seen = false;
  };
  const char* const roles[] = {"activations", "weights", "gradients"};
  Counts counts[3];
  const auto add = [&](int role, const nlohmann::json& op) {
    if (!op.is_object() || !op.contains("elements") || !op["elements"].is_number()) return;
    Counts& c = counts[role];
    c.elements += op["elements"].get<double>();
    c.nonzero += op.value("nonzero", 0.0);
    c.saturated += op.value("saturated", 0.0);
    c.underflow += op.value("underflow", 0.0);
    c.seen = true;
  };
  for (const nlohmann::json& g : health) {
    if (!g.is_object()) continue;
    const std::string kind = g.value("gemm", "");
    const nlohmann::json a = g.value("a", nlohmann::json()), b = g.value("b", nlohmann::json());
    if (kind == "fprop") {
      add(0, a);
      add(1, b);
    } else if (kind == "dgrad") {
      add(2, a);
      add(1, b);
    } else if (kind == "wgrad") {
      add(2, a);
      add(0, b);
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (int r = 0; r < 3; ++r) {
    const Counts& c = counts[r];
    if (!c.seen) continue;
    nlohmann::ordered_json j;
    j["elements"] = c.elements;
    j["nonzero"] = c.nonzero;
    j["saturated"] = c.saturated;
    j["underflow"] = c.underflow;
    j["saturated_fraction"] = c.elements > 0 ? c.saturated / c.elements : 0.0;
    j["underflow_fraction"] = c.nonzero > 0 ? c.underflow / c.nonzero : 0.0;
    out[roles[r]] = j;
  }
  if (out.empty()) return nullptr;
  return out;
}

nlohmann::ordered_json gemm_error_over_run(const std::vector<nlohmann::json>& metrics_rows) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* kind : kGemmKinds) {
    double pooled = 0, mean = 0, max = -1, row_mean = 0;
    int64_t samples = 0, row_samples = 0;
    for (const nlohmann::json& row : metrics_rows) {
      if (!row.is_object() || !row.contains("health")) continue;
      const nlohmann::ordered_json s = gemm_error_summary(row["health"]);
      if (!s.is_object() || !s.contains(kind) || !s[kind]["pooled"].is_number() || !s[kind]["mean"].is_number())
        continue;
      pooled += s[kind]["pooled"].get<double>();
      mean += s[kind]["mean"].get<double>();
      max = std::max(max, s[kind]["max"].is_number() ? s[kind]["max"].get<double>() : 0.0);
      if (s[kind].contains("row_mean") && s[kind]["row_mean"].is_number()) {
        row_mean += s[kind]["row_mean"].get<double>();
        ++row_samples;
      }
      ++samples;
    }
    if (samples == 0) continue;
    nlohmann::ordered_json k;
    k["samples"] = samples;
    k["pooled"] = pooled / static_cast<double>(samples);
    k["mean"] = mean / static_cast<double>(samples);
    k["max"] = max;
    if (row_samples > 0) k["row_mean"] = row_mean / static_cast<double>(row_samples);
    out[kind] = k;
  }
  if (out.empty()) return nullptr;
  return out;
}

nlohmann::ordered_json step_metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = finite_or_null(m.loss);
  j["loss_main"] = finite_or_null(m.loss_main);
  j["loss_mtp"] = finite_or_null(m.loss_mtp);
  j["loss_balance"] = finite_or_null(m.loss_balance);
  j["lr"] = finite_or_null(m.lr);
  j["mtp_lambda"] = finite_or_null(m.mtp_lambda);
  j["bias_update_speed"] = finite_or_null(m.bias_update_speed);
  j["tokens_per_s"] = finite_or_null(m.tokens_per_s);
  j["grad_norm"] = finite_or_null(m.grad_norm);
  j["max_expert_load_ratio"] = finite_or_null(m.max_expert_load_ratio);
  return j;
}

double max_expert_load_ratio(const std::vector<std::vector<double>>& expert_tokens) {
  double worst = 0.0;
  for (const auto& layer : expert_tokens) {
    if (layer.empty()) continue;
    double sum = 0.0, max = 0.0;
    for (double x : layer) {
      sum += x;
      max = std::max(max, x);
    }
    if (sum > 0.0) worst = std::max(worst, max / (sum / static_cast<double>(layer.size())));
  }
  return worst;
}

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "ab");
  FP8T_CHECK(file_ != nullptr, "cannot open '{}' for appending: {}", path, std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::write(const nlohmann::ordered_json& object) {
  if (file_ == nullptr && path_.empty()) return;  // the writer that writes nothing
  FP8T_CHECK(file_ != nullptr, "JSON-lines writer is not open");
  const std::string line = object.dump() + "\n";
  FP8T_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
             "cannot write to '{}': {}", path_, std::strerror(errno));
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  if (!std::filesystem::exists(path)) return out;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      // A line torn by a crash mid-write: ignore it (everything before it is intact).
    }
  }
  return out;
}

void truncate_jsonl_after_step(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::string kept;
  for (const nlohmann::json& j : read_jsonl(path))
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
      kept += j.dump() + "\n";
  write_file_atomic(path, kept);
}

}  // namespace fp8train::train
