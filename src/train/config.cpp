// Config registry, presets, JSON/flag parsing, validation and the printed table (see config.h).
#include "train/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/error.h"
#include "dist/expert_parallel.h"
#include "recipe/recipe.h"
#include "train/atomic_file.h"
#include "train/config_keys.h"

namespace fp8train::train {
namespace detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kBig = 1e15;  // "no practical upper bound" for integer keys

#define FP8T_REF(expr) [](TrainConfig& c) -> ValueRef { return &c.expr; }

// The registry is a table, one key per line: clang-format would spread each entry over several.
// clang-format off
std::vector<ConfigKey> make_keys() {
  std::vector<ConfigKey> k;
  append_model_keys(k);
  k.push_back({"data.path", "data", 0, 0, {}, "training data: UTF-8 text, a token file, or a token shard directory (fp8train tokenize) (empty: the embedded corpus)", FP8T_REF(data_path)});
  k.push_back({"data.format", "data-format", 0, 0, {"text", "sft"}, "what data.path holds: text (UTF-8 or a token file) or sft (JSONL, one {\"prompt\", \"response\"} object per line; the loss counts the response tokens only)", FP8T_REF(data_format), "text"});
  k.push_back({"data.tokenizer", "tokenizer", 0, 0, {}, "SentencePiece tokenizer model (fp8train tokenizer train); empty: the byte tokenizer, or the tokenizer of a --data shard directory; model.vocab_size follows it", FP8T_REF(tokenizer_path), ""});
  k.push_back({"data.corpus_bytes", "corpus-bytes", 10000, 1e9, {}, "size of the embedded corpus in bytes", FP8T_REF(corpus_bytes)});
  k.push_back({"data.eval_fraction", "eval-fraction", 0.001, 0.5, {}, "fraction of the data held out for evaluation (the tail)", FP8T_REF(eval_fraction)});
  k.push_back({"train.steps", "steps", 1, kBig, {}, "optimizer steps", FP8T_REF(steps)});
  k.push_back({"train.batch_size", "batch-size", 1, 1e6, {}, "sequences per optimizer step", FP8T_REF(batch_size)});
  k.push_back({"train.micro_batch_size", "micro-batch-size", 0, 1e6, {}, "sequences per forward/backward; gradients accumulate over micro-batches (0: whole batch)", FP8T_REF(micro_batch_size)});
  k.push_back({"train.seq_len", "seq-len", 1, 1e6, {}, "tokens per sequence", FP8T_REF(seq_len)});
  k.push_back({"train.seed", "seed", 0, 9007199254740991.0, {}, "seed of initialisation and data sampling", FP8T_REF(seed)});
  k.push_back({"train.threads", "threads", 0, 4096, {}, "CPU threads (0: OpenMP default); results are bit-identical for a fixed count", FP8T_REF(threads)});
  k.push_back({"train.device", "device", 0, 0, {"auto", "cpu", "cuda"}, "where the run computes: cpu, cuda (one Hopper GPU, cuda:0), or auto (cuda when a Hopper GPU is present); a resume keeps the checkpoint's device unless this is given (checkpoints move between CPU and GPU runs)", FP8T_REF(device), "cpu"});
  k.push_back({"train.recipe", "recipe", 0, 0, {}, "precision recipe: fp32, bf16, fp8-deepseek, fp8-tensorwise, int8-blockwise, with optional :key=value overrides (src/recipe/recipe.h)", FP8T_REF(recipe)});
  k.push_back({"train.mtp_lambda_schedule", "mtp-lambda-schedule", 0, 0, {}, "MTP loss weight lambda over the run, piecewise constant: VALUE, then VALUE@START pieces with START the fraction of the steps where each begins, e.g. 0.3,0.1@0.676 (DeepSeek-V3); empty: model.mtp_lambda throughout", FP8T_REF(mtp_lambda_schedule), ""});
  k.push_back({"train.bias_update_speed_schedule", "bias-update-speed-schedule", 0, 0, {}, "router bias update speed gamma over the run, piecewise constant like --mtp-lambda-schedule, e.g. 0.001,0@0.966 (DeepSeek-V3); empty: model.bias_update_speed throughout", FP8T_REF(bias_update_speed_schedule), ""});
  k.push_back({"train.out", "out", 0, 0, {}, "run directory (empty: runs/<preset>-<date>-<time>)", FP8T_REF(out)});
  k.push_back({"train.save_every", "save-every", 0, kBig, {}, "checkpoint every N steps (0: only at the end)", FP8T_REF(save_every)});
  k.push_back({"train.keep_last", "keep-last", 0, kBig, {}, "checkpoints kept: the last N (0: all), plus those of --keep-every; the one 'latest' names is never deleted", FP8T_REF(keep_last)});
  k.push_back({"train.keep_every", "keep-every", 0, kBig, {}, "also keep every checkpoint whose step is a multiple of K (0: none)", FP8T_REF(keep_every)});
  k.push_back({"train.eval_every", "eval-every", 0, kBig, {}, "held-out evaluation every N steps, and at the end (0: only at the end)", FP8T_REF(eval_every)});
  k.push_back({"train.eval_batches", "eval-batches", 1, 1e6, {}, "batches of held-out windows per periodic evaluation", FP8T_REF(eval_batches)});
  k.push_back({"train.final_eval_windows", "final-eval-windows", 0, kBig, {}, "held-out windows in the final evaluation, at most the whole held-out split (0: the periodic evaluation's windows)", FP8T_REF(final_eval_windows)});
  k.push_back({"train.log_every", "log-every", 1, kBig, {}, "steps between progress lines when the output is not a terminal", FP8T_REF(log_every)});
  k.push_back({"train.health_every", "health-every", 0, kBig, {}, "steps between numerics-health samples (per-GEMM saturation, underflow, scale range, relative error vs an FP32 GEMM) and memory in metrics.jsonl (0: never)", FP8T_REF(health_every)});
  k.push_back({"train.teacher", "teacher", 0, 0, {}, "knowledge distillation from this fp8train checkpoint (run, checkpoints/ or step directory; same vocabulary): run forward-only beside the student, its top-k distribution adds distill_weight * KL to the loss (empty: none)", FP8T_REF(teacher), ""});
  k.push_back({"train.distill_weight", "distill-weight", 0, 1e6, {}, "weight w of the distillation term: loss = CE + w*KL(teacher top-k || student) + MTP + balance", FP8T_REF(distill_weight), "1"});
  k.push_back({"train.distill_top_k", "distill-top-k", 1, 1e6, {}, "the teacher's distribution is kept on its k most likely tokens (renormalised)", FP8T_REF(distill_top_k), "16"});
  k.push_back({"train.ema_decay", "ema-decay", 0, 0.999999999, {}, "keep an exponential moving average of the weights in host memory, updated asynchronously after each step: ema = d*ema + (1-d)*w (0: none); saved in checkpoints, evaluated with eval --ema", FP8T_REF(ema_decay), "0"});
  k.push_back({"train.max_bad_steps", "max-bad-steps", 1, 1e6, {}, "consecutive non-finite steps (skipped) before the run stops", FP8T_REF(max_bad_steps)});
  k.push_back({"optim.lr", "lr", 1e-12, 10, {}, "peak learning rate", FP8T_REF(lr)});
  k.push_back({"optim.final_lr", "final-lr", 0, 10, {}, "learning rate after the cosine decay (constant to the end)", FP8T_REF(final_lr)});
  k.push_back({"optim.warmup_steps", "warmup-steps", 0, kBig, {}, "linear learning-rate warmup steps", FP8T_REF(warmup_steps)});
  k.push_back({"optim.decay_start", "decay-start", 0, 1, {}, "fraction of the steps where the cosine decay starts", FP8T_REF(decay_start)});
  k.push_back({"optim.decay_end", "decay-end", 0, 1, {}, "fraction of the steps where the cosine decay ends", FP8T_REF(decay_end)});
  k.push_back({"optim.beta1", "beta1", 0, 0.999999, {}, "AdamW beta1", FP8T_REF(beta1)});
  k.push_back({"optim.beta2", "beta2", 0, 0.999999, {}, "AdamW beta2", FP8T_REF(beta2)});
  k.push_back({"optim.eps", "eps", 1e-30, 1, {}, "AdamW epsilon", FP8T_REF(eps)});
  k.push_back({"optim.weight_decay", "weight-decay", 0, 10, {}, "AdamW decoupled weight decay (not applied to 1-D parameters)", FP8T_REF(weight_decay)});
  k.push_back({"optim.grad_clip", "grad-clip", 0, kInf, {}, "clip the global gradient norm to this (0: off)", FP8T_REF(grad_clip)});
  k.push_back({"optim.moment_dtype", "moment-dtype", 0, 0, {"recipe", "fp32", "bf16"}, "storage of AdamW's moments; recipe: the recipe's choice (fp32; bf16 for fp8-deepseek; a spec's ':moments=')", FP8T_REF(moment_dtype)});
  k.push_back({"optim.batch_warmup_start", "batch-warmup-start", 0, 1e6, {}, "batch-size warmup: sequences at step 0 (0: no warmup)", FP8T_REF(batch_warmup_start)});
  k.push_back({"optim.batch_warmup_steps", "batch-warmup-steps", 0, kBig, {}, "batch-size warmup length in steps", FP8T_REF(batch_warmup_steps)});
  k.push_back({"parallel.dp", "dp", 1, 65536, {}, "data-parallel ranks (ZeRO-1: optimizer state sharded); launch dp x ep x pp ranks, e.g. mpirun -np 2 fp8train train --dp 2", FP8T_REF(dp), "1"});
  k.push_back({"parallel.ep", "ep", 1, 65536, {}, "expert-parallel ranks: the routed experts sharded over them, tokens moved by all-to-all (n_routed_experts must be a multiple)", FP8T_REF(ep), "1"});
  k.push_back({"parallel.ranks_per_node", "ranks-per-node", 0, 65536, {}, "EP ranks per node for node-limited routing: each node's experts must be whole routing groups (model.n_group), so topk_group bounds the nodes a token reaches (0: one node)", FP8T_REF(ranks_per_node), "0"});
  k.push_back({"parallel.pp", "pp", 1, 65536, {}, "pipeline-parallel ranks (DualPipeV: 2 x pp stages, at least 2 x pp micro-batches per pipeline), e.g. mpirun -np 2 fp8train train --pp 2", FP8T_REF(pp), "1"});
  k.push_back({"parallel.dp_overlap", "dp-overlap", 0, 0, {"auto", "on", "off"}, "ZeRO-1: reduce-scatter each gradient bucket during the last micro-batch's backward, on a side queue (on), or all after it (off); auto (the default): on for GPU ranks (a side stream; measured faster), off for CPU ranks (the worker thread competes with the backward for the cores); the same numbers either way; plain DP only", FP8T_REF(dp_overlap), "auto"});
  k.push_back({"parallel.dp_bucket_mib", "dp-bucket-mib", 0.00048828125, 65536, {}, "ZeRO-1: MiB of FP32 gradients per rank in each reduce-scatter / all-gather bucket, rounded down to whole 128-element rows (larger: fewer, faster collectives; smaller: the overlap starts earlier); the shards follow the buckets, so the gradient norm's partial sums are grouped differently (last bits)", FP8T_REF(dp_bucket_mib), "16"});
  k.push_back({"parallel.timeout", "dist-timeout", 1, 1e6, {}, "seconds a rank waits in a collective before the run fails naming the rank and the collective (a rank died or hangs)", FP8T_REF(dist_timeout), "300"});
  return k;
}
// clang-format on
#undef FP8T_REF

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_keys();
  return keys;
}

}  // namespace detail

