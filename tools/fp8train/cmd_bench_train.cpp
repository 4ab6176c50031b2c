// `fp8train bench train --config FILE`: whole training steps of a model config on one device, timed the way the
// PyTorch reference (../shared/bench/torch_moe_reference.py) times its own: random tokens, every micro-batch's
// forward + backward (gradient accumulation), gradient clipping and the AdamW step, the device synchronized
// around the timed steps. Reports tokens/s, model TFLOP/s and MFU by ModelConfig::training_flops (the
// reference's FLOP convention), and peak memory per category (tensor/allocator.h). With --profile, one more
// step runs with every op synchronized (OpProfile) and the step time is broken down by op family: GEMM,
// attention, MoE routing/permute, norms/elementwise, loss, optimizer, quantize, and what no op accounts for
// (host work and synchronization).
// --baseline RECIPE (implies --profile): the baseline recipe runs first, on the same config, tokens and device,
// then the recipe; a last JSON line compares them as the FP8 issue asks: the speed-up, and its ceiling
// 1 / (f_rest + f_gemm / r) -- f_gemm the baseline step's share of Linear GEMM time, r the baseline / recipe ratio of
// that time measured in the two profiled steps (the GEMMs both recipes run alike, e.g. the output head, are left
// out of it) -- with the share of the speed-up's room reached, and the recipe step's quantize share.
// Output: one JSON line per run (and the comparison) on stdout, a short table on stderr. Runs on the CPU too
// (small configs; CI checks the output's fields there).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tensor/backend.h"
#include "train/config.h"
#include "train/model_adapter.h"
#include "train/rng.h"

namespace fp8train::cli {
namespace {

using namespace fp8train::train;
using Clock = std::chrono::steady_clock;

struct BenchTrainOptions {
  std::string config_file, recipe = "bf16", device = "auto", baseline;
  int64_t steps = 3, warmup = 1, seed = 1;
  double peak_tflops = 0;  // 0: the device's dense BF16 peak when known
  bool profile = false;
  bool profile_shapes = false;  // the quantization ops per shape in the profiled step's "ops"
};

// The op family of an op-table entry (ops/op_table.h names).
std::string op_family(const std::string& op) {
  if (op.rfind("gemm", 0) == 0 || op.rfind("scaled_gemm", 0) == 0) return "gemm";
  if (op.rfind("attention", 0) == 0) return "attention";
  if (op.rfind("router", 0) == 0 || op.rfind("balance_loss", 0) == 0 || op.rfind("moe_", 0) == 0)
    return "moe_routing_permute";
  if (op == "cross_entropy") return "loss";
  if (op.rfind("adamw", 0) == 0 || op.rfind("sum_squares", 0) == 0) return "optimizer";
  if (op.rfind("quantize", 0) == 0 || op.rfind("dequantize", 0) == 0 || op.rfind("with_colwise", 0) == 0 ||
      op.rfind("block_scales_as_row_tiles", 0) == 0)
    return "quantize";
  return "norms_elementwise";  // rmsnorm, rope, swiglu, embedding, axpby, fill
}

// Dense BF16 tensor-core peak (TFLOP/s, no sparsity) of the GPUs the targets name; 0 when unknown.
double known_peak_tflops(const std::string& device) {
  if (device.find("H100") != std::string::npos || device.find("H200") != std::string::npos) return 989.0;
  return 0.0;
}

// One recipe's timed steps (and profiled step): the JSON line the command prints for it.
nlohmann::ordered_json bench_recipe(const BenchTrainOptions& o, const std::string& recipe, bool profile) {
  TrainConfig config = preset_config("small");
  apply_config_json(config, read_config_file(o.config_file), fmt::format("config file '{}'", o.config_file), nullptr);
  config.recipe = recipe;
  validate_config(config);
  resolve_moment_dtype(config, nullptr);
  const std::string where = device_description();

  DeepSeekTrainable model(config.model, derive_seed(static_cast<uint64_t>(o.seed), 0), config.recipe);
  const optim::ParamArenas& params = model.parameters();
  const ExecCtx ctx = ExecCtx::on(params.values.device());
  optim::AdamW optimizer(config.adamw(), params);
  const int64_t seq = config.seq_len, batch = config.batch_size, micro = config.micro_batch();
  const int64_t vocab = model.vocab_size();
  std::mt19937_64 gen(static_cast<uint64_t>(o.seed));
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<Token> tokens(static_cast<size_t>(micro * (seq + 1)));
  for (Token& t : tokens) t = static_cast<Token>(token(gen));
  std::vector<Token> inputs(static_cast<size_t>(micro * seq)), targets(inputs.size());
  for (int64_t r = 0; r < micro; ++r)
    for (int64_t t = 0; t < seq; ++t) {
      inputs[static_cast<size_t>(r * seq + t)] = tokens[static_cast<size_t>(r * (seq + 1) + t)];
      targets[static_cast<size_t>(r * seq + t)] = tokens[static_cast<size_t>(r * (seq + 1) + t + 1)];
    }

  double last_loss = 0;
  int64_t step = 0;
  auto one_step = [&](const ExecCtx& octx) {  // octx: the optimizer's context (profiled or not)
    model.begin_step(step++, false);
    optim::zero_grads(params);
    double loss = 0;
    for (int64_t done = 0; done < batch; done += micro) {
      const int64_t rows = std::min(micro, batch - done);
      const double share = static_cast<double>(rows) / static_cast<double>(batch);
      loss += share * model.forward_backward(inputs.data(), targets.data(), rows, seq, share).loss.total;
    }
    optim::clip_grad_norm(octx, params, config.grad_clip);
    optimizer.step(octx, params, config.lr);
    model.after_step();
    last_loss = loss;
  };
  Allocator& allocator = backend(params.values.device()).allocator();
  for (int64_t i = 0; i < o.warmup; ++i) one_step(ctx);
  ctx.synchronize();
  allocator.reset_peaks();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < o.steps; ++i) one_step(ctx);
  ctx.synchronize();
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(o.steps);
  const MemoryStats mem = allocator.stats();

