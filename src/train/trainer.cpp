// Training loop (see trainer.h).
#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <numbers>

#include "common/error.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tensor/backend.h"
#include "train/atomic_file.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/report.h"

namespace fp8train::train {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
volatile std::sig_atomic_t g_stop = 0;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Memory accounting, measured from the allocations: the allocator's bytes per category (master
// weights, gradients, and this step's peak of cached activations and workspace) and AdamW's moment arenas.
nlohmann::ordered_json memory_json(TrainableModel& model, const optim::AdamW& optimizer) {
  const MemoryStats s = backend(default_device()).allocator().stats();
  nlohmann::ordered_json j;
  j["master_weights_bytes"] = s.current_of(MemCategory::Weights);
  j["compute_weights_bytes"] = model.compute_weight_bytes();
  j["gradient_bytes"] = s.current_of(MemCategory::Gradients);
  j["optimizer_state_bytes"] = optimizer.state_bytes();
  j["activation_cache_peak_bytes"] = s.peak_of(MemCategory::ActivationCache);
  j["workspace_peak_bytes"] = s.peak_of(MemCategory::Workspace);
  return j;
}

void max_into(nlohmann::ordered_json& acc, const nlohmann::ordered_json& x) {
  for (const auto& [key, value] : x.items())
    if (!acc.contains(key) || acc[key].get<int64_t>() < value.get<int64_t>()) acc[key] = value;
}

void add_into(std::vector<std::vector<double>>& acc, const std::vector<std::vector<double>>& x) {
  if (acc.empty()) {
    acc = x;
    return;
  }
  for (size_t l = 0; l < acc.size() && l < x.size(); ++l)
    for (size_t e = 0; e < acc[l].size() && e < x[l].size(); ++e) acc[l][e] += x[l][e];
}

nlohmann::ordered_json load_fractions(const std::vector<std::vector<double>>& tokens) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& layer : tokens) {
    double sum = 0;
    for (double x : layer) sum += x;
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (double x : layer) row.push_back(sum > 0 ? std::round(x / sum * 1e6) / 1e6 : 0.0);
    layers.push_back(row);
  }
  return layers;
}

}  // namespace

void request_stop() { g_stop = 1; }
bool stop_requested() { return g_stop != 0; }

double evaluate_loss(TrainableModel& model, const std::vector<Token>& tokens, const std::vector<int64_t>& starts,
                     int64_t seq_len, int64_t batch) {
  FP8T_CHECK(!starts.empty(), "no held-out windows to evaluate (the held-out data is shorter than seq_len + 1)");
  std::vector<Token> inputs, targets;
  double sum = 0.0;
  int64_t count = 0;
  for (size_t first = 0; first < starts.size(); first += static_cast<size_t>(batch)) {
    const size_t rows = std::min(starts.size() - first, static_cast<size_t>(batch));
    inputs.resize(rows * static_cast<size_t>(seq_len));
    targets.resize(inputs.size());
    for (size_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < seq_len; ++i) {
        const size_t at = static_cast<size_t>(starts[first + r] + i);
        inputs[r * static_cast<size_t>(seq_len) + static_cast<size_t>(i)] = tokens[at];
        targets[r * static_cast<size_t>(seq_len) + static_cast<size_t>(i)] = tokens[at + 1];
      }
    sum += model.eval_loss_sum(inputs.data(), targets.data(), static_cast<int64_t>(rows), seq_len);
    count += static_cast<int64_t>(rows) * seq_len;
  }
  return sum / static_cast<double>(count);
}

