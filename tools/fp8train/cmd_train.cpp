// `fp8train train | eval | generate`: training a DeepSeek-V3-style model, evaluating and sampling a checkpoint.
//   fp8train train [--preset tiny|small|base] [--config FILE.json] [--<key> VALUE ...] [--resume DIR]
//       With no arguments: the `small` preset on the embedded procedural corpus, into runs/small-<date>-<time>/.
//       Every config key (src/train/config.h) has a flag; precedence: preset < checkpoint (--resume) < file < flags.
//       --resume continues the run DIR points into (its run directory), or --out when given: never the directory
//       recorded inside the checkpoint, which may be a copy's original.
//       --init-from HFDIR starts from a Hugging Face DeepSeek-V3 directory's weights (src/train/hf_format.h): its
//       config.json sets the model's shape (precedence: preset < HFDIR < file < flags).
//   fp8train eval --checkpoint DIR [--data FILE] [--seq-len N] [--batch N] [--max-windows N] [--json]
//       Perplexity and bits per byte of the model in DIR on FILE (default: the run's own held-out split).
//       eval and generate read the weights only (optimizer.safetensors may be absent), and encode text with the
//       tokenizer saved in the checkpoint (--tokenizer, when given, must be that same model).
//   fp8train generate --checkpoint DIR [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]
//                     [--speculative none|mtp] [--no-cache] [--stats]
//       Samples a continuation with the main model, incrementally with MLA's latent cache (--no-cache: recomputing
//       the context for every token); --speculative mtp drafts with the MTP modules (train/generation.h).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "dist/bootstrap.h"
#include "dist/groups.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/generation.h"
#include "train/hf_format.h"
#include "train/model_adapter.h"
#include "train/progress.h"
#include "train/rng.h"
#include "train/sft.h"
#include "train/token_shards.h"
#include "train/tokenizer.h"
#include "train/trainer.h"
#ifdef FP8TRAIN_HAVE_CUDA
#include "tensor/cuda/device.h"
#endif