  const model::ModelConfig::Flops flops = config.model.training_flops(seq);
  const double tokens_per_s = static_cast<double>(batch * seq) / step_s;
  const double tflops = tokens_per_s * flops.per_token / 1e12;
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : known_peak_tflops(where);
  nlohmann::ordered_json j;
  j["bench"] = "train";
  j["config"] = o.config_file;
  j["recipe"] = config.recipe;
  j["device"] = where;
  j["parameters"] = model.parameter_count();
  j["active_params"] = flops.active_params;
  j["tokens_per_step"] = batch * seq;
  j["micro_batch"] = micro;
  j["steps"] = o.steps;
  j["step_ms"] = step_s * 1e3;
  j["tokens_per_s"] = tokens_per_s;
  j["model_tflops"] = tflops;
  j["mfu"] = peak > 0 ? nlohmann::ordered_json(tflops / peak) : nlohmann::ordered_json(nullptr);
  j["peak_tflops"] = peak > 0 ? nlohmann::ordered_json(peak) : nlohmann::ordered_json(nullptr);
  j["loss"] = last_loss;
  nlohmann::ordered_json memory;
  for (int c = 0; c < kNumMemCategories; ++c)
    memory[std::string(mem_category_name(static_cast<MemCategory>(c)))] = mem.peak[static_cast<size_t>(c)];
  memory["total"] = mem.total_peak;
  j["peak_memory_bytes"] = memory;
  nlohmann::ordered_json at_peak;  // the categories' own peaks fall at different moments; this is the total's
  for (int c = 0; c < kNumMemCategories; ++c)
    at_peak[std::string(mem_category_name(static_cast<MemCategory>(c)))] = mem.at_total_peak[static_cast<size_t>(c)];
  j["memory_at_peak_bytes"] = at_peak;

