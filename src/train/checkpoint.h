// Checkpoints: a directory per saved step, written atomically, plus a "latest" pointer.
//
//   RUN/checkpoints/step-00000300/
//     model.safetensors      weights in the recipe's compute dtype (BF16 for `bf16`, F32 for `fp32`) under the
//                            model's parameter names, and the router biases (F32) — what inference needs,
//                            readable by PyTorch / Hugging Face tools; __metadata__ holds step and config
//     master.safetensors     FP32 master weights (exact)
//     optimizer.safetensors  AdamW moments "exp_avg.<name>" / "exp_avg_sq.<name>" in the moment dtype
//     ema.safetensors        only with train.ema_decay > 0: the host-side EMA of the master weights (train/ema.h),
//                            F32 under the parameters' names; __metadata__ holds the decay
//     state.json             step, tokens seen, data sampler (RNG state, windows drawn), skipped-step counters,
//                            the run's history so far (training wall time, the last 10 applied steps' losses,
//                            the memory maximum, the data's fingerprint), and the byte size + FNV-1a 64
//                            checksum of every other file
//     config.json            the resolved TrainConfig
//     tokenizer.model        the run's SentencePiece model (absent with the byte tokenizer)
//   RUN/checkpoints/latest   one line: "step-00000300"
//
// Writing: every file goes into "step-XXXXXXXX.tmp-<pid>/" (each fsync'ed), the folder is renamed into place,
// the parent is fsync'ed, and only then is "latest" replaced atomically (atomic_file.h). A writer killed at
// any point leaves "latest" naming a complete checkpoint. Reading verifies sizes and checksums before parsing,
// so a truncated or corrupted file is refused with a message naming it.
// Tensors travel through the named views of the parameter and moment arenas and the model's state tensors:
// copied to the host with Tensor::to on saving and back with Tensor::copy_from on loading, so a run on any device
// saves and resumes the same way.
// Retention (prune_checkpoints): after each save the trainer deletes the checkpoints its settings do not keep.
// Data parallelism (ZeRO-1): every DP rank holds the weights but only its shard of the moments. save_checkpoint is
// then called by every rank: ranks other than 0 send their shards of exp_avg / exp_avg_sq to rank 0, which writes the
// checkpoint exactly as one rank would (optimizer.safetensors holds every parameter's whole moments; state.json
// records "dp_ranks"), and the others write nothing. load_checkpoint on a sharded optimizer copies the slices of
// its shard: a checkpoint resumes on any number of ranks (the shards are re-cut), and one rank's checkpoints load on
// many. The run directory must be visible to every rank (one machine, or a shared file system).
// Sharded experts (each EP rank's arenas hold only its experts: optim::ParamArenas::experts): rank 0 also receives
// every other EP shard's expert master weights (from the first rank holding them) and their moments (sharded over
// the ranks holding them), and writes every expert under its global name, in the whole model's order, so the
// checkpoint is the one a single rank would write and loads on any layout; loading keeps the experts this model
// holds.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "dist/communicator.h"
#include "optim/adamw.h"
#include "train/dataset.h"
#include "train/ema.h"
#include "train/trainable.h"