namespace fp8train::cli {
namespace {

namespace fs = std::filesystem;
using namespace fp8train::train;

// ---- train -----------------------------------------------------------------------------------------------
struct TrainArgs {
  std::string preset, config_file, resume, sft, init_from;
  std::map<std::string, std::string> flag_values;  // flag name → text, for every config flag given
};

}  // namespace

std::string fresh_run_dir(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  const std::string base = fmt::format("runs/{}-{}", name, stamp);
  std::string dir = base;
  for (int n = 2; fs::exists(dir); ++n) dir = fmt::format("{}-{}", base, n);  // two runs in the same second
  return dir;
}

std::string device_description() {
#ifdef FP8TRAIN_HAVE_CUDA
  if (started_device() == "cuda") return fp8train::cuda::device_info(fp8train::cuda::current_device()).describe();
#endif
  const int threads = omp_get_max_threads();
  return fmt::format("CPU, {} thread{}", threads, threads == 1 ? "" : "s");
}

namespace {

// The run's data, encoded with its tokenizer (SFT JSONL too: [BOS] prompt response [EOS] in that tokenizer's ids).
TokenData load_data(const TrainConfig& c, const Tokenizer& tokenizer) {
  if (c.data_format == "sft") return load_sft_data(c.data_path, sft_tokenizer(tokenizer));
  return c.data_path.empty()
             ? embedded_corpus_data(static_cast<uint64_t>(c.seed), static_cast<size_t>(c.corpus_bytes), &tokenizer)
             : load_token_data(c.data_path, tokenizer);
}

bool set_by_user(const ConfigSources& sources, const std::string& key) {
  const auto it = sources.find(key);
  return it != sources.end() && it->second != "preset" && it->second != "checkpoint";
}

// A --tokenizer given with a checkpoint must be the checkpoint's own tokenizer.
void check_same_tokenizer(const Tokenizer& checkpoint, const std::string& given_path, const std::string& dir) {
  const std::unique_ptr<Tokenizer> given = given_path.empty() ? make_byte_tokenizer() : load_tokenizer_file(given_path);
  FP8T_CHECK(given->fingerprint() == checkpoint.fingerprint(),
             "the tokenizer given ({}: {}) is not the one checkpoint '{}' was trained with ({}: {}); omit "
             "--tokenizer to use the checkpoint's",
             given_path.empty() ? "the byte tokenizer" : "'" + given_path + "'", given->describe(), dir,
             checkpoint.is_byte() ? "the byte tokenizer" : "its tokenizer.model", checkpoint.describe());
}

// The run's tokenizer: the checkpoint's on a resume; else data.tokenizer; else the one a shard directory given as
// data.path was made with; else bytes. With a SentencePiece tokenizer model.vocab_size follows it, and a value
// set by the user that differs is an error.
std::unique_ptr<Tokenizer> train_tokenizer(TrainConfig& c, ConfigSources& sources, const CheckpointMeta* resume) {
  std::unique_ptr<Tokenizer> tok;
  if (resume) {
    tok = checkpoint_tokenizer(*resume);
    if (set_by_user(sources, "data.tokenizer")) check_same_tokenizer(*tok, c.tokenizer_path, resume->dir);
  } else if (!c.tokenizer_path.empty()) {
    tok = load_tokenizer_file(c.tokenizer_path);
  } else if (!c.data_path.empty() && is_token_shard_dir(c.data_path)) {
    tok = token_shards_tokenizer(c.data_path);
    if (!tok->is_byte()) {
      c.tokenizer_path = (fs::path(c.data_path) / "tokenizer.model").string();
      sources["data.tokenizer"] = "data";
    }
  } else {
    tok = make_byte_tokenizer();
  }
  if (!tok->is_byte()) {
    const int64_t v = tok->vocab_size();
    FP8T_CHECK(!set_by_user(sources, "model.vocab_size") || c.model.vocab_size == v,
               "config key 'model.vocab_size' = {} differs from the tokenizer's {} ids; leave it unset (it follows "
               "the tokenizer) or set it to {}",
               c.model.vocab_size, v, v);
    if (c.model.vocab_size != v) sources["model.vocab_size"] = "tokenizer";
    c.model.vocab_size = v;
  }
  return tok;
}

void set_threads(int64_t threads) {
  if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
}

// The distillation teacher of train.teacher: its own checkpoint's model config and recipe, its master weights; it
// only runs forward (no optimizer, and its gradient buffers are never written).
std::unique_ptr<DeepSeekTrainable> load_teacher(const std::string& path) {
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(path), CheckpointUse::Inference);
  TrainConfig c = preset_config(meta.config.value("preset", "small"));
  apply_config_json(c, meta.config, fmt::format("teacher checkpoint '{}'", meta.dir), nullptr);
  validate_config(c);
  auto teacher = std::make_unique<DeepSeekTrainable>(c.model, 0, c.recipe);
  load_checkpoint(meta, *teacher, nullptr);
  std::printf("teacher: %s (step %lld), %lld parameters (%s), recipe %s\n", meta.dir.c_str(),
              static_cast<long long>(meta.state.step), static_cast<long long>(teacher->parameter_count()),
              c.model.describe().c_str(), c.recipe.c_str());
  return teacher;
}

// Rank 0's text on every rank of `world` (e.g. a run directory named after rank 0's clock).
std::string same_on_every_rank(dist::Communicator& world, const std::string& text) {
  if (world.size() == 1) return text;
  constexpr int64_t kMax = 4096;
  FP8T_CHECK(static_cast<int64_t>(text.size()) < kMax, "'{}' is longer than {} bytes", text, kMax - 1);
  std::vector<uint8_t> host(kMax, 0);
  std::copy(text.begin(), text.end(), host.begin());
  // GPU ranks (NCCL) exchange device tensors.
  const Device device = world.backend() == "nccl" ? default_device() : Device::cpu();
  const ExecCtx ctx = ExecCtx::on(device);
  const Tensor bytes = Tensor::from_vector(host, {kMax}, MemCategory::Workspace, device);
  world.broadcast(bytes, 0, ctx);
  ctx.synchronize();
  host = bytes.to_vector<uint8_t>();
  return std::string(reinterpret_cast<const char*>(host.data()));
}

void run_train(const TrainArgs& args) {
  // Resolve the config: preset < checkpoint < file < flags.
  std::optional<CheckpointMeta> resume;
  if (!args.resume.empty()) resume = read_checkpoint_meta(resolve_checkpoint_dir(args.resume));
  nlohmann::json file_json;
  if (!args.config_file.empty()) file_json = read_config_file(args.config_file);
  std::string preset = "small";
  if (resume && resume->config.contains("preset") && resume->config["preset"].is_string())
    preset = resume->config["preset"].get<std::string>();
  if (file_json.is_object() && file_json.contains("preset")) {
    FP8T_CHECK(file_json["preset"].is_string(), "config file '{}': config key 'preset' must be a string",
               args.config_file);
    preset = file_json["preset"].get<std::string>();
  }
  if (!args.preset.empty()) preset = args.preset;
  TrainConfig config = preset_config(preset);
  ConfigSources sources;
  std::optional<HfCheckpoint> init;
  if (!args.init_from.empty()) {
    FP8T_CHECK(!resume, "--init-from starts a new run from other weights; it cannot be combined with --resume");
    init = read_hf_checkpoint(args.init_from);
    apply_config_json(config, {{"model", init->model_section}}, fmt::format("init-from '{}'", args.init_from),
                      &sources);
    for (const auto& item : init->model_section.items()) sources["model." + item.key()] = "init-from";
  }
  if (resume) {
    // The checkpoint's settings, but not its run directory: a resume writes where the user pointed (the run
    // the checkpoint is in, or --out), never where the run was first made.
    nlohmann::json settings = resume->config;
    if (settings.contains("train") && settings["train"].is_object()) settings["train"].erase("out");
    apply_config_json(config, settings, "checkpoint", &sources);
  }
  if (!args.config_file.empty())
    apply_config_json(config, file_json, fmt::format("config file '{}'", args.config_file), &sources);
  if (!args.sft.empty()) {  // --sft FILE = --data FILE --data-format sft
    apply_config_flag(config, "data", args.sft, &sources);
    apply_config_flag(config, "data-format", "sft", &sources);
  }
  for (const auto& [flag, text] : args.flag_values) apply_config_flag(config, flag, text, &sources);
  const std::unique_ptr<Tokenizer> tokenizer = train_tokenizer(config, sources, resume ? &*resume : nullptr);
  validate_config(config);
  resolve_moment_dtype(config, &sources);

  // The ranks of a distributed run (mpirun, srun or the torchrun-style environment; one rank otherwise). The world
  // is started on the device the run computes on: CPU ranks talk over MPI, GPU ranks over NCCL.
  set_threads(config.threads);
  // The GPU runs every recipe end to end (int8-blockwise on the integer tensor cores), the two ablations included
  // (dgrad_block's 128×128 scales re-expressed per row for the 1×128 Dgrad, promote=never's kernels built with the
  // FP22 pending sum; every GEMM of a step bit for bit the CPU's, dense and grouped: AblationGpu.*). The options that
  // change the FP8 GEMMs' arithmetic away from what the kernels compute (accum, promote other than never, grad) have
  // no GPU path: `auto` keeps those on the CPU (exact emulation) and says why (printed below, by rank 0 only).
  const std::string recipe_base = config.recipe.substr(0, config.recipe.find(':'));
  std::string device_note;
  if (config.device == "auto" && hopper_gpu_visible()) {
    std::string cpu_only;
    if (recipe_base != "fp32" && recipe_base != "bf16" && recipe_base != "fp8-deepseek" &&
        recipe_base != "fp8-tensorwise" && recipe_base != "int8-blockwise")
      cpu_only = "recipe " + recipe_base + " has no GPU path yet";
    for (const char* key : {"accum=", "promote=", "grad="})
      if (cpu_only.empty() && config.recipe.find(key) != std::string::npos &&
          !(std::string(key) == "promote=" && config.recipe.find("promote=never") != std::string::npos))
        cpu_only = fmt::format("recipe option '{}' asks for FP8 GEMM arithmetic the GPU kernels do not compute",
                               std::string(key).substr(0, std::string(key).size() - 1));
    if (!cpu_only.empty()) {
      device_note = fmt::format(
          "device: a Hopper GPU is present, but {}: training on the CPU (exact emulation); --device cuda tries the "
          "GPU anyway\n",
          cpu_only);
      config.device = "cpu";
    }
  }
  config.device = start_device(config.device);  // config.json records where the run computed
  const std::unique_ptr<dist::Communicator> world =
      dist::init_world(config.device, dist::CommOptions{.timeout_seconds = config.dist_timeout});
  // Unless a config file or flag sets it, parallel.dp is what the launch gives (a resumed checkpoint's count included:
  // checkpoints load on any number of ranks).
  // A checkpoint's expert parallelism is kept where the launch can hold it, else the run continues without it
  // (checkpoints hold every expert, so they load on any layout).
  const auto ep_source = sources.find("parallel.ep");
  if (ep_source != sources.end() && ep_source->second == "checkpoint" && world->size() % (config.ep * config.pp) != 0) {
    config.ep = 1;
    sources["parallel.ep"] = "launch";
  }
  const auto pp_source = sources.find("parallel.pp");  // likewise a checkpoint's pipeline parallelism
  if (pp_source != sources.end() && pp_source->second == "checkpoint" && world->size() % (config.ep * config.pp) != 0) {
    config.pp = 1;
    sources["parallel.pp"] = "launch";
  }
  const auto dp_source = sources.find("parallel.dp");
  if ((dp_source == sources.end() || dp_source->second == "preset" || dp_source->second == "checkpoint") &&
      world->size() % (config.ep * config.pp) == 0) {
    const int64_t launched = world->size() / (config.ep * config.pp);
    if (launched != config.dp) sources["parallel.dp"] = "launch";
    config.dp = launched;
  }
  const dist::ProcessGroups groups = dist::make_process_groups(
      *world,
      dist::ParallelLayout{static_cast<int>(config.dp), static_cast<int>(config.ep), static_cast<int>(config.pp)});
  const bool lead = world->rank() == 0;

  if (config.out.empty())
    config.out = same_on_every_rank(*world, resume ? run_dir_of_checkpoint(resume->dir) : fresh_run_dir(config.preset));
  if (resume) {
    check_resumable(config, *resume, config.out);  // a finished run says so before anything else happens
  } else if (lead && fs::exists(fs::path(config.out) / "metrics.jsonl")) {
    std::error_code ec;
    FP8T_CHECK(!fs::exists(fs::path(config.out) / "checkpoints" / "latest", ec),
               "run directory '{}' already holds a run; continue it with --resume {} or choose another --out",
               config.out, config.out);
    FP8T_FAIL("run directory '{}' already holds a run that has no checkpoint to resume from (it stopped before its "
              "first save); remove it or choose another --out",
              config.out);
  }

  // Data first: a bad data file fails before anything is created.
  const TokenData data = load_data(config, *tokenizer);

  // With expert parallelism each rank builds only its shard of the routed experts (their weights, gradients and
  // optimizer state divided by --ep); checkpoints still hold every expert.
  DeepSeekTrainable model(config.model, derive_seed(static_cast<uint64_t>(config.seed), 0), config.recipe,
                          static_cast<int>(config.ep), config.ep > 1 ? groups.ep_index : 0);
  if (init) {
    for (const std::string& note : load_hf_weights(*init, model, config.model)) std::printf("note: %s\n", note.c_str());
    std::printf("initial weights: %s (%zu tensors)\n", args.init_from.c_str(), init->tensors.size());
    init.reset();  // the host copies are no longer needed
  }
  const std::unique_ptr<DeepSeekTrainable> teacher = config.teacher.empty() ? nullptr : load_teacher(config.teacher);
  // Every rank has checked the run directory before rank 0 starts writing into it.
  world->barrier();
  // Only rank 0 prints (and writes the run directory); the others report errors only.
  if (!lead)
    FP8T_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "cannot silence the output of rank {}",
               world->rank());
  std::printf("%s", device_note.c_str());
  if (world->size() > 1)
    std::printf("distributed: %d ranks (%s), layout %s, collective timeout %g s\n", world->size(),
                std::string(world->backend()).c_str(), groups.layout.str().c_str(), config.dist_timeout);
  std::printf("fp8train train: DeepSeek-V3-style model, %lld parameters (%s)\n",
              static_cast<long long>(model.parameter_count()), config.model.describe().c_str());
  std::printf("data: %s, %zu tokens (%s); recipe %s; %s; run directory %s\n", data.source.c_str(), data.tokens.size(),
              tokenizer->describe().c_str(), config.recipe.c_str(), device_description().c_str(), config.out.c_str());
  std::printf("\n%s\n", config_table(config, sources).c_str());
  std::fflush(stdout);