using detail::ConfigKey;
using detail::config_keys;
using detail::ValueRef;

namespace {

const ConfigKey* find_key(const std::string& key) {
  for (const ConfigKey& k : config_keys())
    if (k.key == key) return &k;
  return nullptr;
}

std::string range_text(const ConfigKey& k) {
  static TrainConfig probe;
  const ValueRef ref = k.ref(probe);
  if (std::holds_alternative<bool*>(ref)) return "true or false";
  if (std::holds_alternative<std::string*>(ref) && k.choices.empty()) return "text";
  if (!k.choices.empty()) return fmt::format("one of {}", fmt::join(k.choices, ", "));
  return fmt::format("in [{}, {}]", k.min, k.max);
}

// Sets the key's field from JSON, checking type and range; `where` names the origin for the message.
void set_value(TrainConfig& config, const ConfigKey& k, const nlohmann::json& v, const std::string& where) {
  const ValueRef ref = k.ref(config);
  auto check_range = [&](double x) {
    FP8T_CHECK(x >= k.min && x <= k.max, "{} '{}' must be {}, got {}", where, k.key,
               range_text(k), v.dump());
  };
  if (std::holds_alternative<int64_t*>(ref) || std::holds_alternative<int*>(ref)) {
    FP8T_CHECK(v.is_number_integer(), "{} '{}' must be an integer, got {}", where, k.key, v.dump());
    const double x = v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>()) : static_cast<double>(v.get<int64_t>());
    check_range(x);
    if (auto* p = std::get_if<int64_t*>(&ref)) **p = v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
    else *std::get<int*>(ref) = static_cast<int>(v.get<int64_t>());
  } else if (auto* d = std::get_if<double*>(&ref)) {
    FP8T_CHECK(v.is_number(), "{} '{}' must be a number, got {}", where, k.key, v.dump());
    const double x = v.get<double>();
    FP8T_CHECK(std::isfinite(x) || (k.max == std::numeric_limits<double>::infinity() && x > 0), "{} '{}' must be finite, got {}",
               where, k.key, v.dump());
    check_range(x);
    **d = x;
  } else if (auto* s = std::get_if<std::string*>(&ref)) {
    FP8T_CHECK(v.is_string(), "{} '{}' must be a string, got {}", where, k.key, v.dump());
    const std::string& text = v.get_ref<const std::string&>();
    FP8T_CHECK(k.choices.empty() || std::find(k.choices.begin(), k.choices.end(), text) != k.choices.end(),
               "{} '{}' must be {}, got \"{}\"", where, k.key, range_text(k), text);
    **s = text;
  } else {
    FP8T_CHECK(v.is_boolean(), "{} '{}' must be true or false, got {}", where, k.key, v.dump());
    *std::get<bool*>(ref) = v.get<bool>();
  }
}

