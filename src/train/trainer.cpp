// Training loop (see trainer.h).
#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <numbers>
#include <thread>

#include "common/error.h"
#include "dist/zero.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tensor/backend.h"
#include "train/atomic_file.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/report.h"
#include "train/tensorboard.h"

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

// Chunk times the schedule simulator takes, from measured ones: with no overlapped pair measured, F + B; a pair
// measured below its longer part (timing noise of busy CPU ranks) is taken at that part's time, the simulator's
// lower bound for a pair.
dist::ChunkTimes simulation_times(const dist::PipeTiming& t) {
  dist::ChunkTimes c = t.chunk_times();
  c.fb = t.fb == 0 ? -1 : std::max(c.fb, std::max(c.f, c.b));
  return c;
}

// One pipeline step's timing over the ranks of the pipeline (metrics.jsonl): the largest step time and bubble (the
// bubble is idle time within the step: waits for peers, and transfers where they do not overlap), each rank's
// bubble and computing time, the mean chunk times in DeepSeek's terms, DualPipeV's bubble formula evaluated with
// them, (PP/2 − 1)(F&B + B − 3W) for PP = 2P stages, and the schedule simulated with the measured times: with the
// means (every stage costing the same) and with each rank's own (its stages as they cost).
nlohmann::ordered_json pipeline_timing_json(const std::vector<dist::PipeTiming>& ranks) {
  dist::PipeTiming all;
  double step = 0, bubble = 0, transfer = 0;
  std::vector<double> per_rank, busy_per_rank;
  nlohmann::ordered_json by_chunk = nlohmann::ordered_json::array();
  const auto mean_ms = [](double s, int64_t n) { return n > 0 ? nlohmann::ordered_json(1e3 * s / n) : nullptr; };
  for (const dist::PipeTiming& t : ranks) {
    step = std::max(step, t.step_s);
    bubble = std::max(bubble, t.bubble_s());
    transfer = std::max(transfer, t.transfer_s);
    per_rank.push_back(1e3 * t.bubble_s());
    busy_per_rank.push_back(1e3 * t.busy_s());
    by_chunk.push_back({{"F", {mean_ms(t.chunk_f_s[0], t.chunk_f[0]), mean_ms(t.chunk_f_s[1], t.chunk_f[1])}},
                        {"B", {mean_ms(t.chunk_b_s[0], t.chunk_b[0]), mean_ms(t.chunk_b_s[1], t.chunk_b[1])}},
                        {"W", {mean_ms(t.chunk_w_s[0], t.chunk_w[0]), mean_ms(t.chunk_w_s[1], t.chunk_w[1])}}});
    all.f_s += t.f_s, all.b_s += t.b_s, all.w_s += t.w_s, all.fb_s += t.fb_s;
    all.f += t.f, all.b += t.b, all.w += t.w, all.fb += t.fb;
  }
  const dist::ChunkTimes c = all.chunk_times();
  const int P = static_cast<int>(ranks.size()), stages = 2 * P;
  nlohmann::ordered_json j;
  j["step_ms"] = 1e3 * step;
  j["bubble_ms"] = 1e3 * bubble;
  j["bubble_ms_per_rank"] = per_rank;
  // each rank's computing time: where the stages cost differently, the others' bubbles grow by the difference
  j["busy_ms_per_rank"] = busy_per_rank;
  j["transfer_ms"] = 1e3 * transfer;
  j["chunk_ms"] = {{"F", 1e3 * c.f}, {"B", 1e3 * c.b}, {"W", 1e3 * c.w}, {"F&B", 1e3 * c.fb}};
  // per rank, the mean lone F, B (input part only) and W of its chunk 0 and chunk 1 (null: none ran alone)
  j["chunk_ms_per_rank"] = by_chunk;
  j["bubble_formula_ms"] = 1e3 * dist::dualpipev_bubble_formula(stages, c);
  // The formula is exact only when F = B − W = W (docs/distributed.md); the schedule simulated with the measured
  // mean times is the bubble these chunk times allow when every stage costs the same and transfers are free, and
  // simulated with each rank's own times, the bubbles its stages' costs make (free transfers still).
  const int micro_batches = static_cast<int>((all.f + all.fb) / stages);  // one forward per (stage, micro-batch)
  const dist::PipeSchedule order = dist::dualpipev_compute_order(P, micro_batches);
  try {
    j["bubble_simulated_ms"] = 1e3 * dist::simulate(order, simulation_times(all)).max_bubble();
  } catch (const Error&) {
    j["bubble_simulated_ms"] = nullptr;  // times the simulator refuses (e.g. no W measured)
  }
  try {
    std::vector<dist::ChunkTimes> own;
    for (const dist::PipeTiming& t : ranks) own.push_back(simulation_times(t));
    std::vector<double> simulated;
    for (double b : dist::simulate(order, own).bubble) simulated.push_back(1e3 * b);
    j["bubble_simulated_ms_per_rank"] = simulated;
  } catch (const Error&) {
    j["bubble_simulated_ms_per_rank"] = nullptr;
  }
  return j;
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

// The run-directory files a resume cuts back to the checkpoint's step.
const char* const kStepLogs[] = {"metrics.jsonl", "eval.jsonl", "expert_load.jsonl", "events.jsonl"};

// Whether RUN/summary.json records a finished run of `step` steps.
bool summary_done(const fs::path& run, int64_t step) {
  std::error_code ec;
  if (!fs::exists(run / "summary.json", ec)) return false;
  const nlohmann::json s = nlohmann::json::parse(read_file((run / "summary.json").string()), nullptr, false);
  return s.is_object() && s.value("steps", int64_t{-1}) == step;
}

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

// Why a resume will not simply continue the checkpoint's run: settings that decide the computation and differ
// from the checkpoint's (the model's shape is checked when the weights load), and different data.
std::vector<std::string> resume_warnings(const CheckpointMeta& checkpoint, const nlohmann::json& config,
                                         const TrainConfig& c, const std::string& fingerprint,
                                         bool recipe_state_restored) {
  std::vector<std::string> out;
  for (const std::string& key : config_differences(checkpoint.config, config)) {
    if (!config_key_changes_training(key)) continue;
    if (key == "parallel.dp_bucket_mib" && c.dp == 1) continue;  // no buckets on one DP rank
    std::string why = "the run no longer continues the computation the checkpoint started";
    if (key == "train.steps")
      why =
          "the learning-rate schedule (warmup, decay start and end) and the starts of the MTP-weight and "
          "router-bias-speed schedules' pieces are recomputed for the new total, so the steps from here differ "
          "from the run as first planned";
    else if (key == "parallel.dp" || key == "parallel.ep" || key == "parallel.pp")
      why =
          "the ranks' gradients are summed in another grouping (in rank order over other blocks of micro-batches), "
          "so the steps from here differ from an uninterrupted run by rounding";
    else if (key == "parallel.dp_bucket_mib")
      why =
          "the ranks' shards follow the buckets, so the gradient norm's per-rank partial sums are grouped otherwise "
          "(its last bits, and through clipping the updates')";
    else if (key == "train.threads")
      why = "results are bit-identical only for a fixed thread count";
    else if (key == "train.device")
      why =
          "the other backend's kernels sum in other orders, so the steps from here are not bit-identical to an "
          "uninterrupted run";
    else if (key == "train.seed" && c.data_path.empty())
      why = "the embedded corpus is generated from the seed, so the data differs too";
    else if (key == "train.recipe")
      why = "the steps from here use other numerics than the steps before";
    out.push_back(fmt::format("resuming with '{}' = {} (the checkpoint's run used {}): {}", key,
                              config_value_text(config, key), config_value_text(checkpoint.config, key), why));
  }
  if (!recipe_state_restored)
    out.push_back(fmt::format(
        "the checkpoint holds no recipe state for '{}' (fp8-tensorwise's delayed-scaling amax histories): they "
        "restart empty, so the steps after this resume quantize with other scales than an uninterrupted run would",
        c.recipe));
  const std::string& before = checkpoint.state.data_fingerprint;
  if (!before.empty() && before != fingerprint)
    out.push_back(
        fmt::format("resuming on different data: the tokens' fingerprint is {}, the checkpoint's run "
                    "trained on {}; the held-out split and the batches differ from the run's",
                    fingerprint, before));
  return out;
}

// Removes a run directory that this session created if the session fails before its first step is logged,
// so a late error leaves no empty folder or lone config.json behind.
class RemoveUnlessKept {
 public:
  RemoveUnlessKept(fs::path dir, bool armed) : dir_(std::move(dir)), armed_(armed) {}
  ~RemoveUnlessKept() {
    if (!armed_) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void keep() { armed_ = false; }
  RemoveUnlessKept(const RemoveUnlessKept&) = delete;
  RemoveUnlessKept& operator=(const RemoveUnlessKept&) = delete;

 private:
  fs::path dir_;
  bool armed_;
};

// A test hook for the distributed tests: FP8TRAIN_TEST_FAULT="exit:RANK:STEP" makes DP rank RANK exit (status 3)
// in the middle of step STEP (1-based, as the progress line counts; after its first micro-batch), "hang:RANK:STEP"
// makes it stop there for good, as a crashed or stuck rank would; the other ranks must then fail with an error instead
// of waiting forever.
void test_fault_hook(int rank, int64_t step) {
  const char* spec = std::getenv("FP8TRAIN_TEST_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  char kind[8] = {0};
  int at_rank = -1;
  long long at_step = -1;
  if (std::sscanf(spec, "%7[a-z]:%d:%lld", kind, &at_rank, &at_step) != 3 || at_rank != rank || at_step != step) return;
  std::fprintf(stderr, "fp8train: test fault: rank %d %s in step %lld (FP8TRAIN_TEST_FAULT)\n", rank, kind, at_step);
  std::fflush(stderr);
  if (std::string(kind) == "exit") std::_Exit(3);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}

// The step's micro-batches that DP rank `rank` of `ranks` runs: a contiguous block [first, last).
std::pair<int64_t, int64_t> my_micro_batches(int64_t count, int rank, int ranks) {
  return {count * rank / ranks, count * (rank + 1) / ranks};
}

}  // namespace

void request_stop() { g_stop = 1; }
bool stop_requested() { return g_stop != 0; }

std::string data_fingerprint(const TokenData& data) {
  if (!data.fingerprint.empty()) return data.fingerprint;
  std::string bytes;
  bytes.reserve(data.tokens.size() * 4);
  const std::vector<Token> tokens = data.tokens.to_vector();
  for (Token t : tokens)
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((t >> (8 * i)) & 0xff));
  for (uint8_t m : data.loss_mask) bytes.push_back(static_cast<char>(m));
  return fnv1a64_hex(bytes);
}

namespace {

// Fills row `r` of inputs/targets [rows, seq_len] with the window of seq_len + 1 tokens at `start` (a target whose
// loss-mask entry is 0 is kIgnoreTarget); returns the number of targets the loss counts.
int64_t fill_eval_row(const TokenSequence& tokens, const std::vector<uint8_t>& loss_mask, size_t start, size_t r,
                      std::vector<Token>& window, std::vector<Token>& inputs, std::vector<Token>& targets) {
  const size_t t = window.size() - 1;
  tokens.copy(start, t + 1, window.data());
  int64_t count = 0;
  for (size_t i = 0; i < t; ++i) {
    const bool target = loss_mask.empty() || loss_mask[start + i + 1] != 0;
    inputs[r * t + i] = window[i];
    targets[r * t + i] = target ? window[i + 1] : kIgnoreTarget;
    count += target ? 1 : 0;
  }
  return count;
}

// The held-out windows at `starts` in batches of up to `batch` rows: `score(inputs, targets, rows)` returns a batch's
// summed loss; the result is the sum over batches divided by the number of targets the loss counts.
template <class Score>
double mean_over_windows(const TokenSequence& tokens, const std::vector<int64_t>& starts, int64_t seq_len,
                         int64_t batch, const std::vector<uint8_t>& loss_mask, const EvalProgress* progress,
                         Score&& score) {
  FP8T_CHECK(!starts.empty(), "no held-out windows to evaluate (the held-out data is shorter than seq_len + 1)");
  FP8T_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(), "the loss mask has {} entries for {} tokens",
             loss_mask.size(), tokens.size());
  std::vector<Token> inputs, targets, window(static_cast<size_t>(seq_len) + 1);
  double sum = 0.0;
  int64_t count = 0;
  for (size_t first = 0; first < starts.size(); first += static_cast<size_t>(batch)) {
    const size_t rows = std::min(starts.size() - first, static_cast<size_t>(batch));
    inputs.resize(rows * static_cast<size_t>(seq_len));
    targets.resize(inputs.size());
    for (size_t r = 0; r < rows; ++r)
      count += fill_eval_row(tokens, loss_mask, static_cast<size_t>(starts[first + r]), r, window, inputs, targets);
    sum += score(inputs.data(), targets.data(), static_cast<int64_t>(rows));
    if (progress && *progress) (*progress)(first + rows, starts.size());
  }
  FP8T_CHECK(count > 0, "the evaluated windows hold no loss target (the loss mask excludes every token)");
  return sum / static_cast<double>(count);
}

}  // namespace