  // Ctrl-C, or SIGTERM (what Slurm and other schedulers send before they kill a preempted job): finish the step,
  // checkpoint, report, then stop (a second signal of the same kind kills at once).
  std::signal(SIGINT, [](int) {
    request_stop();
    std::signal(SIGINT, SIG_DFL);
  });
  std::signal(SIGTERM, [](int) {
    request_stop();
    std::signal(SIGTERM, SIG_DFL);
  });
  TrainOptions options;
  options.run_dir = config.out;
  options.resume = resume ? &*resume : nullptr;
  options.out = stdout;
  options.terminal = ::isatty(::fileno(stdout)) != 0;
  options.device = device_description();
  options.teacher = teacher.get();
  options.dp = groups.dp.get();
  // Expert parallelism: the gradients (and micro-batches) go over DP x EP, the tokens over EP.
  std::unique_ptr<dist::Communicator> dp_ep;
  if (config.ep > 1) {
    dp_ep = world->split(groups.pp_index, world->rank(), "dp x ep");
    options.dp = dp_ep.get();
    options.ep = groups.ep.get();
    options.expert_dp = groups.dp.get();  // the ranks holding this rank's experts
  }
  // Pipeline parallelism: the gradients go over DP x EP x PP (every rank), the activations over PP; with EP the
  // experts' gradients go over the ranks holding the same experts, which are now those of every DP replica and
  // every stage (each rank keeps every layer's shard of the experts).
  std::unique_ptr<dist::Communicator> expert_holders;
  if (config.pp > 1) {
    options.dp = world.get();
    options.pp = groups.pp.get();
    if (config.ep > 1) {
      expert_holders = world->split(groups.ep_index, world->rank(), "expert holders");
      options.expert_dp = expert_holders.get();
    }
  }
  options.tokenizer = tokenizer.get();
  const TrainResult r = run_training(config, model, data, options);
  if (!lead) return;
  std::printf(
      "done: recipe %s on %s: %lld steps in %s (%lld skipped); held-out loss %.4f = %.4f bits per %s; final train loss "
      "(total, mean of the last 10 steps) %.4f\n",
      config.recipe.c_str(), options.device.c_str(), static_cast<long long>(r.steps_done),
      format_duration(r.seconds).c_str(), static_cast<long long>(r.skipped_steps), r.final_eval_loss, r.final_eval_bits,
      data.byte_tokens ? "byte" : "token", r.final_train_loss);
  std::printf("metrics: %s/metrics.jsonl (TensorBoard: tensorboard --logdir %s)\nreport:  %s\n", config.out.c_str(),
              config.out.c_str(), r.report_path.c_str());
}