nlohmann::json get_value(const TrainConfig& config, const ConfigKey& k) {
  const ValueRef ref = k.ref(const_cast<TrainConfig&>(config));
  return std::visit([](auto* p) { return nlohmann::json(*p); }, ref);
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>().empty() ? "(none)" : v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

}  // namespace

optim::LrSchedule TrainConfig::lr_schedule() const {
  optim::LrSchedule s;
  s.peak_lr = lr;
  s.final_lr = final_lr;
  s.warmup_steps = std::min(warmup_steps, steps);
  s.decay_start = std::max(s.warmup_steps, static_cast<int64_t>(std::llround(decay_start * static_cast<double>(steps))));
  s.decay_end = std::max(s.decay_start, static_cast<int64_t>(std::llround(decay_end * static_cast<double>(steps))));
  return s;
}

optim::BatchSizeSchedule TrainConfig::batch_schedule() const {
  return optim::BatchSizeSchedule{batch_warmup_start, batch_size, batch_warmup_steps};
}

namespace {
// A schedule key's text as a schedule over the run, its values in the range of the constant key it replaces.
optim::PiecewiseSchedule scalar_schedule(const std::string& text, const std::string& key,
                                         const std::string& constant_key, double constant, int64_t steps) {
  if (text.empty()) return optim::PiecewiseSchedule::constant(constant, steps);
  const ConfigKey* range = find_key(constant_key);
  try {
    return optim::parse_piecewise_schedule(text, steps, range->min, range->max);
  } catch (const Error& e) {
    FP8T_FAIL("config key '{}': {}", key, e.what());
  }
}
}  // namespace