double evaluate_loss(TrainableModel& model, const std::vector<Token>& tokens, const std::vector<int64_t>& starts,
                     int64_t seq_len, int64_t batch, const EvalProgress& progress,
                     const std::vector<uint8_t>& loss_mask) {
  return evaluate_loss(model, TokenSequence::view(tokens), starts, seq_len, batch, progress, loss_mask);
}

double evaluate_loss(TrainableModel& model, const TokenSequence& tokens, const std::vector<int64_t>& starts,
                     int64_t seq_len, int64_t batch, const EvalProgress& progress,
                     const std::vector<uint8_t>& loss_mask) {
  return mean_over_windows(tokens, starts, seq_len, batch, loss_mask, &progress,
                           [&](const Token* inputs, const Token* targets, int64_t rows) {
                             return model.eval_loss_sum(inputs, targets, rows, seq_len);
                           });
}

double evaluate_distill_kl(TrainableModel& student, TrainableModel& teacher, int64_t top_k,
                           const std::vector<Token>& tokens, const std::vector<int64_t>& starts, int64_t seq_len,
                           int64_t batch, const std::vector<uint8_t>& loss_mask) {
  return evaluate_distill_kl(student, teacher, top_k, TokenSequence::view(tokens), starts, seq_len, batch, loss_mask);
}