// ---- shared by eval and generate ---------------------------------------------------------------------------
struct LoadedModel {
  TrainConfig config;
  std::unique_ptr<DeepSeekTrainable> model;
  CheckpointMeta meta;
  std::unique_ptr<Tokenizer> tokenizer;
};

// ema: the checkpoint's weight EMA in place of its master weights (eval --ema).
LoadedModel load_model(const std::string& checkpoint, int64_t threads, const std::string& device,
                       const std::string& tokenizer_path, bool ema = false) {
  LoadedModel m;
  m.meta = read_checkpoint_meta(resolve_checkpoint_dir(checkpoint), CheckpointUse::Inference);
  FP8T_CHECK(!ema || checkpoint_has_ema(m.meta),
             "checkpoint '{}' holds no weight EMA (train with --ema-decay D, e.g. 0.999, to keep one)", m.meta.dir);
  m.tokenizer = checkpoint_tokenizer(m.meta);
  if (!tokenizer_path.empty()) check_same_tokenizer(*m.tokenizer, tokenizer_path, m.meta.dir);
  const std::string preset = m.meta.config.value("preset", "small");
  m.config = preset_config(preset);
  apply_config_json(m.config, m.meta.config, "checkpoint", nullptr);
  validate_config(m.config);
  set_threads(threads > 0 ? threads : m.config.threads);
  m.config.device = start_device(device);
  m.model = std::make_unique<DeepSeekTrainable>(m.config.model, 0, m.config.recipe);
  load_checkpoint(m.meta, *m.model, nullptr);
  if (ema) load_ema_weights(m.meta, *m.model);
  return m;
}

