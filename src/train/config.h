// TrainConfig: everything a training run needs, resolved from (lowest to highest precedence) a preset,
// a JSON file, and command-line flags; the resolved config is printed as a table and saved as
// RUN/config.json. Every key is declared once in a registry (config.cpp) with its type, range and help, so
// the JSON reader, the flags, validation, the table and the saved file cannot drift apart.
//
// JSON layout (every section and key optional; unknown keys are errors naming the key):
//   { "preset": "tiny",
//     "model": { "hidden_size": 128, ... },          the model's dimensions (ModelConfig)
//     "data":  { "path": "", "eval_fraction": 0.1, "corpus_bytes": 3000000 },
//     "train": { "steps": 300, "batch_size": 16, ... },
//     "optim": { "lr": 3e-3, "moment_dtype": "bf16", ... },
//     "parallel": { "dp": 2, "ep": 1, "pp": 1, "timeout": 300 } }
// Presets: tiny (seconds per step on 2 CPU cores), small (the default: a few minutes on 2 cores), base
// (GPU-sized).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "optim/adamw.h"
#include "optim/schedule.h"

namespace fp8train::train {

struct TrainConfig {
  std::string preset = "small";
  model::ModelConfig model;  // the model layer's config (model/config.h), keys under "model"

  // data
  std::string data_path;             // empty: the embedded corpus
  std::string data_format = "text";  // text (UTF-8 or a token file) or sft (JSONL prompt/response, train/sft.h)
  std::string tokenizer_path;  // SentencePiece model (tokenizer.h); empty: the byte tokenizer (or a shard dir's own)
  int64_t corpus_bytes = 3000000;
  double eval_fraction = 0.1;

  // train
  int64_t steps = 600;
  int64_t batch_size = 16;        // sequences per optimizer step
  int64_t micro_batch_size = 0;   // sequences per forward/backward (0: the whole batch); gradients accumulate
  int64_t seq_len = 128;
  int64_t seed = 1;
  int64_t threads = 0;            // OpenMP threads (0: OpenMP's default)
  std::string device = "auto";    // cpu, cuda (a Hopper GPU), or auto: cuda when a Hopper GPU is present
  std::string recipe = "bf16";    // a recipe spec for recipe::parse_recipe (fp32, bf16, fp8-deepseek, ...)
  // Piecewise-constant schedules over the run (optim::PiecewiseSchedule's text form, e.g. DeepSeek-V3's
  // "0.3,0.1@0.676" and "0.001,0@0.966"); empty: the constant model.mtp_lambda / model.bias_update_speed.
  std::string mtp_lambda_schedule;
  std::string bias_update_speed_schedule;
  std::string out;                // run directory (empty: runs/<preset>-<date>-<time>)
  int64_t save_every = 0;         // checkpoint every N steps (0: only at the end)
  int64_t keep_last = 3;          // checkpoints kept: the last N (0: all) ...
  int64_t keep_every = 0;         // ... plus every one whose step is a multiple of K (0: none); "latest" always
  int64_t eval_every = 100;       // held-out evaluation every N steps (and at the end)
  int64_t eval_batches = 8;       // batches of held-out windows per periodic evaluation
  int64_t final_eval_windows = 2048;  // held-out windows of the final evaluation (0: the periodic evaluation's)
  int64_t log_every = 10;         // a plain progress line every N steps when not on a terminal
  int64_t max_bad_steps = 5;      // consecutive non-finite steps before the run stops
  std::string teacher;            // distillation teacher: an fp8train checkpoint (empty: no distillation)
  double distill_weight = 1.0;    // w: loss = CE + w·KL(teacher top-k ‖ student) + MTP + balance
  int64_t distill_top_k = 16;     // k: the teacher's distribution is kept on its k most likely tokens
  double ema_decay = 0.0;  // host-side EMA of the weights, ema ← d·ema + (1 − d)·w per step (0: none; train/ema.h)
  int64_t health_every = 50;      // numerics-health counters, GEMM errors vs FP32 and memory sampled into metrics.jsonl every N steps (0: never)

  // optim
  double lr = 3e-3;
  double final_lr = 3e-4;
  int64_t warmup_steps = 30;
  double decay_start = 0.5;       // fraction of steps where the cosine decay starts
  double decay_end = 0.95;        // fraction of steps where it reaches final_lr (then constant)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;         // max global gradient norm (0: no clipping)
  std::string moment_dtype = "recipe";  // "recipe": the recipe's choice (resolved_moment_dtype), or fp32 / bf16
  int64_t batch_warmup_start = 0;  // batch-size warmup: sequences at step 0 (0: none)
  int64_t batch_warmup_steps = 0;