double evaluate_distill_kl(TrainableModel& student, TrainableModel& teacher, int64_t top_k, const TokenSequence& tokens,
                           const std::vector<int64_t>& starts, int64_t seq_len, int64_t batch,
                           const std::vector<uint8_t>& loss_mask) {
  return mean_over_windows(tokens, starts, seq_len, batch, loss_mask, nullptr,
                           [&](const Token* inputs, const Token* targets, int64_t rows) {
                             const TopKTargets t = teacher.top_k(inputs, rows, seq_len, top_k);
                             return student.eval_distill_kl_sum(inputs, targets, rows, seq_len, t);
                           });
}

bool check_resumable(const TrainConfig& config, const CheckpointMeta& checkpoint, const std::string& run_dir) {
  const int64_t step = checkpoint.state.step;
  FP8T_CHECK(step <= config.steps,
             "checkpoint '{}' is at step {}, past the {} steps of 'train.steps'; resume with --steps {} or more",
             checkpoint.dir, step, config.steps, step + 1);
  if (step < config.steps) return false;
  // Stopped after its final checkpoint but before its summary (e.g. during the final evaluation): finish it.
  const fs::path own_run = run_dir_of_checkpoint(checkpoint.dir);
  const bool finishing = same_directory(own_run, run_dir) && !summary_done(run_dir, step);
  FP8T_CHECK(finishing,
             "run '{}' is complete ({} of {} steps); to train it further, resume it with more steps, e.g. "
             "fp8train train --resume {} --steps {} (the learning-rate schedule then spans the new total)",
             own_run.string(), step, config.steps, run_dir, 2 * config.steps);
  return true;
}