namespace fp8train::train {

struct TrainerState {
  int64_t step = 0;         // optimizer steps completed (applied or skipped)
  int64_t tokens_seen = 0;  // training tokens consumed
  BatchSampler::State sampler;
  int64_t skipped_steps = 0;  // non-finite steps skipped so far
  int64_t bad_in_row = 0;     // consecutive non-finite steps at the time of saving
  // The run's history, so that a resumed run's summary covers the whole run (absent in older checkpoints):
  double wall_seconds = 0;            // training wall time of every session up to this checkpoint
  std::vector<double> recent_losses;  // total loss of the last (up to 10) applied steps, oldest first
  nlohmann::json memory;              // memory maximum over the steps so far (trainer.cpp memory_json), or null
  std::string data_fingerprint;       // FNV-1a 64 of the data's tokens (empty: unknown)
};

struct CheckpointWrite {
  const nlohmann::json* config = nullptr;  // resolved config (config_to_json)
  bool bf16_weights = true;                // model.safetensors dtype: BF16 (true) or F32
  TrainableModel* model = nullptr;
  const optim::AdamW* optimizer = nullptr;
  WeightEma* ema = nullptr;  // the weight EMA of the model's parameter arena, when the run keeps one
  TrainerState state;
  dist::Communicator* comm = nullptr;  // the DP group when the optimizer is sharded (null: one rank)
  // Sharded experts: the ranks holding this rank's experts (dist::Zero1's expert section) and this rank's EP index.
  dist::Communicator* expert_dp = nullptr;
  int ep_rank = 0;
  std::string tokenizer_model;         // SentencePiece model bytes saved as tokenizer.model (empty: byte tokenizer)
};

// Writes RUN/checkpoints/step-<step>/ and points "latest" at it; returns the checkpoint directory (on DP ranks other
// than 0, which only send their moments: an empty string).
std::string save_checkpoint(const std::string& run_dir, const CheckpointWrite& what);

// Accepts a run directory (uses checkpoints/latest), a checkpoints directory (uses latest), or a step
// directory; returns the step directory. Errors name what is missing.
std::string resolve_checkpoint_dir(const std::string& path);

// The run directory a step directory belongs to (RUN for RUN/checkpoints/step-N).
std::string run_dir_of_checkpoint(const std::string& step_dir);

struct CheckpointMeta {
  std::string dir;
  nlohmann::json config;
  TrainerState state;
  nlohmann::json files;  // name → {"bytes", "fnv1a64"}
  std::string tokenizer_model;  // tokenizer.model's bytes (verified), empty when the run used the byte tokenizer
};

// What a checkpoint is read for: resuming training needs every file; evaluation and generation never read
// optimizer.safetensors, so it may be missing (and is not read to verify it).
enum class CheckpointUse { Resume, Inference };

// Reads state.json and config.json and verifies every needed file's size and checksum.
CheckpointMeta read_checkpoint_meta(const std::string& step_dir, CheckpointUse use = CheckpointUse::Resume);

// The tokenizer the checkpoint's run trained with: its tokenizer.model, or the byte tokenizer when it has none.
std::unique_ptr<Tokenizer> checkpoint_tokenizer(const CheckpointMeta& meta);

// Retention: deletes RUN's checkpoints except the `keep_last` highest steps (0: keep all), those whose step is
// a multiple of `keep_every` (0: none), and the one "latest" names; returns the deleted folder names. Each is
// renamed to a ".tmp-" name first, so a crash mid-delete leaves a leftover that the next save sweeps away.
std::vector<std::string> prune_checkpoints(const std::string& run_dir, int64_t keep_last, int64_t keep_every);

// Loads master weights (exact FP32) and router biases into the model, and the moments and step count into the
// optimizer when `optimizer` is not null (a sharded optimizer: the moments of its shard). Names, shapes and dtypes must
// match the model (checked); the model's tensors are written only once the whole master file checked out, the moments
// once the whole optimizer file did. The recipe's state (TrainableModel::recipe_state, saved as
// recipe_state.safetensors) is restored when the checkpoint holds exactly the model's recipe-state tensors. Returns
// false when the model has recipe state that was not restored (another recipe's checkpoint, an older one, another
// amax-history length): it starts fresh.
bool load_checkpoint(const CheckpointMeta& meta, TrainableModel& model, optim::AdamW* optimizer);

// The weight EMA (ema.safetensors). checkpoint_has_ema: whether the checkpoint holds one. load_ema: restores `ema`
// (the EMA of an arena of `layout`), checking names and shapes; false when the checkpoint has none.
// read_ema_weights: the EMA weights by parameter name as host F32 tensors (what an export of the EMA writes);
// load_ema_weights: copies them into the model's parameters in place of the master weights (eval --ema). Both throw
// naming the checkpoint when it has no EMA.
bool checkpoint_has_ema(const CheckpointMeta& meta);
// expert_shard: the layout holds a shard of the experts (the other shards' EMA in the file is skipped).
bool load_ema(const CheckpointMeta& meta, const ArenaLayout& layout, WeightEma& ema, bool expert_shard = false);
std::vector<NamedTensor> read_ema_weights(const CheckpointMeta& meta);
void load_ema_weights(const CheckpointMeta& meta, TrainableModel& model);

// FNV-1a 64 of bytes, as 16 lower-case hex digits.
std::string fnv1a64_hex(std::string_view bytes);

}  // namespace fp8train::train