// ---- eval ------------------------------------------------------------------------------------------------
struct EvalArgs {
  std::string checkpoint, data, sft, tokenizer;
  int64_t seq_len = 0, batch = 8, max_windows = 0, threads = 0;
  std::string device = "auto";
  bool json = false;
  bool ema = false;
};

void run_eval(const EvalArgs& a) {
  FP8T_CHECK(a.batch >= 1, "--batch must be at least 1, got {}", a.batch);
  FP8T_CHECK(a.seq_len >= 0 && a.max_windows >= 0, "--seq-len and --max-windows must be non-negative");
  LoadedModel m = load_model(a.checkpoint, a.threads, a.device, a.tokenizer, a.ema);
  const int64_t seq_len = a.seq_len > 0 ? a.seq_len : m.config.seq_len;
  FP8T_CHECK(a.data.empty() || a.sft.empty(), "give --data or --sft, not both");
  TokenSequence tokens;
  std::vector<uint8_t> mask;
  std::string source;
  bool bytes = true;
  if (!a.sft.empty()) {  // the response tokens of chat / SFT data, in the checkpoint's tokenizer
    TokenData d = load_sft_data(a.sft, sft_tokenizer(*m.tokenizer));
    FP8T_CHECK(d.vocab_size <= static_cast<uint32_t>(m.model->vocab_size()),
               "'{}' has a vocabulary of {}, the model's is {}", a.sft, d.vocab_size, m.model->vocab_size());
    tokens = std::move(d.tokens);
    mask = std::move(d.loss_mask);
    source = d.source;
    bytes = d.byte_tokens;
  } else if (!a.data.empty()) {
    TokenData d = load_token_data(a.data, *m.tokenizer);
    tokens = std::move(d.tokens);
    source = a.data;
    bytes = d.byte_tokens;
    FP8T_CHECK(d.vocab_size <= static_cast<uint32_t>(m.model->vocab_size()),
               "'{}' has a vocabulary of {}, the model's is {}", a.data, d.vocab_size, m.model->vocab_size());
  } else {  // the run's own held-out split
    TokenData d = load_data(m.config, *m.tokenizer);
    TokenSplit split = split_tokens(d.tokens, m.config.eval_fraction, m.config.seq_len, d.loss_mask);
    tokens = std::move(split.eval);
    mask = std::move(split.eval_mask);
    source = d.source + " (held-out split)";
    bytes = d.byte_tokens;
  }
  const std::vector<int64_t> starts = eval_window_starts(tokens.size(), seq_len, a.max_windows);
  FP8T_CHECK(!starts.empty(), "'{}' has {} tokens, fewer than one window of seq_len + 1 = {}", source, tokens.size(),
             seq_len + 1);
  const auto t0 = std::chrono::steady_clock::now();
  const double loss = evaluate_loss(*m.model, tokens, starts, seq_len, a.batch, {}, mask);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bits = loss / std::numbers::ln2;
  int64_t scored = static_cast<int64_t>(starts.size()) * seq_len;
  if (!mask.empty()) {  // only the response tokens are scored
    scored = 0;
    for (int64_t s : starts)
      for (int64_t i = 1; i <= seq_len; ++i) scored += mask[static_cast<size_t>(s + i)];
  }
  if (a.json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = m.meta.dir;
    j["weights"] = a.ema ? "ema" : "master";
    j["data"] = source;
    j["tokens"] = scored;
    j["loss"] = loss;
    j["perplexity"] = std::exp(loss);
    j[bytes ? "bits_per_byte" : "bits_per_token"] = bits;
    j["seconds"] = seconds;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("checkpoint %s (step %lld%s) on %s: %lld tokens in %zu windows of %lld\n", m.meta.dir.c_str(),
                static_cast<long long>(m.meta.state.step), a.ema ? ", EMA weights" : "", source.c_str(),
                static_cast<long long>(scored), starts.size(), static_cast<long long>(seq_len));
    std::printf("loss %.4f nats/token, perplexity %.3f, %.4f bits per %s (%.1f s)\n", loss, std::exp(loss), bits,
                bytes ? "byte" : "token", seconds);
  }
}