optim::PiecewiseSchedule TrainConfig::mtp_lambda_by_step() const {
  return scalar_schedule(mtp_lambda_schedule, "train.mtp_lambda_schedule", "model.mtp_lambda", model.mtp_lambda, steps);
}

optim::PiecewiseSchedule TrainConfig::bias_update_speed_by_step() const {
  return scalar_schedule(bias_update_speed_schedule, "train.bias_update_speed_schedule", "model.bias_update_speed",
                         model.bias_update_speed, steps);
}

optim::AdamWConfig TrainConfig::adamw() const {
  optim::AdamWConfig a;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.weight_decay = weight_decay;
  a.moment_dtype = optim::parse_moment_dtype(resolved_moment_dtype(*this));
  return a;
}

void apply_config_json(TrainConfig& config, const nlohmann::json& json, const std::string& source,
                       ConfigSources* sources) {
  FP8T_CHECK(json.is_object(), "{}: the config must be a JSON object", source);
  for (auto section = json.begin(); section != json.end(); ++section) {
    if (section.key() == "preset") continue;
    const std::string& name = section.key();
    FP8T_CHECK(name == "model" || name == "data" || name == "train" || name == "optim" || name == "parallel",
               "{}: unknown config key '{}' (expected \"preset\" or a section: model, data, train, optim, parallel)",
               source, name);
    FP8T_CHECK(section.value().is_object(), "{}: config key '{}' must be an object of settings", source, name);
    for (auto item = section.value().begin(); item != section.value().end(); ++item) {
      const std::string key = section.key() + "." + item.key();
      const ConfigKey* k = find_key(key);
      FP8T_CHECK(k != nullptr, "{}: unknown config key '{}'", source, key);
      set_value(config, *k, item.value(), source + ": config key");
      if (sources) (*sources)[key] = source == "checkpoint" ? "checkpoint" : "file";
    }
  }
}