  // parallel (docs/distributed.md): the layout dp × ep × pp = the number of ranks launched
  int64_t dp = 1;               // data-parallel ranks (ZeRO-1)
  int64_t ep = 1;               // expert-parallel ranks (routed experts sharded over them; dist/expert_parallel.h)
  int64_t ranks_per_node = 0;   // EP ranks per node for node-limited routing (0: every EP rank on one node)
  int64_t pp = 1;               // pipeline ranks (DualPipeV: 2 x pp stages)
  double dist_timeout = 300.0;  // seconds a rank waits in a collective before the run fails
  double dp_bucket_mib = 64;    // ZeRO-1: FP32 gradient MiB per rank and bucket (dist::Zero1's default too)
  std::string dp_overlap = "auto";  // ZeRO-1's gradient buckets reduced during the last backward ("on"), after it
                                    // ("off"), or "auto" (on for GPU ranks: trainer.cpp says why)

  // Derived objects.
  optim::LrSchedule lr_schedule() const;
  optim::BatchSizeSchedule batch_schedule() const;
  // The MTP loss weight λ and router-bias update speed γ per step (throw Error naming the key when the text is bad).
  optim::PiecewiseSchedule mtp_lambda_by_step() const;
  optim::PiecewiseSchedule bias_update_speed_by_step() const;
  optim::AdamWConfig adamw() const;
  int64_t micro_batch() const { return micro_batch_size > 0 ? micro_batch_size : batch_size; }
};

// The named presets; throws Error for an unknown name (listing the known ones).
TrainConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

// Which layer set each key's value: "preset", "file", "flag" or "checkpoint" (for the table).
using ConfigSources = std::map<std::string, std::string>;

// Applies a JSON document (layout above) on top of `config`; "preset" is ignored here (see resolve_config).
// Errors name the key: "config key 'optim.lr' ...".
void apply_config_json(TrainConfig& config, const nlohmann::json& json, const std::string& source,
                       ConfigSources* sources);

// Applies one flag value given as text (e.g. "lr" = "3e-3"), parsing it by the key's type.
void apply_config_flag(TrainConfig& config, const std::string& flag, const std::string& text, ConfigSources* sources);

// Cross-key checks of the model section (config_model.cpp); throws Error naming the key.
void validate_model_config(const TrainConfig& config);

// Checks ranges and cross-key consistency (e.g. final_lr <= lr); throws Error naming the key.
void validate_config(const TrainConfig& config);

// The AdamW moment dtype the config trains with, the one rule `train` and `compare` share: optim.moment_dtype
// when it is fp32 or bf16, else ("recipe") the recipe's (recipe::RecipeConfig::moment_dtype: fp32, bf16 for
// fp8-deepseek, or the spec's ":moments="). validate_config refuses an optim.moment_dtype that contradicts the
// spec's own ":moments=".
std::string resolved_moment_dtype(const TrainConfig& config);
// Replaces "recipe" by resolved_moment_dtype (so config.json and checkpoints record the dtype used); the
// source becomes "recipe".
void resolve_moment_dtype(TrainConfig& config, ConfigSources* sources);

// Warnings about a valid config that will not do what a user likely expects (e.g. a run no longer than its
// learning-rate warmup, which ends at the peak learning rate): one sentence each, naming the keys.
std::vector<std::string> config_warnings(const TrainConfig& config);

// The dotted keys (e.g. "optim.lr", and "preset") whose values differ between two config JSONs, in table order;
// keys listed in `ignore` are left out. A key missing on one side counts as different, unless it is a key added
// later whose other side holds the value configs saved before it computed with (e.g. train.device "cpu").
std::vector<std::string> config_differences(const nlohmann::json& a, const nlohmann::json& b,
                                            const std::vector<std::string>& ignore = {});
// The value of a dotted key in a config JSON, as the table prints it ("(missing)" when absent).
std::string config_value_text(const nlohmann::json& config, const std::string& key);

// Keys that decide what a run computes: every key but the run directory and those that only schedule logging,
// evaluation, checkpoints or the stop rule (their changes do not alter the steps' numbers).
bool config_key_changes_training(const std::string& key);

// Complete JSON (every key) of a config; apply_config_json(to_json(c)) reproduces c.
nlohmann::json config_to_json(const TrainConfig& config);

// The table printed at start: one row per key, grouped by section, with the layer that set it.
std::string config_table(const TrainConfig& config, const ConfigSources& sources);

// Flag descriptions for the CLI: flag name (without "--"), dotted key, help text with range/choices.
struct ConfigFlag {
  std::string flag, key, help;
  std::string type_name;  // INT, NUMBER, TEXT or BOOL (for --help)
};
std::vector<ConfigFlag> config_flags();

// Loads a JSON config file, with errors naming the file (missing, unreadable, bad JSON with line/column).
nlohmann::json read_config_file(const std::string& path);

}  // namespace fp8train::train