  if (profile) {
    OpProfile profile(/*synchronizing=*/true, o.profile_shapes);
    model.model().set_op_profile(&profile);
    ExecCtx profiled = ctx;
    profiled.profile = &profile;
    ctx.synchronize();
    // The profiled step also says which workspace blocks its peak holds (tracking them costs time per allocation,
    // which this step's synchronized timing does not mind).
    allocator.reset_peaks();
    allocator.track_workspace_blocks(true);
    const auto p0 = Clock::now();
    one_step(profiled);
    ctx.synchronize();
    const double profiled_s = std::chrono::duration<double>(Clock::now() - p0).count();
    const MemoryStats pmem = allocator.stats();
    allocator.track_workspace_blocks(false);
    j["profiled_step_peak_bytes"] = pmem.total_peak;
    j["largest_workspace_at_peak_bytes"] = pmem.largest_workspace_at_peak;
    model.model().set_op_profile(nullptr);
    std::map<std::string, double> families;
    nlohmann::ordered_json ops;
    double in_ops = 0;
    for (const auto& [op, e] : profile.entries()) {
      families[op_family(op)] += e.seconds;
      in_ops += e.seconds;
      ops[op] = {{"ms", e.seconds * 1e3}, {"calls", e.calls}};
    }
    nlohmann::ordered_json breakdown;
    for (const auto& [family, s] : families) breakdown[family] = s * 1e3;
    breakdown["outside_ops"] = std::max(0.0, profiled_s - in_ops) * 1e3;
    j["profiled_step_ms"] = profiled_s * 1e3;
    j["breakdown_ms"] = breakdown;
    j["ops"] = ops;
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "bench train: %s, recipe %s, %s\n", o.config_file.c_str(), config.recipe.c_str(), where.c_str());
  std::fprintf(stderr, "  %.1f ms/step, %.0f tokens/s, %.1f model TFLOP/s%s, peak memory %.3f GiB\n", step_s * 1e3,
               tokens_per_s, tflops, peak > 0 ? fmt::format(" (MFU {:.1f} %)", 100 * tflops / peak).c_str() : "",
               static_cast<double>(mem.total_peak) / (1 << 30));
  std::string made_of;
  for (int c = 0; c < kNumMemCategories; ++c)
    made_of += fmt::format("{}{} {:.2f}", c ? ", " : "", mem_category_name(static_cast<MemCategory>(c)),
                           static_cast<double>(mem.at_total_peak[static_cast<size_t>(c)]) / (1 << 30));
  std::fprintf(stderr, "  at the peak (GiB): %s\n", made_of.c_str());
  if (profile) {
    std::string blocks;
    for (const auto& b : j["largest_workspace_at_peak_bytes"])
      if (b.get<int64_t>() > 0) blocks += fmt::format(" {:.1f}", b.get<double>() / (1 << 20));
    std::fprintf(stderr, "  profiled step: peak %.3f GiB, largest workspace blocks at it (MiB):%s\n",
                 j["profiled_step_peak_bytes"].get<double>() / (1 << 30), blocks.c_str());
  }
  if (profile)
    for (const auto& [family, ms] : j["breakdown_ms"].items())
      std::fprintf(stderr, "  %-22s %9.2f ms\n", family.c_str(), ms.get<double>());
  return j;
}

// Milliseconds of the profiled step's ops whose names start with `prefix`.
double ops_ms(const nlohmann::ordered_json& run, const std::string& prefix) {
  double ms = 0;
  for (const auto& [op, e] : run.at("ops").items())
    if (op.rfind(prefix, 0) == 0) ms += e.at("ms").get<double>();
  return ms;
}

// The comparison of a recipe's run with its baseline's (both profiled).
nlohmann::ordered_json compare_runs(const nlohmann::ordered_json& base, const nlohmann::ordered_json& run) {
  // "gemm*" ops are plain (BF16 / FP32) GEMMs, "scaled_gemm*" the quantized ones. The plain GEMMs both runs have
  // (the output head, the router) are not the Linear GEMMs a recipe changes.
  const double plain_base = ops_ms(base, "gemm"), plain_run = ops_ms(run, "gemm");
  const double kept = std::min(plain_base, plain_run);
  const double linear_base = plain_base + ops_ms(base, "scaled_gemm") - kept;
  const double linear_run = plain_run + ops_ms(run, "scaled_gemm") - kept;
  const double base_ms = base.at("profiled_step_ms").get<double>(), run_ms = run.at("profiled_step_ms").get<double>();
  const double speedup = run.at("tokens_per_s").get<double>() / base.at("tokens_per_s").get<double>();
  nlohmann::ordered_json c;
  c["compare"] = run.at("recipe");
  c["baseline"] = base.at("recipe");
  c["speedup"] = speedup;
  c["linear_gemm_ms_baseline"] = linear_base;
  c["linear_gemm_ms"] = linear_run;
  c["quantize_share"] =
      run.at("breakdown_ms").contains("quantize") ? run.at("breakdown_ms").at("quantize").get<double>() / run_ms : 0.0;
  if (linear_run > 0 && linear_base > 0) {
    const double r = linear_base / linear_run, f = linear_base / base_ms;
    const double ceiling = 1.0 / ((1.0 - f) + f / r);
    c["gemm_ratio"] = r;
    c["gemm_share_baseline"] = f;
    c["ceiling"] = ceiling;
    // Of the room the ceiling leaves (ceiling - 1), how much the speed-up took; negative when slower.
    c["gain_of_ceiling"] =
        ceiling != 1.0 ? nlohmann::ordered_json((speedup - 1.0) / (ceiling - 1.0)) : nlohmann::ordered_json(nullptr);
  }
  return c;
}

void bench_train(const BenchTrainOptions& o) {
  FP8T_CHECK(o.steps >= 1 && o.warmup >= 0, "bench train: --steps must be >= 1 and --warmup >= 0");
  start_device(o.device);
  if (o.baseline.empty()) {
    bench_recipe(o, o.recipe, o.profile || o.profile_shapes);
    return;
  }
  const nlohmann::ordered_json base = bench_recipe(o, o.baseline, true);
  const nlohmann::ordered_json run = bench_recipe(o, o.recipe, true);
  const nlohmann::ordered_json c = compare_runs(base, run);
  std::printf("%s\n", c.dump().c_str());
  std::fprintf(stderr, "%s vs %s: %.3fx", o.recipe.c_str(), o.baseline.c_str(), c["speedup"].get<double>());
  if (c.contains("ceiling"))
    std::fprintf(stderr, ", ceiling %.3fx (Linear GEMMs %.1f -> %.1f ms, r %.3f, %.1f %% of the baseline step)",
                 c["ceiling"].get<double>(), c["linear_gemm_ms_baseline"].get<double>(),
                 c["linear_gemm_ms"].get<double>(), c["gemm_ratio"].get<double>(),
                 100 * c["gemm_share_baseline"].get<double>());
  std::fprintf(stderr, ", quantize %.1f %% of the step\n", 100 * c["quantize_share"].get<double>());
}

void add_bench_train(CLI::App& root) {
  CLI::App* bench = root.get_subcommand("bench");
  static BenchTrainOptions o;
  auto* t = bench->add_subcommand("train",
                                  "whole training steps of a model config: tokens/s, model TFLOP/s, MFU, "
                                  "peak memory per category, and (--profile) time per op family");
  t->add_option("--config", o.config_file, "JSON config (model and train keys, e.g. ../shared/bench/moe_bench.json)")
      ->required();
  t->add_option("--recipe", o.recipe, "precision recipe")->capture_default_str();
  t->add_option("--device", o.device, "cpu, cuda or auto")->capture_default_str();
  t->add_option("--steps", o.steps, "timed optimizer steps")->capture_default_str();
  t->add_option("--warmup", o.warmup, "untimed optimizer steps first")->capture_default_str();
  t->add_option("--seed", o.seed, "seed of the weights and the random tokens")->capture_default_str();
  t->add_option("--peak-tflops", o.peak_tflops, "the device's peak for MFU (default: 989 on H100/H200)");
  t->add_flag("--profile", o.profile, "one more step with every op synchronized: time per op family");
  t->add_flag("--profile-shapes", o.profile_shapes,
              "--profile, with the quantization ops timed per shape and outputs (\"quantize 8192x2048 both\")");
  t->add_option("--baseline", o.baseline,
                "run this recipe first and compare (speed-up, its ceiling from the Linear GEMMs' time ratio, the "
                "quantize share); implies --profile");
  t->callback([] { bench_train(o); });
}

const bool registered = register_command("bench train", 91, &add_bench_train);

}  // namespace
}  // namespace fp8train::cli