void apply_config_flag(TrainConfig& config, const std::string& flag, const std::string& text, ConfigSources* sources) {
  const ConfigKey* k = nullptr;
  for (const ConfigKey& c : config_keys())
    if (c.flag == flag) k = &c;
  FP8T_CHECK(k != nullptr, "unknown flag --{}", flag);
  const ValueRef ref = k->ref(config);
  nlohmann::json v;
  if (std::holds_alternative<int64_t*>(ref) || std::holds_alternative<int*>(ref)) {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(text.c_str(), &end, 10);
    FP8T_CHECK(!text.empty() && *end == '\0' && errno == 0, "flag --{} must be an integer, got '{}'", flag, text);
    v = static_cast<int64_t>(x);
  } else if (std::holds_alternative<double*>(ref)) {
    errno = 0;
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    FP8T_CHECK(!text.empty() && *end == '\0' && errno == 0, "flag --{} must be a number, got '{}'", flag, text);
    v = x;
  } else if (std::holds_alternative<bool*>(ref)) {
    FP8T_CHECK(text == "true" || text == "false" || text == "1" || text == "0",
               "flag --{} must be true or false, got '{}'", flag, text);
    v = text == "true" || text == "1";
  } else {
    v = text;
  }
  set_value(config, *k, v, fmt::format("flag --{}: config key", flag));
  if (sources) (*sources)[k->key] = "flag";
}

