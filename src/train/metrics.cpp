// JSON-lines logs (see metrics.h).
#include "train/metrics.h"

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

nlohmann::ordered_json step_metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = finite_or_null(m.loss);
  j["loss_main"] = finite_or_null(m.loss_main);
  j["loss_mtp"] = finite_or_null(m.loss_mtp);
  j["loss_balance"] = finite_or_null(m.loss_balance);
  j["lr"] = finite_or_null(m.lr);
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
