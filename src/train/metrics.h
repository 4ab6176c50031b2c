// Run logs, one JSON object per line, appended and flushed as the run goes (a crash loses at most a line):
//   metrics.jsonl      one object per optimizer step with exactly these keys:
//                      {"step", "loss", "loss_main", "loss_mtp", "loss_balance", "lr", "mtp_lambda",
//                       "bias_update_speed", "tokens_per_s", "grad_norm", "max_expert_load_ratio"}
//                      step is 1-based (the number of steps done); a non-finite value is written as null
//                      (JSON has no NaN), which is how a skipped step shows; lr, mtp_lambda (MTP loss weight λ)
//                      and bias_update_speed (router-bias update speed γ) are the scheduled values the step used
//   eval.jsonl         {"step", "eval_loss", "eval_bpb"} at each evaluation (bits per byte = per token for the
//                      byte tokenizer; for token files the key is "eval_bits_per_token")
//   expert_load.jsonl  {"step", "layers": [MoE layer names], "load": [[fraction of routed assignments per
//                      expert] per MoE layer]}, every log_every steps
//   events.jsonl       {"step", "event", "detail"}: skipped non-finite steps, resumes, checkpoints
// max_expert_load_ratio = max over MoE layers and experts of load_i / mean_j load_j (1 = perfectly balanced).
// A data-parallel run (several DP ranks) adds to every row "dp_bytes_sent" and "dp_bytes_received": rank 0's
// traffic in the step by its communicator's counters (dist/communicator.h).
// Every train.health_every steps a metrics.jsonl row also has:
//   "memory"      the memory table of that step (bytes per category)
//   "health"      [{"linear", "gemm": fprop|dgrad|wgrad, "calls", "rel_error", "err_sq", "ref_sq",
//                   "row_rel_error", "rows", "a": {...}, "b": {...}}] per (Linear, GEMM): the GEMM's relative error
//                  against its FP32 reference ‖Y − R‖_F / ‖R‖_F with its two sums, and the mean over its output
//                  rows of ‖Y_r − R_r‖ / ‖R_r‖ (recipe/health.h "GEMM accuracy"), and for
//                  quantized recipes the operand counters "a"/"b": elements, nonzero, saturated, underflow,
//                  scale_min, scale_max
//   "gemm_error"  gemm_error_summary() of "health": per GEMM kind over the Linears
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fp8train::train {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0, loss_main = 0, loss_mtp = 0, loss_balance = 0;
  double lr = 0, mtp_lambda = 0, bias_update_speed = 0;
  double tokens_per_s = 0, grad_norm = 0, max_expert_load_ratio = 0;
};

// The metrics.jsonl object for one step (keys in the documented order).
nlohmann::ordered_json step_metrics_json(const StepMetrics& m);

// max_i load_i / mean load over every layer (0 when there are no loads).
double max_expert_load_ratio(const std::vector<std::vector<double>>& expert_tokens);

// Appends JSON lines to a file, flushing each one.
class JsonlWriter {
 public:
  JsonlWriter() = default;  // writes nothing (what a data-parallel rank other than the lead keeps)
  explicit JsonlWriter(const std::string& path);  // appends; creates the file if needed
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const nlohmann::ordered_json& object);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Reads every line of a JSON-lines file (a missing file gives no lines; a torn last line is dropped).
std::vector<nlohmann::json> read_jsonl(const std::string& path);

// Keeps only the lines whose "step" is <= `step` (used when resuming), rewriting the file atomically.
void truncate_jsonl_after_step(const std::string& path, int64_t step);

// JSON number or null for a non-finite double.
nlohmann::ordered_json finite_or_null(double x);

// Per GEMM kind ("fprop", "dgrad", "wgrad"; kinds without records are left out) of one step's "health" array:
//   {"linears": n, "pooled": sqrt(Σ err_sq / Σ ref_sq) over the Linears (the Frobenius error of all that kind's
//    outputs taken together), "mean": the mean of the Linears' rel_error, "max": the largest, "max_linear": its
//    name, "row_mean": the mean of the Linears' row_rel_error}. Null when `health` holds no records.
nlohmann::ordered_json gemm_error_summary(const nlohmann::json& health);

// Per tensor role of one step's "health" array, summing the quantized operands' counters ("a"/"b") over the
// Linears: activations = Fprop a (x) + Wgrad b (xᵀ), weights = Fprop b (W) + Dgrad b (Wᵀ), gradients = Dgrad a
// (dy) + Wgrad a (dyᵀ):
//   {"activations"|"weights"|"gradients": {"elements", "nonzero", "saturated", "underflow",
//    "saturated_fraction": saturated / elements (values clamped to the format's largest magnitude),
//    "underflow_fraction": underflow / nonzero (nonzero values that quantized to zero)}}
// Null when no record has operand counters (unquantized recipes).
nlohmann::ordered_json quantization_health_summary(const nlohmann::json& health);

// The same over a run: per kind, the mean over the sampled steps of each step's "pooled", "mean" and "row_mean",
// the largest "max", and "samples" (steps with a record of that kind). Rows without "health" are skipped (a run sampled
// before this metric existed has no "rel_error" and gives null).
nlohmann::ordered_json gemm_error_over_run(const std::vector<nlohmann::json>& metrics_rows);

}  // namespace fp8train::train