TrainResult run_training(const TrainConfig& config, TrainableModel& model, const TokenData& data,
                         const TrainOptions& options) {
  validate_config(config);
  FP8T_CHECK(!options.run_dir.empty() && fs::is_directory(options.run_dir), "run directory '{}' does not exist",
             options.run_dir);
  FP8T_CHECK(data.vocab_size <= static_cast<uint64_t>(model.vocab_size()),
             "the data's vocabulary ({}) is larger than the model's (config key 'model.vocab_size' = {})",
             data.vocab_size, model.vocab_size());
  const fs::path run(options.run_dir);
  const nlohmann::json config_json = config_to_json(config);
  write_file_atomic((run / "config.json").string(), config_json.dump(2) + "\n");

  const TrainEvalSplit split = split_train_eval(data.tokens, config.eval_fraction, config.seq_len);
  BatchSampler sampler(split.train, config.seq_len, derive_seed(static_cast<uint64_t>(config.seed), 1));
  const std::vector<int64_t> eval_starts =
      eval_window_starts(split.eval.size(), config.seq_len, config.eval_batches * config.micro_batch());
  // Parameters, gradients and moments live in arenas on the model's device; the optimizer ops run there.
  const optim::ParamArenas& params = model.parameters();
  const ExecCtx ctx = ExecCtx::on(params.values.device());
  optim::AdamW optimizer(config.adamw(), params);
  const optim::LrSchedule lr_schedule = config.lr_schedule();
  const optim::BatchSizeSchedule batch_schedule = config.batch_schedule();

  TrainerState state;
  Progress progress(options.out, options.terminal, config.log_every, (run / "train.log").string());
  if (options.resume) {
    load_checkpoint(*options.resume, model, &optimizer);
    state = options.resume->state;
    sampler.set_state(state.sampler);
    for (const char* f : {"metrics.jsonl", "eval.jsonl", "expert_load.jsonl", "events.jsonl"})
      truncate_jsonl_after_step((run / f).string(), state.step);
    progress.message(fmt::format("resumed from {} at step {}", options.resume->dir, state.step));
  }
  JsonlWriter metrics_log((run / "metrics.jsonl").string()), eval_log((run / "eval.jsonl").string()),
      load_log((run / "expert_load.jsonl").string()), events_log((run / "events.jsonl").string());
  if (options.resume)
    events_log.write({{"step", state.step}, {"event", "resumed"}, {"detail", options.resume->dir}});

  const bool bf16_weights = config.recipe == "bf16";
  auto save = [&](const char* why) {
    state.sampler = sampler.state();
    CheckpointWrite w;
    w.config = &config_json;
    w.bf16_weights = bf16_weights;
    w.model = &model;
    w.optimizer = &optimizer;
    w.state = state;
    const std::string dir = save_checkpoint(options.run_dir, w);
    events_log.write({{"step", state.step}, {"event", "checkpoint"}, {"detail", dir}});
    progress.message(fmt::format("step {}: {} checkpoint saved to {}", state.step, why, dir));
  };
  TrainResult result;
  // The final evaluation covers the whole held-out split (up to kFinalEvalMaxWindows windows), the periodic
  // ones the first eval_batches × micro_batch windows of it (cheaper, and the same windows every time).
  constexpr int64_t kFinalEvalMaxWindows = 2048;
  const std::vector<int64_t> final_eval_starts =
      eval_window_starts(split.eval.size(), config.seq_len, kFinalEvalMaxWindows);
  auto evaluate = [&](bool final) {
    const std::vector<int64_t>& starts = final ? final_eval_starts : eval_starts;
    const double loss = evaluate_loss(model, split.eval, starts, config.seq_len, config.micro_batch());
    const double bits = loss / std::numbers::ln2;
    nlohmann::ordered_json j;
    j["step"] = state.step;
    j["eval_loss"] = finite_or_null(loss);
    j[data.byte_tokens ? "eval_bpb" : "eval_bits_per_token"] = finite_or_null(bits);
    eval_log.write(j);
    progress.message(fmt::format("step {}: held-out loss {:.4f}, {:.4f} bits per {} ({} windows of {} tokens)",
                                 state.step, loss, bits, data.byte_tokens ? "byte" : "token", starts.size(),
                                 config.seq_len));
    result.final_eval_loss = loss;
    result.final_eval_bits = bits;
  };

  const std::vector<std::string> moe_names = model.moe_layer_names();
  const auto run_start = Clock::now();
  const int64_t first_step = state.step;
  std::vector<Token> inputs, targets;
  std::vector<double> recent_losses;
  double smoothed_tps = 0.0;
  std::string stop_reason;
  for (int64_t step = state.step; step < config.steps; ++step) {
    const auto step_start = Clock::now();
    const bool sample_health = config.health_every > 0 && (step + 1) % config.health_every == 0;
    model.begin_step(step, sample_health);
    backend(default_device()).allocator().reset_peaks();  // this step's peaks (memory_json)
    const double lr = lr_schedule.at(step);
    const int64_t batch = batch_schedule.at(step);
    optim::zero_grads(params);
    LossBreakdown loss;
    std::vector<std::vector<double>> expert_tokens;
    for (int64_t done = 0; done < batch;) {
      const int64_t rows = std::min(config.micro_batch(), batch - done);
      sampler.next(rows, inputs, targets);
      const double share = static_cast<double>(rows) / static_cast<double>(batch);
      const MicroBatchResult r = model.forward_backward(inputs.data(), targets.data(), rows, config.seq_len, share);
      loss.total += share * r.loss.total;
      loss.main += share * r.loss.main;
      loss.mtp += share * r.loss.mtp;
      loss.balance += share * r.loss.balance;
      add_into(expert_tokens, r.expert_tokens);
      done += rows;
    }
    const double grad_norm = optim::clip_grad_norm(ctx, params, config.grad_clip);
    const bool finite = std::isfinite(loss.total) && std::isfinite(grad_norm);
    state.tokens_seen += batch * config.seq_len;
    state.step = step + 1;
    if (finite) {
      optimizer.step(ctx, params, lr);
      model.after_step();
      state.bad_in_row = 0;
      recent_losses.push_back(loss.total);
      if (recent_losses.size() > 10) recent_losses.erase(recent_losses.begin());
    } else {
      model.discard_step();
      ++state.skipped_steps;
      ++state.bad_in_row;
      const std::string detail = fmt::format("loss {}, gradient norm {}", loss.total, grad_norm);
      events_log.write({{"step", state.step}, {"event", "skipped_nonfinite"}, {"detail", detail}});
      progress.message(fmt::format("step {}: skipped, non-finite {} ({} in a row, {} in total)", state.step, detail,
                                   state.bad_in_row, state.skipped_steps));
      if (state.bad_in_row >= config.max_bad_steps)
        stop_reason = fmt::format(
            "training stopped at step {}: {} consecutive steps had a non-finite loss or gradient (limit: config key "
            "'train.max_bad_steps' = {}); last: {}",
            state.step, state.bad_in_row, config.max_bad_steps, detail);
    }
    const double step_seconds = seconds_since(step_start);
    const double tps = static_cast<double>(batch * config.seq_len) / std::max(step_seconds, 1e-9);
    smoothed_tps = smoothed_tps == 0.0 ? tps : 0.8 * smoothed_tps + 0.2 * tps;

    StepMetrics m;
    m.step = state.step;
    m.loss = loss.total;
    m.loss_main = loss.main;
    m.loss_mtp = loss.mtp;
    m.loss_balance = loss.balance;
    m.lr = lr;
    m.tokens_per_s = tps;
    m.grad_norm = grad_norm;
    m.max_expert_load_ratio = max_expert_load_ratio(expert_tokens);
    nlohmann::ordered_json row = step_metrics_json(m);
    const nlohmann::ordered_json memory = memory_json(model, optimizer);
    max_into(result.memory, memory);
    if (sample_health) {  // numerics health and memory, every health_every steps
      row["memory"] = memory;
      const nlohmann::json health = model.take_health();
      if (!health.is_null()) {
        row["health"] = health;
        const nlohmann::ordered_json errors = gemm_error_summary(health);
        if (!errors.is_null()) row["gemm_error"] = errors;
      }
    }
    metrics_log.write(row);
    if (!expert_tokens.empty() && (state.step % config.log_every == 0 || state.step == config.steps || step == first_step))
      load_log.write({{"step", state.step}, {"layers", moe_names}, {"load", load_fractions(expert_tokens)}});

    if (!stop_reason.empty()) {
      progress.finish();
      FP8T_FAIL("{}", stop_reason);
    }
    const double elapsed = seconds_since(run_start);
    const double per_step = elapsed / static_cast<double>(state.step - first_step);
    progress.update({state.step, config.steps, loss.total, lr, smoothed_tps,
                     per_step * static_cast<double>(config.steps - state.step)});

    const bool last = state.step == config.steps;
    if (last || (config.eval_every > 0 && state.step % config.eval_every == 0)) evaluate(last);
    if (last || (config.save_every > 0 && state.step % config.save_every == 0)) save(last ? "final" : "periodic");
    if (!last && stop_requested()) {
      g_stop = 0;
      save("interrupt");
      events_log.write({{"step", state.step}, {"event", "interrupted"}, {"detail", ""}});
      progress.finish();
      if (options.write_report) write_report(options.run_dir);
      FP8T_FAIL("interrupted at step {} of {}; checkpoint saved, continue with: fp8train train --resume {}",
                state.step, config.steps, options.run_dir);
    }
  }
  progress.finish();

  result.steps_done = state.step;
  result.skipped_steps = state.skipped_steps;
  result.seconds = seconds_since(run_start);
  double sum = 0;
  for (double l : recent_losses) sum += l;
  result.final_train_loss = recent_losses.empty() ? std::nan("") : sum / static_cast<double>(recent_losses.size());

  nlohmann::ordered_json summary;
  summary["data"] = data.source;
  summary["steps"] = state.step;
  summary["tokens seen"] = state.tokens_seen;
  summary["final train loss (mean of last 10 steps)"] = finite_or_null(result.final_train_loss);
  summary["final held-out loss"] = finite_or_null(result.final_eval_loss);
  summary[data.byte_tokens ? "final held-out bits per byte" : "final held-out bits per token"] =
      finite_or_null(result.final_eval_bits);
  summary["wall time this session (s)"] = std::round(result.seconds * 10) / 10;
  summary["parameters"] = params.layout().view_elements();
  summary["memory (bytes, max over steps)"] = result.memory;
  progress.message(fmt::format("memory (max over steps): master weights {} B, compute weights {} B, gradients {} B, "
                               "optimizer state {} B, peak cached activations {} B",
                               result.memory.value("master_weights_bytes", int64_t{0}),
                               result.memory.value("compute_weights_bytes", int64_t{0}),
                               result.memory.value("gradient_bytes", int64_t{0}),
                               result.memory.value("optimizer_state_bytes", int64_t{0}),
                               result.memory.value("activation_cache_peak_bytes", int64_t{0})));
  write_file_atomic((run / "summary.json").string(), summary.dump(2) + "\n");
  if (options.write_report) result.report_path = write_report(options.run_dir);
  return result;
}

}  // namespace fp8train::train