void validate_config(const TrainConfig& c) {
  // Each key's own range (a config built in code bypasses the parsers).
  for (const ConfigKey& k : config_keys()) set_value(const_cast<TrainConfig&>(c), k, get_value(c, k), "config key");
  FP8T_CHECK(c.final_lr <= c.lr, "config key 'optim.final_lr' ({}) must not exceed 'optim.lr' ({})", c.final_lr, c.lr);
  FP8T_CHECK(c.distill_top_k <= c.model.vocab_size,
             "config key 'train.distill_top_k' ({}) must not exceed 'model.vocab_size' ({})", c.distill_top_k,
             c.model.vocab_size);
  FP8T_CHECK(c.data_format != "sft" || !c.data_path.empty(),
             "config key 'data.format' is sft but 'data.path' is empty: give the JSONL file (e.g. --sft FILE)");
  if (c.ep > 1) {
    FP8T_CHECK(c.model.n_routed_experts % c.ep == 0,
               "config key 'parallel.ep' = {}: the {} routed experts (model.n_routed_experts) cannot be split evenly "
               "over {} expert-parallel ranks",
               c.ep, c.model.n_routed_experts, c.ep);
    dist::check_node_limited_routing(c.model.n_routed_experts, c.model.n_group, static_cast<int>(c.ep),
                                     static_cast<int>(c.ranks_per_node));
  }
  if (c.pp > 1) {
    FP8T_CHECK(c.model.n_layers >= 2 * c.pp,
               "config key 'parallel.pp' = {}: DualPipeV cuts the model into {} stages of at least one block each, "
               "but 'model.n_layers' is {}",
               c.pp, 2 * c.pp, c.model.n_layers);
    FP8T_CHECK(c.teacher.empty(),
               "config key 'parallel.pp' = {}: pipeline parallelism does not run a distillation teacher yet "
               "('train.teacher')",
               c.pp);
  }
  FP8T_CHECK(c.decay_start <= c.decay_end, "config key 'optim.decay_start' ({}) must not exceed 'optim.decay_end' ({})",
             c.decay_start, c.decay_end);
  FP8T_CHECK(c.micro_batch_size <= c.batch_size,
             "config key 'train.micro_batch_size' ({}) must not exceed 'train.batch_size' ({})", c.micro_batch_size,
             c.batch_size);
  FP8T_CHECK(c.batch_warmup_start <= c.batch_size,
             "config key 'optim.batch_warmup_start' ({}) must not exceed 'train.batch_size' ({})", c.batch_warmup_start,
             c.batch_size);
  c.lr_schedule().validate();
  recipe::RecipeConfig rc;
  try {  // the recipe layer parses the spec (name + ":key=value" overrides)
    rc = recipe::parse_recipe(c.recipe);
  } catch (const Error& e) {
    FP8T_FAIL("config key 'train.recipe': {}", e.what());
  }
  FP8T_CHECK(c.moment_dtype == "recipe" || !rc.moment_dtype_set || c.moment_dtype == rc.moment_dtype,
             "config key 'optim.moment_dtype' is '{}' but the recipe '{}' asks for moments={}: give one of them",
             c.moment_dtype, c.recipe, rc.moment_dtype);
  c.batch_schedule().validate();
  (void)c.mtp_lambda_by_step();
  (void)c.bias_update_speed_by_step();
  validate_model_config(c);
}

std::string resolved_moment_dtype(const TrainConfig& config) {
  if (config.moment_dtype != "recipe") return config.moment_dtype;
  return recipe::parse_recipe(config.recipe).moment_dtype;
}

void resolve_moment_dtype(TrainConfig& config, ConfigSources* sources) {
  if (config.moment_dtype != "recipe") return;
  config.moment_dtype = resolved_moment_dtype(config);
  if (sources) (*sources)["optim.moment_dtype"] = "recipe";
}

std::vector<std::string> config_warnings(const TrainConfig& c) {
  std::vector<std::string> out;
  if (c.warmup_steps >= c.steps)
    out.push_back(fmt::format(
        "the run is no longer than its learning-rate warmup ('train.steps' = {}, 'optim.warmup_steps' = {}): the "
        "learning rate rises for the whole run, ends at the peak learning rate ({:g}) and never decays; use fewer "
        "--warmup-steps or more --steps",
        c.steps, c.warmup_steps, c.lr));
  return out;
}

namespace {
const nlohmann::json* find_dotted(const nlohmann::json& config, const std::string& key) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return config.contains(key) ? &config[key] : nullptr;
  const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
  if (!config.contains(section) || !config[section].is_object() || !config[section].contains(name)) return nullptr;
  return &config[section][name];
}
}  // namespace