// ---- generate --------------------------------------------------------------------------------------------
struct GenerateArgs {
  std::string checkpoint, prompt, tokenizer;
  int64_t max_new_tokens = 200, top_k = 40, seed = 1, threads = 0;
  std::string device = "auto";
  double temperature = 0.8;
  std::string speculative = "none";
  bool no_cache = false, stats = false;
};

void run_generate(const GenerateArgs& a) {
  FP8T_CHECK(a.max_new_tokens >= 0, "--max-new-tokens must be non-negative, got {}", a.max_new_tokens);
  FP8T_CHECK(a.temperature >= 0.0 && std::isfinite(a.temperature), "--temperature must be >= 0, got {}", a.temperature);
  FP8T_CHECK(a.top_k >= 0, "--top-k must be non-negative, got {}", a.top_k);
  FP8T_CHECK(a.speculative == "none" || a.speculative == "mtp", "--speculative must be none or mtp, got '{}'",
             a.speculative);
  FP8T_CHECK(!(a.no_cache && a.speculative == "mtp"), "--speculative mtp decodes with the cache; drop --no-cache");
  validate_utf8(a.prompt, "--prompt");
  LoadedModel m = load_model(a.checkpoint, a.threads, a.device, a.tokenizer);
  const Tokenizer& tok = *m.tokenizer;
  std::vector<Token> context = encode_text(tok, a.prompt);
  if (context.empty()) context = encode_text(tok, "\n");  // an empty prompt starts a new line of the corpus
  GenerateOptions o;
  o.sampling.temperature = a.temperature;
  o.sampling.top_k = a.top_k;
  o.sampling.tokenizer = &tok;
  o.max_new_tokens = a.max_new_tokens;
  o.seed = static_cast<uint64_t>(a.seed);
  o.mode = a.speculative == "mtp" ? DecodeMode::Speculative : a.no_cache ? DecodeMode::Recompute : DecodeMode::Cache;
  o.window = m.config.seq_len;
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  // Subword pieces (and byte-fallback pieces of one character) print once their text is complete: the new ids
  // are decoded together and what extends the text printed so far is written.
  std::vector<Token> generated;
  std::string printed;
  GenerateStats stats;
  generate(
      m.model->model(), context, o,
      [&](Token t) {
        generated.push_back(t);
        const std::string text = tok.decode(generated);
        if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
          std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
          std::fflush(stdout);
          printed = text;
        }
      },
      &stats);
  std::printf("\n");
  if (a.stats) {
    std::fprintf(stderr, "%lld tokens in %.3f s (%.1f tokens/s), %lld main-model passes",
                 static_cast<long long>(stats.new_tokens), stats.seconds, stats.tokens_per_second(),
                 static_cast<long long>(stats.main_passes));
    if (o.mode == DecodeMode::Speculative)
      std::fprintf(stderr, ", %lld of %lld drafts accepted (%.1f%%); %.3f s in main passes, %.3f s drafting",
                   static_cast<long long>(stats.accepted), static_cast<long long>(stats.drafted),
                   100.0 * stats.acceptance_rate(), stats.main_seconds, stats.draft_seconds);
    std::fprintf(stderr, "\n");
    if (o.mode != DecodeMode::Recompute) {
      const auto& model = m.model->model();
      std::fprintf(stderr, "latent KV cache: %lld bytes per token (an MHA model with the same head dims: %lld)\n",
                   static_cast<long long>(model.latent_cache_bytes_per_token()),
                   static_cast<long long>(model.mha_cache_bytes_per_token()));
    }
  }
}

