// The training loop: for each optimizer step, set the model's scheduled MTP weight λ and router-bias speed γ
// (train.*_schedule), sample the step's batch (batch-size schedule) in micro-batches, accumulate gradients, check
// the loss and gradients are finite (else skip the step, count and log it; stop after `max_bad_steps` in a row),
// clip by global norm, AdamW with the scheduled LR, router-bias update, the weight EMA's asynchronous update
// (train.ema_decay > 0, train/ema.h); log metrics, evaluate on the held-out
// split, checkpoint; at the end save the final checkpoint first, then run the final evaluation
// (train.final_eval_windows windows, with progress), then write summary.json and report.html.
//
// Run directory (RUN = TrainOptions::run_dir):
//   config.json, metrics.jsonl, eval.jsonl, expert_load.jsonl, events.jsonl, train.log, summary.json,
//   report.html, events.out.tfevents.* (TensorBoard, tensorboard.h), checkpoints/ (checkpoint.h)
// Life cycle: everything is validated (config, data, the checkpoint against the model and optimizer) before
// anything is written, and a run directory this call created is removed again when it fails before its first
// step is logged. A resume continues in RUN, wherever the checkpoint came from; resuming a finished run is
// refused (it says how to extend it), except that a run stopped after its final checkpoint but before its
// summary (e.g. during the final evaluation) is finished. Warnings (a run no longer than its warmup, a resume
// with settings or data that differ from the checkpoint's) go to the output, train.log and events.jsonl.
// A stop (Ctrl-C, or max_bad_steps non-finite steps in a row) saves a checkpoint and the report first, then
// throws Error saying how to continue.
// Determinism: given the config (incl. thread count) the run is a pure function of the seed, and resuming from
// a checkpoint continues it bit for bit (the sampler, optimizer, weights and router biases are all restored).
// With data parallelism it is a pure function of the seed and the number of DP ranks: the ranks' gradients,
// losses and expert loads are added in rank order, so the result never depends on timing; a different number
// of ranks groups the micro-batches' sums differently (docs/distributed.md); with pipeline parallelism, of the
// seed and the layout.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

#include "dist/communicator.h"
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
  std::string run_dir;                    // output directory (created when missing)
  const CheckpointMeta* resume = nullptr; // continue from this checkpoint
  std::FILE* out = stderr;                // progress and messages
  bool terminal = false;                  // redraw the progress line in place
  bool write_report = true;
  std::string device = "CPU";             // what the run computes on, for summary.json and the report
  // Distillation teacher (config.teacher loaded by the caller): forward-only on each micro-batch, its top-k
  // distribution (config.distill_top_k) weighted by config.distill_weight in the loss; metrics.jsonl gains
  // loss_distill and distill_kl, eval.jsonl eval_distill_kl (the held-out KL to the teacher).
  TrainableModel* teacher = nullptr;
  // Data parallelism (ZeRO-1, dist/zero.h): the DP group this rank trains in; null: one rank. Every rank of the
  // group calls run_training with the same config and data; the step's micro-batches are split between them
  // (rank r runs a contiguous block of them), gradients are reduce-scattered, each rank updates its shard of the
  // optimizer state, and the parameters are all-gathered. Rank 0 alone writes the run directory and the output;
  // every rank evaluates (the same windows, so the same numbers) and joins each checkpoint save (checkpoint.h).
  dist::Communicator* dp = nullptr;
  // Expert parallelism (dist/expert_parallel.h): the EP group; null or one rank: none. With EP, `dp` must be the
  // group of every rank that trains other tokens, DP x EP (the ranks of one EP group route different micro-batches
  // through each other's experts): the micro-batches are split over it, the gradients reduced over it (an expert's
  // gradient is zero on the ranks that do not own it, so its sum is the sum over its DP replicas), and the
  // optimizer state sharded over it; the expert loads are the EP group's totals already, so they count once per
  // DP replica. Every EP rank must run as many micro-batches as its peers: the step's micro-batches must divide
  // evenly.
  // A model built with only its shard of the experts (DeepSeekTrainable's ep / ep_rank: the parameter arenas hold
  // E/ep experts) needs `expert_dp` too: the ranks holding the same experts (the DP group), over which the experts'
  // gradients are reduced and their optimizer state sharded (dist::Zero1), the rest going over `dp` as above.
  dist::Communicator* ep = nullptr;
  dist::Communicator* expert_dp = nullptr;
  // Pipeline parallelism (DualPipeV, dist/dualpipe.h): the PP group, the ranks of one pipeline; null or one rank:
  // none. With PP, `dp` must be the group of every rank (DP x EP x PP): each pipeline (the DP replicas and EP
  // peers, rank r of each pipeline holding stages r and 2P-1-r of 2P) runs its contiguous block of the step's
  // micro-batches through the DualPipeV schedule (at least 2P of them per pipeline and step, checked before the
  // run starts); every rank keeps the whole parameter arena (with EP: its shard of every layer's experts), the
  // parameters of stages it does not hold get zero gradient, and the gradients are reduced over every rank (the
  // experts' over `expert_dp`, then every rank with the same EP index), so every rank's optimizer step and weights
  // are the same. With EP the EP peers of a stage run the same schedule, so their all-to-alls meet in the same
  // order. CPU or GPU ranks (NCCL send/recv); not with a distillation teacher.
  dist::Communicator* pp = nullptr;
  // The run's tokenizer: a SentencePiece model is saved as RUN/tokenizer.model and in every checkpoint (null or
  // the byte tokenizer: nothing is saved). Its vocabulary must equal the model's.
  const Tokenizer* tokenizer = nullptr;
};