std::vector<std::string> config_differences(const nlohmann::json& a, const nlohmann::json& b,
                                            const std::vector<std::string>& ignore) {
  std::vector<std::pair<std::string, const char*>> keys{{"preset", nullptr}};
  for (const ConfigKey& k : config_keys()) keys.emplace_back(k.key, k.legacy);
  // A side without a key that has a legacy value computed with that value.
  auto same_as_legacy = [](const nlohmann::json* v, const char* legacy) {
    if (legacy == nullptr) return false;
    if (v->is_number()) return v->get<double>() == std::strtod(legacy, nullptr);  // a numeric key added later
    return v->is_string() && v->get<std::string>() == legacy;
  };
  std::vector<std::string> out;
  for (const auto& [key, legacy] : keys) {
    if (std::find(ignore.begin(), ignore.end(), key) != ignore.end()) continue;
    const nlohmann::json* x = find_dotted(a, key);
    const nlohmann::json* y = find_dotted(b, key);
    const bool same = x && y ? *x == *y : (x || y) && same_as_legacy(x ? x : y, legacy);
    if (!same) out.push_back(key);
  }
  return out;
}

std::string config_value_text(const nlohmann::json& config, const std::string& key) {
  const nlohmann::json* v = find_dotted(config, key);
  return v ? value_text(*v) : "(missing)";
}

bool config_key_changes_training(const std::string& key) {
  static const char* const kBookkeeping[] = {
      "train.out",          "train.save_every",    "train.keep_last",          "train.keep_every",
      "train.eval_every",   "train.eval_batches",  "train.final_eval_windows", "train.log_every",
      "train.health_every", "train.max_bad_steps", "parallel.timeout",         "preset",
      "parallel.dp_overlap"};
  for (const char* k : kBookkeeping)
    if (key == k) return false;
  if (key == "parallel.ranks_per_node") return false;  // a check of the layout; routing does not read it
  return key != "train.ema_decay";  // the weight EMA is read from the weights, never fed back into them
}

nlohmann::json config_to_json(const TrainConfig& config) {
  nlohmann::ordered_json out;
  out["preset"] = config.preset;
  for (const ConfigKey& k : config_keys()) {
    const size_t dot = k.key.find('.');
    out[k.key.substr(0, dot)][k.key.substr(dot + 1)] = get_value(config, k);
  }
  return nlohmann::json::parse(out.dump());  // keep the section order stable in the saved file
}

std::string config_table(const TrainConfig& config, const ConfigSources& sources) {
  size_t width = 6;
  for (const ConfigKey& k : config_keys()) width = std::max(width, k.key.size());
  std::string out = fmt::format("{:<{}}  {:<24}  {}\n", "key", width, "value", "set by");
  out += fmt::format("{:<{}}  {:<24}  {}\n", "preset", width, config.preset, "");
  for (const ConfigKey& k : config_keys()) {
    const auto it = sources.find(k.key);
    out += fmt::format("{:<{}}  {:<24}  {}\n", k.key, width, value_text(get_value(config, k)),
                       it == sources.end() ? "preset" : it->second);
  }
  return out;
}

std::vector<ConfigFlag> config_flags() {
  std::vector<ConfigFlag> flags;
  for (const ConfigKey& k : config_keys())
  {
    static TrainConfig probe;
    const ValueRef ref = k.ref(probe);
    const char* type = std::holds_alternative<double*>(ref)        ? "NUMBER"
                       : std::holds_alternative<std::string*>(ref) ? "TEXT"
                       : std::holds_alternative<bool*>(ref)        ? "BOOL"
                                                                   : "INT";
    // The default is the small preset's (the one `train` uses without --preset), with any preset that differs.
    const std::string value = value_text(get_value(preset_config("small"), k));
    std::vector<std::string> others;
    for (const std::string& p : preset_names()) {
      if (p == "small") continue;
      const std::string v = value_text(get_value(preset_config(p), k));
      if (v != value) others.push_back(p + ": " + v);
    }
    const std::string defaults = others.empty() ? "default " + value
                                                : fmt::format("default {} (small preset; {})", value, fmt::join(others, ", "));
    flags.push_back({k.flag, k.key, fmt::format("{} [{}; {}; {}]", k.help, k.key, range_text(k), defaults), type});
  }
  return flags;
}

nlohmann::json read_config_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FP8T_FAIL("config file '{}' is not valid JSON: {}", path, e.what());
  }
}

}  // namespace fp8train::train