// ---- registration ----------------------------------------------------------------------------------------
void add_train(CLI::App& root) {
  static TrainArgs train_args;
  static std::map<std::string, std::string> flag_storage;
  auto* train = root.add_subcommand("train", "Train a DeepSeek-V3-style MoE model (default: small preset, embedded corpus)");
  train->add_option("--preset", train_args.preset, "tiny | small | base (on --resume: the checkpoint's)")
      ->default_str("small");
  train->add_option("--config", train_args.config_file, "JSON config file (layout: src/train/config.h)");
  train->add_option("--sft", train_args.sft,
                    "train on chat / SFT data: a JSONL file of {\"prompt\", \"response\"} objects, loss on the "
                    "responses only (= --data FILE --data-format sft)");
  train->add_option("--resume", train_args.resume,
                    "continue from a checkpoint: a run directory, its checkpoints/ folder or a step directory");
  train->add_option("--init-from", train_args.init_from,
                    "start from the weights of a Hugging Face DeepSeek-V3 directory (e.g. fp8train export's)");
  std::vector<std::pair<std::string, CLI::Option*>> options;
  for (const ConfigFlag& f : config_flags()) {
    const std::string section = f.key.substr(0, f.key.find('.'));
    const char* group = section == "model"      ? "Model"
                        : section == "data"     ? "Data"
                        : section == "train"    ? "Training"
                        : section == "parallel" ? "Parallel"
                                                : "Optimizer";
    CLI::Option* o = train->add_option("--" + f.flag, flag_storage[f.flag], f.help)->group(group)->type_name(f.type_name);
    options.emplace_back(f.flag, o);
  }
  train->callback([train, options] {
    for (const auto& [flag, option] : options)
      if (option->count() > 0) train_args.flag_values[flag] = flag_storage[flag];
    run_train(train_args);
  });

  static EvalArgs eval_args;
  auto* eval = root.add_subcommand("eval", "Perplexity and bits per byte of a checkpoint on a file");
  eval->option_defaults()->always_capture_default();
  eval->add_option("--checkpoint", eval_args.checkpoint, "run directory, checkpoints/ folder or step directory")->required();
  eval->add_option("--data", eval_args.data,
                   "UTF-8 text, token file or token shard directory (default: the run's held-out split)");
  eval->add_option("--sft", eval_args.sft,
                   "chat / SFT JSONL file: the loss of the responses given their prompts (format: src/train/sft.h)");
  eval->add_option("--tokenizer", eval_args.tokenizer,
                   "SentencePiece model; must be the checkpoint's own (default: the checkpoint's tokenizer)");
  eval->add_option("--seq-len", eval_args.seq_len, "window length (default: the training seq_len)");
  eval->add_option("--batch", eval_args.batch, "windows per forward pass");
  eval->add_option("--max-windows", eval_args.max_windows, "evaluate at most this many windows (0: the whole file)");
  eval->add_option("--threads", eval_args.threads, "CPU threads (0: the run's setting)");
  eval->add_option("--device", eval_args.device, "cpu, cuda or auto (cuda when a Hopper GPU is present)");
  eval->add_flag("--json", eval_args.json, "print one JSON line instead of text");
  eval->add_flag("--ema", eval_args.ema, "evaluate the checkpoint's weight EMA (trained with --ema-decay)");
  eval->callback([] { run_eval(eval_args); });

  static GenerateArgs gen_args;
  auto* gen = root.add_subcommand(
      "generate", "Sample text from a checkpoint (temperature / top-k; latent KV cache; MTP speculative decoding)");
  gen->option_defaults()->always_capture_default();
  gen->add_option("--checkpoint", gen_args.checkpoint, "run directory, checkpoints/ folder or step directory")->required();
  gen->add_option("--prompt", gen_args.prompt, "text to continue (UTF-8)");
  gen->add_option("--tokenizer", gen_args.tokenizer,
                  "SentencePiece model; must be the checkpoint's own (default: the checkpoint's tokenizer)");
  gen->add_option("--max-new-tokens", gen_args.max_new_tokens, "tokens to generate");
  gen->add_option("--temperature", gen_args.temperature, "sampling temperature (0: greedy)");
  gen->add_option("--top-k", gen_args.top_k, "sample among the k most likely tokens (0: all)");
  gen->add_option("--seed", gen_args.seed, "sampling seed");
  gen->add_option("--threads", gen_args.threads, "CPU threads (0: the run's setting)");
  gen->add_option("--device", gen_args.device, "cpu, cuda or auto (cuda when a Hopper GPU is present)");
  gen->add_option("--speculative", gen_args.speculative,
                  "mtp: draft with the MTP modules, verify with the main model (same output distribution)");
  gen->add_flag("--no-cache", gen_args.no_cache, "recompute the whole context for every token (no latent cache)");
  gen->add_flag("--stats", gen_args.stats, "print tokens/s (and the draft acceptance rate) to stderr");
  gen->callback([] { run_generate(gen_args); });
}

const bool registered = register_command("train", 10, &add_train);

}  // namespace
}  // namespace fp8train::cli