struct TrainResult {
  int64_t steps_done = 0;
  double final_train_loss = 0;  // mean of the last min(10, steps) applied steps' total loss
  double final_eval_loss = 0;   // held-out loss at the end, over the whole held-out split (nats per token)
  double final_eval_bits = 0;   // ... in bits (per byte for byte tokens)
  int64_t skipped_steps = 0;
  double seconds = 0;          // training wall time of the whole run, every session
  double session_seconds = 0;  // ... of this call
  std::string report_path;
  nlohmann::ordered_json memory;  // bytes per category, the maximum over the run's steps (trainer.cpp memory_json)
};

// Called after each batch of an evaluation with the windows done and the total; it may throw to abandon it.
using EvalProgress = std::function<void(size_t done, size_t total)>;

// Mean held-out loss over the given windows (batched by `batch`), forward only, nats per token. With a loss mask
// (one entry per token, TokenData::loss_mask) only the targets whose entry is 1 count (SFT: the responses).
double evaluate_loss(TrainableModel& model, const TokenSequence& tokens, const std::vector<int64_t>& starts,
                     int64_t seq_len, int64_t batch, const EvalProgress& progress = {},
                     const std::vector<uint8_t>& loss_mask = {});
double evaluate_loss(TrainableModel& model, const std::vector<Token>& tokens, const std::vector<int64_t>& starts,
                     int64_t seq_len, int64_t batch, const EvalProgress& progress = {},
                     const std::vector<uint8_t>& loss_mask = {});

// Mean KL(teacher top-k ‖ student) per target token over the given windows (as evaluate_loss).
double evaluate_distill_kl(TrainableModel& student, TrainableModel& teacher, int64_t top_k, const TokenSequence& tokens,
                           const std::vector<int64_t>& starts, int64_t seq_len, int64_t batch,
                           const std::vector<uint8_t>& loss_mask = {});
double evaluate_distill_kl(TrainableModel& student, TrainableModel& teacher, int64_t top_k,
                           const std::vector<Token>& tokens, const std::vector<int64_t>& starts, int64_t seq_len,
                           int64_t batch, const std::vector<uint8_t>& loss_mask = {});

// FNV-1a 64 of the tokens (as little-endian uint32, then the loss mask's bytes when there is one), or for shards
// their index's checksums (TokenData::fingerprint): tells whether a resume trains on the same data.
std::string data_fingerprint(const TokenData& data);

// Refuses a resume into `run_dir` that cannot continue: a checkpoint past train.steps, or a finished run (the
// message says how to extend it). Returns true when the run has only to be finished: its final checkpoint is in
// `run_dir` but its summary is not (stopped during the final evaluation). run_training calls it too.
bool check_resumable(const TrainConfig& config, const CheckpointMeta& checkpoint, const std::string& run_dir);

TrainResult run_training(const TrainConfig& config, TrainableModel& model, const TokenData& data,
                         const TrainOptions& options);

}  // namespace fp8train::train
