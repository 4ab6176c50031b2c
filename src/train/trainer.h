// The training loop: for each optimizer step, sample the step's batch (batch-size schedule) in micro-batches,
// accumulate gradients, check the loss and gradients are finite (else skip the step, count and log it; stop
// after `max_bad_steps` in a row), clip by global norm, AdamW with the scheduled LR, router-bias update; log
// metrics, evaluate on the held-out split, checkpoint; write report.html at the end.
//
// Run directory (RUN = TrainConfig::out):
//   config.json, metrics.jsonl, eval.jsonl, expert_load.jsonl, events.jsonl, train.log, summary.json,
//   report.html, checkpoints/ (checkpoint.h)
// Determinism: given the config (incl. thread count) the run is a pure function of the seed, and resuming from
// a checkpoint continues it bit for bit (the sampler, optimizer, weights and router biases are all restored).
#pragma once
#include <cstdio>
#include <string>

#include "train/checkpoint.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/trainable.h"

namespace fp8train::train {

// Set (e.g. from a SIGINT handler) to stop a run after the current step: the trainer saves a checkpoint,
// writes the report and throws Error saying how to continue (--resume). Async-signal-safe to set.
void request_stop();
bool stop_requested();

struct TrainOptions {
  std::string run_dir;                    // resolved output directory (must exist)
  const CheckpointMeta* resume = nullptr; // continue from this checkpoint
  std::FILE* out = stderr;                // progress and messages
  bool terminal = false;                  // redraw the progress line in place
  bool write_report = true;
};

struct TrainResult {
  int64_t steps_done = 0;
  double final_train_loss = 0;  // mean of the last min(10, steps) applied steps' total loss
  double final_eval_loss = 0;   // held-out loss at the end, over the whole held-out split (nats per token)
  double final_eval_bits = 0;   // ... in bits (per byte for byte tokens)
  int64_t skipped_steps = 0;
  double seconds = 0;
  std::string report_path;
  nlohmann::ordered_json memory;  // bytes per category, the maximum over the run's steps (trainer.cpp memory_json)
};

// Mean held-out loss over the given windows (batched by `batch`), forward only, nats per token.
double evaluate_loss(TrainableModel& model, const std::vector<Token>& tokens, const std::vector<int64_t>& starts,
                     int64_t seq_len, int64_t batch);

TrainResult run_training(const TrainConfig& config, TrainableModel& model, const TokenData& data,
                         const TrainOptions& options);

}  // namespace fp8train::train