TrainResult run_training(const TrainConfig& requested, TrainableModel& model, const TokenData& data,
                         const TrainOptions& options) {
  // ---- validate everything; nothing is written before the run directory is created below ----------------
  TrainConfig config = requested;
  resolve_moment_dtype(config, nullptr);
  validate_config(config);
  FP8T_CHECK(!options.run_dir.empty(), "no run directory given");
  FP8T_CHECK((options.teacher != nullptr) == !config.teacher.empty(),
             "config key 'train.teacher' and the teacher model given to the trainer disagree");
  if (options.teacher)
    FP8T_CHECK(options.teacher->vocab_size() == model.vocab_size(),
               "the teacher's vocabulary ({}) differs from the student's ('model.vocab_size' = {})",
               options.teacher->vocab_size(), model.vocab_size());
  FP8T_CHECK(data.vocab_size <= static_cast<uint64_t>(model.vocab_size()),
             "the data's vocabulary ({}) is larger than the model's (config key 'model.vocab_size' = {})",
             data.vocab_size, model.vocab_size());
  const bool save_tokenizer = options.tokenizer != nullptr && !options.tokenizer->is_byte();
  if (save_tokenizer)
    FP8T_CHECK(options.tokenizer->vocab_size() == static_cast<uint64_t>(model.vocab_size()),
               "the tokenizer has {} ids but the model's vocabulary (config key 'model.vocab_size') is {}; they must "
               "be equal (leave model.vocab_size unset and it follows the tokenizer)",
               options.tokenizer->vocab_size(), model.vocab_size());
  const fs::path run(options.run_dir);
  config.out = options.run_dir;
  const nlohmann::json config_json = config_to_json(config);

  const TokenSplit split = split_tokens(data.tokens, config.eval_fraction, config.seq_len, data.loss_mask);
  BatchSampler sampler(split.train, config.seq_len, derive_seed(static_cast<uint64_t>(config.seed), 1),
                       &split.train_mask);
  const std::vector<int64_t> eval_starts =
      eval_window_starts(split.eval.size(), config.seq_len, config.eval_batches * config.micro_batch());
  // The final evaluation: train.final_eval_windows windows of the held-out split (0: the periodic ones).
  const std::vector<int64_t> final_eval_starts =
      config.final_eval_windows > 0 ? eval_window_starts(split.eval.size(), config.seq_len, config.final_eval_windows)
                                    : eval_starts;
  FP8T_CHECK(!eval_starts.empty(), "the held-out split ({} tokens) is shorter than one window of seq_len + 1 = {}",
             split.eval.size(), config.seq_len + 1);
  // Parameters, gradients and moments live in arenas on the model's device; the optimizer ops run there.
  const optim::ParamArenas& params = model.parameters();
  const ExecCtx ctx = ExecCtx::on(params.values.device());
  // Data parallelism: one rank unless a DP group is given; the same calls either way (one rank's shard is the
  // whole arena and its collectives copy nothing, so its numbers are those of the plain loop).
  dist::SelfCommunicator self("dp");
  dist::Communicator& dp = options.dp ? *options.dp : self;
  const bool lead = dp.rank() == 0;  // writes the run directory and the output
  // Expert parallelism: dp is then the DP x EP group (TrainOptions::ep says why).
  const int ep_size = options.ep ? options.ep->size() : 1;
  if (ep_size > 1) {
    FP8T_CHECK(dp.size() % ep_size == 0, "expert parallelism over {} ranks needs the {} gradient ranks to be DP x EP",
               ep_size, dp.size());
    model.set_expert_parallel(options.ep);
  }
  // Pipeline parallelism: dp is then the DP x EP x PP group (TrainOptions::pp says why); `replica` is this rank's
  // pipeline among the ranks of its stage (its DP replicas, and with EP its EP peers: each runs a pipeline of its
  // own micro-batches, and they meet in every MoE layer's all-to-alls).
  const int pp_size = options.pp ? options.pp->size() : 1;
  std::unique_ptr<dist::Communicator> stage_group;
  int replicas = dp.size(), replica = dp.rank();
  if (pp_size > 1) {
    FP8T_CHECK(dp.size() % pp_size == 0, "pipeline parallelism over {} ranks needs the {} gradient ranks to be DP x PP",
               pp_size, dp.size());
    FP8T_CHECK(!options.teacher, "pipeline parallelism does not run a distillation teacher yet (--pp {})", pp_size);
    // (On GPU ranks the stages' tensors live on the device and move with NCCL send/recv, in the schedule's order:
    // check_schedule proves that order free of deadlocks under blocking transfers.)
    stage_group = dp.split(options.pp->rank(), dp.rank(), "pp stage");
    replicas = stage_group->size();
    replica = stage_group->rank();
  }
  FP8T_CHECK(params.experts.empty() ||
                 (ep_size > 1 && options.expert_dp != nullptr && options.expert_dp->size() * ep_size == dp.size()),
             "a model holding a shard of the experts trains with expert parallelism and the group of ranks holding "
             "the same experts (TrainOptions::expert_dp)");
  // Plain data parallelism shards the arena interleaved, in the order the backward finishes the gradients (the
  // model's ready groups), so each bucket's reduce-scatter can start during the last micro-batch's backward
  // (parallel.dp_overlap); with EP or PP the shards stay contiguous and are reduced after the backward.
  const bool plain_dp = dp.size() > 1 && ep_size == 1 && pp_size == 1 && params.experts.empty();
  std::vector<int> ready_groups;
  if (plain_dp)
    for (const ArenaLayout::View& v : params.layout().views()) ready_groups.push_back(model.grad_ready_group(v.name));
  // (auto: on for GPU ranks, whose side stream costs no core and measured 0.5-1.4 % faster on 2 x H200 at 64-1024 MiB
  // buckets; off for CPU ranks, where the worker thread competes with the backward for the cores, which
  // oversubscribed ranks do not have spare: measured slower there. bench/RESULTS.md has both.)
  const bool want_overlap =
      config.dp_overlap == "on" || (config.dp_overlap == "auto" && !params.grads.device().is_cpu());
  constexpr int64_t a = ArenaLayout::kAlignElements;
  const int64_t bucket_elements =
      std::max(a, static_cast<int64_t>(config.dp_bucket_mib * double(1 << 20) / sizeof(float)) / a * a);
  dist::Zero1 zero(dp, params, options.expert_dp, bucket_elements, ready_groups, want_overlap);
  optim::AdamW optimizer =
      dp.size() == 1 ? optim::AdamW(config.adamw(), params) : optim::AdamW(config.adamw(), params, zero.shards());
  const optim::LrSchedule lr_schedule = config.lr_schedule();
  const optim::BatchSizeSchedule batch_schedule = config.batch_schedule();
  const optim::PiecewiseSchedule mtp_lambda_schedule = config.mtp_lambda_by_step();
  const optim::PiecewiseSchedule bias_update_speed_schedule = config.bias_update_speed_by_step();
  // Every rank runs at least one micro-batch of every step (so every rank's expert loads have the model's shape).
  // (The batch grows during the warmup and stays constant after it.)
  for (int64_t step = 0; dp.size() > 1 && step < std::min(config.steps, config.batch_warmup_steps + 1); ++step) {
    const int64_t b = batch_schedule.at(step), micro_batches = (b + config.micro_batch() - 1) / config.micro_batch();
    // DualPipeV lays its phases out for at least 2P micro-batches (dualpipe.h); the pipeline with the fewest runs
    // ⌊micro-batches / pipelines⌋.
    FP8T_CHECK(pp_size == 1 || micro_batches / replicas >= 2 * pp_size,
               "pipeline parallelism (DualPipeV) over {} stages needs at least {} micro-batches per pipeline and step "
               "(2 x --pp), but step {} has a batch of {} sequences = {} micro-batch(es) of up to {} for {} "
               "pipeline(s) (--dp x --ep); raise --batch-size or lower --micro-batch-size to give {} or more",
               pp_size, 2 * pp_size, step + 1, b, micro_batches, config.micro_batch(), replicas,
               2 * pp_size * replicas);
    FP8T_CHECK(pp_size > 1 || micro_batches >= dp.size(),
               "data parallelism over {} ranks needs at least {} micro-batches per step, but step {} has a batch of {} "
               "sequences = {} micro-batch(es) of up to {} ('train.batch_size', 'train.micro_batch_size', the batch "
               "warmup); raise --batch-size or lower --micro-batch-size",
               dp.size(), dp.size(), step + 1, b, micro_batches, config.micro_batch());
    // EP peers exchange tokens in every forward and backward: they must run the same number of micro-batches
    // (with PP: the same schedule)
    FP8T_CHECK(ep_size == 1 || micro_batches % replicas == 0,
               "expert parallelism: the {} {} must run the same number of micro-batches, but step {} has {} "
               "micro-batch(es) (a batch of {} sequences, micro-batches of up to {}); make the number of "
               "micro-batches a multiple of {} (--batch-size, --micro-batch-size)",
               replicas, pp_size > 1 ? "pipelines (dp x ep)" : "ranks (dp x ep)", step + 1, micro_batches, b,
               config.micro_batch(), replicas);
  }
  const std::string fingerprint = data_fingerprint(data);

  TrainerState state;
  std::vector<std::string> warnings = config_warnings(config);
  bool finishing = false;  // resumed at the last step: only the final evaluation and the summary are left
  if (options.resume) {
    const CheckpointMeta& checkpoint = *options.resume;
    state = checkpoint.state;
    finishing = check_resumable(config, checkpoint, options.run_dir);
    // names, shapes and dtypes checked against the model
    const bool recipe_state_restored = load_checkpoint(checkpoint, model, &optimizer);
    sampler.set_state(state.sampler);
    for (std::string& w : resume_warnings(checkpoint, config_json, config, fingerprint, recipe_state_restored))
      warnings.push_back(std::move(w));
  }

  // The weight EMA starts from the weights the run starts from (the checkpoint's on a resume), or continues the
  // checkpoint's own EMA when it has one.
  std::unique_ptr<WeightEma> ema;
  if (config.ema_decay > 0.0) {
    ema = std::make_unique<WeightEma>(params.values.flat(), config.ema_decay);
    if (options.resume && !load_ema(*options.resume, params.layout(), *ema, !params.experts.empty()))
      warnings.push_back(fmt::format(
          "the checkpoint holds no weight EMA: the EMA (train.ema_decay = {}) starts from its weights at step {}",
          config.ema_decay, state.step));
  }

  // ---- from here on the run directory is written ----------------------------------------------------------
  // (Only the lead rank touches the run directory; the others keep writers that write nothing.)
  std::error_code ec;
  RemoveUnlessKept cleanup(run, lead && !fs::exists(run, ec));
  if (lead) {
    fs::create_directories(run);
    write_file_atomic((run / "config.json").string(), config_json.dump(2) + "\n");
    if (save_tokenizer) write_file_atomic((run / "tokenizer.model").string(), options.tokenizer->model_bytes());
    if (options.resume)
      for (const char* f : kStepLogs) truncate_jsonl_after_step((run / f).string(), state.step);
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(lead ? nullptr : std::fopen("/dev/null", "w"), &std::fclose);
  FP8T_CHECK(lead || quiet, "cannot open /dev/null for the output of DP rank {}", dp.rank());
  Progress progress(lead ? options.out : quiet.get(), lead && options.terminal, config.log_every,
                    lead ? (run / "train.log").string() : std::string());
  const bool write_report_files = options.write_report && lead;
  try {
    const auto jsonl = [&](const char* name) { return lead ? JsonlWriter((run / name).string()) : JsonlWriter(); };
    JsonlWriter metrics_log = jsonl("metrics.jsonl"), eval_log = jsonl("eval.jsonl"),
                load_log = jsonl("expert_load.jsonl"), events_log = jsonl("events.jsonl");
    const std::unique_ptr<EventFileWriter> tensorboard =
        lead ? open_run_event_file(run.string(), options.resume != nullptr) : nullptr;
    if (options.resume) {
      cleanup.keep();
      events_log.write({{"step", state.step}, {"event", "resumed"}, {"detail", options.resume->dir}});
      progress.message(fmt::format("resumed from {} at step {}", options.resume->dir, state.step));
    }
    for (const std::string& w : warnings) {
      progress.message("warning: " + w);
      events_log.write({{"step", state.step}, {"event", "warning"}, {"detail", w}});
    }
    if (dp.size() > 1 && want_overlap && !zero.overlapping())
      progress.message(plain_dp ? "ZeRO-1: gradients reduced after the backward (MPI lacks the thread support the "
                                  "overlap needs)"
                                : "ZeRO-1: gradients reduced after the backward (the overlap with the backward runs "
                                  "with plain data parallelism only, not with --ep or --pp)");

    const bool bf16_weights = config.recipe == "bf16";
    const auto run_start = Clock::now();
    const double wall_before = state.wall_seconds;
    std::vector<double> recent_losses = state.recent_losses;
    TrainResult result;
    result.memory = state.memory.is_object() ? nlohmann::ordered_json(state.memory) : nlohmann::ordered_json::object();

    auto save = [&](const char* why) {
      state.sampler = sampler.state();
      state.wall_seconds = wall_before + seconds_since(run_start);
      state.recent_losses = recent_losses;
      state.memory = result.memory;
      state.data_fingerprint = fingerprint;
      CheckpointWrite w;
      w.config = &config_json;
      w.bf16_weights = bf16_weights;
      w.model = &model;
      w.optimizer = &optimizer;
      w.ema = ema.get();
      w.state = state;
      w.comm = &dp;
      w.expert_dp = options.expert_dp;
      w.ep_rank = options.ep ? options.ep->rank() : 0;
      if (save_tokenizer) w.tokenizer_model = options.tokenizer->model_bytes();
      const std::string dir = save_checkpoint(options.run_dir, w);
      if (!lead) return;  // the lead saved the files
      events_log.write({{"step", state.step}, {"event", "checkpoint"}, {"detail", dir}});
      std::string text = fmt::format("step {}: {} checkpoint saved to {}", state.step, why, dir);
      const std::vector<std::string> removed = prune_checkpoints(options.run_dir, config.keep_last, config.keep_every);
      if (!removed.empty())
        text += fmt::format("; removed {} (--keep-last {}{})", fmt::join(removed, ", "), config.keep_last,
                            config.keep_every > 0 ? fmt::format(", --keep-every {}", config.keep_every) : "");
      progress.message(text);
    };
    auto evaluate = [&](bool final) {
      const std::vector<int64_t>& starts = final ? final_eval_starts : eval_starts;
      EvalProgress on_batch;
      if (final) {
        progress.message(fmt::format("step {}: final evaluation on {} held-out windows of {} tokens", state.step,
                                     starts.size(), config.seq_len));
        const auto eval_start = Clock::now();
        on_batch = [&, eval_start](size_t done, size_t total) {
          if (stop_requested()) {
            g_stop = 0;
            progress.finish();
            FP8T_FAIL(
                "interrupted during the final evaluation at step {}; the final checkpoint is saved, finish "
                "the run (evaluation, summary, report) with: fp8train train --resume {}",
                state.step, options.run_dir);
          }
          const double seconds = seconds_since(eval_start);
          progress.status(
              fmt::format("final evaluation {}/{} windows | {} left", done, total,
                          format_duration(seconds / static_cast<double>(done) * static_cast<double>(total - done))));
        };
      }
      const double loss =
          evaluate_loss(model, split.eval, starts, config.seq_len, config.micro_batch(), on_batch, split.eval_mask);
      const double bits = loss / std::numbers::ln2;
      nlohmann::ordered_json j;
      j["step"] = state.step;
      j["eval_loss"] = finite_or_null(loss);
      j[data.byte_tokens ? "eval_bpb" : "eval_bits_per_token"] = finite_or_null(bits);
      if (options.teacher)
        j["eval_distill_kl"] =
            finite_or_null(evaluate_distill_kl(model, *options.teacher, config.distill_top_k, split.eval, starts,
                                               config.seq_len, config.micro_batch(), split.eval_mask));
      eval_log.write(j);
      if (tensorboard) tensorboard->scalars(state.step, tensorboard_scalars(nlohmann::json(j)));
      progress.message(fmt::format("step {}: held-out loss {:.4f}, {:.4f} bits per {} ({} windows of {} tokens)",
                                   state.step, loss, bits, data.byte_tokens ? "byte" : "token", starts.size(),
                                   config.seq_len));
      result.final_eval_loss = loss;
      result.final_eval_bits = bits;
    };

    const std::vector<std::string> moe_names = model.moe_layer_names();
    const int64_t first_step = state.step;
    std::vector<Token> inputs, targets;
    std::map<int, dist::PipeSchedule> schedules;  // DualPipeV's, by micro-batches per pipeline (the batch warmup)
    double smoothed_tps = 0.0;
    std::string stop_reason;
    for (int64_t step = state.step; step < config.steps; ++step) {
      const auto step_start = Clock::now();
      const bool sample_health = config.health_every > 0 && (step + 1) % config.health_every == 0;
      // Set from the step alone (never carried over from the step before), so a resume continues bit for bit.
      const double mtp_lambda = mtp_lambda_schedule.at(step);
      const double bias_update_speed = bias_update_speed_schedule.at(step);
      model.set_scheduled_values(mtp_lambda, bias_update_speed);
      model.begin_step(step, sample_health);
      backend(default_device()).allocator().reset_peaks();  // this step's peaks (memory_json)
      const double lr = lr_schedule.at(step);
      const int64_t batch = batch_schedule.at(step);
      optim::zero_grads(params);
      dp.reset_stats();  // this step's traffic (metrics.jsonl: dp_bytes_sent / dp_bytes_received)
      if (options.expert_dp) options.expert_dp->reset_stats();  // (the sharded experts' part of it)
      if (ep_size > 1) options.ep->reset_stats();  // (ep_bytes_sent / ep_bytes_received)
      if (pp_size > 1) options.pp->reset_stats();  // (pp_bytes_sent / pp_bytes_received)
      LossBreakdown loss;
      std::vector<std::vector<double>> expert_tokens;
      dist::CommStats pp_traffic;
      nlohmann::ordered_json pp_timing;
      // Every rank draws every micro-batch of the step (the sampler stays the same everywhere) and runs its own
      // block of them.
      const int64_t micro_batches = (batch + config.micro_batch() - 1) / config.micro_batch();
      // (With PP the ranks of a pipeline take their pipeline's block and run it through the DualPipeV schedule.)
      const auto [first_mb, last_mb] = my_micro_batches(micro_batches, replica, replicas);
      std::vector<PipelineMicroBatch> piped;
      int64_t index = 0;
      for (int64_t done = 0; done < batch; ++index) {
        const int64_t rows = std::min(config.micro_batch(), batch - done);
        sampler.next(rows, inputs, targets);
        done += rows;
        if (index < first_mb || index >= last_mb) continue;
        const double share = static_cast<double>(rows) / static_cast<double>(batch);
        if (pp_size > 1) {
          piped.push_back({inputs, targets, rows, share});
          continue;
        }
        TopKTargets teacher_targets;
        if (options.teacher) {  // the teacher's distribution on this micro-batch, forward only
          teacher_targets = options.teacher->top_k(inputs.data(), rows, config.seq_len, config.distill_top_k);
          model.set_distill_targets(&teacher_targets, config.distill_weight);
        }
        // The last micro-batch's backward launches the gradient buckets as they become final.
        const bool overlap = zero.overlapping() && index == last_mb - 1;
        if (overlap) model.set_grad_ready_hook([&](int group) { zero.group_ready(ctx, group); });
        const MicroBatchResult r = model.forward_backward(inputs.data(), targets.data(), rows, config.seq_len, share);
        if (overlap) model.set_grad_ready_hook(nullptr);
        if (options.teacher) model.set_distill_targets(nullptr, 0.0);
        loss.total += share * r.loss.total;
        loss.main += share * r.loss.main;
        loss.mtp += share * r.loss.mtp;
        loss.balance += share * r.loss.balance;
        loss.distill += share * r.loss.distill;
        loss.distill_kl += share * r.loss.distill_kl;
        add_into(expert_tokens, r.expert_tokens);
        if (index == first_mb) test_fault_hook(dp.rank(), step + 1);
      }
      if (pp_size > 1) {
        const int count = static_cast<int>(piped.size());
        auto it = schedules.find(count);
        if (it == schedules.end()) it = schedules.emplace(count, dist::dualpipev_schedule(pp_size, count)).first;
        const MicroBatchResult r = model.pipeline_step(it->second, *options.pp, piped, config.seq_len);
        loss = r.loss;
        expert_tokens = r.expert_tokens;
        pp_traffic = options.pp->stats();  // the stages' transfers, before the timing exchange below
        pp_timing = pipeline_timing_json(dist::gather_timings(*options.pp, r.pipe, ctx));
        test_fault_hook(dp.rank(), step + 1);
      }
      // (Before the loss exchange: the overlapped buckets' collectives run on another thread until it returns.)
      zero.reduce_gradients(ctx);
      if (dp.size() > 1) {
        // The step's totals over the ranks, added in rank order: every rank logs and decides the same.
        std::vector<double> local{loss.total, loss.main, loss.mtp, loss.balance};
        for (const auto& layer : expert_tokens) local.insert(local.end(), layer.begin(), layer.end());
        const std::vector<double> sum = dist::sum_in_rank_order(dp, local, ctx);
        loss = {sum[0], sum[1], sum[2], sum[3]};
        size_t at = 4;
        // (with EP every rank of an EP group reports the group's totals: the sum over DP x EP counts them ep
        // times; integers, so the division is exact)
        for (auto& layer : expert_tokens)
          for (double& x : layer) x = sum[at++] / ep_size;
        if (!expert_tokens.empty()) model.set_step_expert_tokens(expert_tokens);
      }
      const double grad_norm = zero.clip_grad_norm(ctx, config.grad_clip);
      const bool finite = std::isfinite(loss.total) && std::isfinite(grad_norm);
      state.tokens_seen += batch * config.seq_len;
      state.step = step + 1;
      if (finite) {
        if (ema) ema->before_weights_change();  // the EMA's read of the previous step's weights comes first
        optimizer.step(ctx, params, lr);
        zero.gather_parameters(ctx);
        model.after_step();
        if (ema) ema->update();  // returns at once: a host thread blends (after a side-stream copy on a GPU)
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
              "training stopped at step {}: {} consecutive steps had a non-finite loss or gradient (limit: config "
              "key 'train.max_bad_steps' = {}); last: {}",
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
      m.mtp_lambda = mtp_lambda;
      m.bias_update_speed = bias_update_speed;
      m.tokens_per_s = tps;
      m.grad_norm = grad_norm;
      m.max_expert_load_ratio = max_expert_load_ratio(expert_tokens);
      nlohmann::ordered_json row = step_metrics_json(m);
      if (options.teacher) {
        row["loss_distill"] = finite_or_null(loss.distill);
        row["distill_kl"] = finite_or_null(loss.distill_kl);
      }
      if (dp.size() > 1) {  // this rank's (the lead's) traffic in the step, by the communicators' own counters
        // (with sharded experts the gradient traffic is the replicated part's over dp plus the experts' over the
        // ranks holding them)
        const int64_t xs = options.expert_dp ? options.expert_dp->stats().bytes_sent : 0;
        const int64_t xr = options.expert_dp ? options.expert_dp->stats().bytes_received : 0;
        row["dp_bytes_sent"] = dp.stats().bytes_sent + xs;
        row["dp_bytes_received"] = dp.stats().bytes_received + xr;
        if (options.expert_dp) row["expert_dp_bytes_sent"] = xs;
        if (zero.interleaved()) {  // the gradient buckets, and how many were launched during the backward
          row["dp_buckets"] = zero.buckets().size();
          row["dp_buckets_overlapped"] = zero.overlapped_buckets();
        }
      }
      if (ep_size > 1) {  // the expert all-to-alls of the step's forwards and backwards
        row["ep_bytes_sent"] = options.ep->stats().bytes_sent;
        row["ep_bytes_received"] = options.ep->stats().bytes_received;
      }
      if (pp_size > 1) {  // the activations and their gradients sent between the pipeline's stages
        row["pp_bytes_sent"] = pp_traffic.bytes_sent;
        row["pp_bytes_received"] = pp_traffic.bytes_received;
        row["pipeline"] = pp_timing;
      }
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
      if (tensorboard) tensorboard->scalars(state.step, tensorboard_scalars(nlohmann::json(row)));
      cleanup.keep();
      if (!expert_tokens.empty() &&
          (state.step % config.log_every == 0 || state.step == config.steps || step == first_step))
        load_log.write({{"step", state.step}, {"layers", moe_names}, {"load", load_fractions(expert_tokens)}});

      if (!stop_reason.empty()) {
        // Keep what was reached: the weights are those of the last applied step (skipped steps change nothing),
        // and a resumed run gets a fresh allowance of non-finite steps.
        progress.finish();
        state.bad_in_row = 0;
        save("stop");
        events_log.write({{"step", state.step}, {"event", "stopped_nonfinite"}, {"detail", stop_reason}});
        if (write_report_files) write_report(options.run_dir);
        FP8T_FAIL(
            "{}; a checkpoint is saved: continue with fp8train train --resume {} (e.g. with a lower --lr, "
            "stronger --grad-clip or another --recipe)",
            stop_reason, options.run_dir);
      }
      const double elapsed = seconds_since(run_start);
      const double per_step = elapsed / static_cast<double>(state.step - first_step);
      progress.update({state.step, config.steps, loss.main, loss.total, lr, smoothed_tps,
                       per_step * static_cast<double>(config.steps - state.step)});

      const bool last = state.step == config.steps;
      if (last) {
        // The final checkpoint first: the final evaluation can take long, and a kill during it loses nothing.
        save("final");
        evaluate(true);
        break;
      }
      if (config.eval_every > 0 && state.step % config.eval_every == 0) evaluate(false);
      if (config.save_every > 0 && state.step % config.save_every == 0) save("periodic");
      // A stop on any rank (Ctrl-C reaches each rank at its own moment) stops every rank after the same step.
      if (dp.size() > 1 ? dist::any_rank(dp, stop_requested(), ctx) : stop_requested()) {
        g_stop = 0;
        save("interrupt");
        events_log.write({{"step", state.step}, {"event", "interrupted"}, {"detail", ""}});
        progress.finish();
        if (write_report_files) write_report(options.run_dir);
        FP8T_FAIL("interrupted at step {} of {}; checkpoint saved, continue with: fp8train train --resume {}",
                  state.step, config.steps, options.run_dir);
      }
    }
    if (finishing) evaluate(true);
    progress.finish();

    result.steps_done = state.step;
    result.skipped_steps = state.skipped_steps;
    result.session_seconds = seconds_since(run_start);
    result.seconds = wall_before + result.session_seconds;
    double sum = 0;
    for (double l : recent_losses) sum += l;
    result.final_train_loss = recent_losses.empty() ? std::nan("") : sum / static_cast<double>(recent_losses.size());

    nlohmann::ordered_json summary;
    summary["recipe"] = config.recipe;
    summary["device"] = options.device;
    summary["data"] = data.source;
    summary["data fingerprint (FNV-1a 64 of the tokens)"] = fingerprint;
    summary["steps"] = state.step;
    summary["tokens seen"] = state.tokens_seen;
    summary["final train loss (mean of last 10 steps)"] = finite_or_null(result.final_train_loss);
    summary["final held-out loss"] = finite_or_null(result.final_eval_loss);
    summary[data.byte_tokens ? "final held-out bits per byte" : "final held-out bits per token"] =
        finite_or_null(result.final_eval_bits);
    summary["wall time (s)"] = std::round(result.seconds * 100) / 100;
    summary["wall time this session (s)"] = std::round(result.session_seconds * 100) / 100;
    // The whole model's; with sharded experts this rank holds its shard of them.
    summary["parameters"] = params.model_elements();
    if (!params.experts.empty()) summary["parameters on this rank"] = params.layout().view_elements();
    summary["memory (bytes, max over steps)"] = result.memory;
    if (ema) {  // this session's cost of the weight EMA: the host thread's work, and what the steps waited for it
      summary["weight EMA decay"] = ema->decay();
      summary["weight EMA host-thread time this session (s)"] = ema->blend_seconds();
      summary["weight EMA time spent by the steps this session (s)"] = ema->step_seconds();
    }
    progress.message(fmt::format(
        "memory (max over steps): master weights {} B, compute weights {} B, gradients {} B, optimizer state {} B, "
        "peak cached activations {} B",
        result.memory.value("master_weights_bytes", int64_t{0}),
        result.memory.value("compute_weights_bytes", int64_t{0}), result.memory.value("gradient_bytes", int64_t{0}),
        result.memory.value("optimizer_state_bytes", int64_t{0}),
        result.memory.value("activation_cache_peak_bytes", int64_t{0})));
    if (lead) write_file_atomic((run / "summary.json").string(), summary.dump(2) + "\n");
    if (write_report_files) result.report_path = write_report(options.run_dir);
    cleanup.keep();
    return result;
  } catch (const Error& e) {
    // The run's own log keeps why it ended, with the failed check's location (the screen shows the sentence).
    progress.log_only(fmt::format("error: {} ({})", e.what(), e.where()));
    throw;
  }
}

}  // namespace fp8train::train
