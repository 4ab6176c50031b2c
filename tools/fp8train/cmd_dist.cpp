// `fp8train dist schedule --pp P --micro-batches M [--f 1 --b 2 --w 1 --fb 3]`: the DualPipeV pipeline schedule
// (src/dist/dualpipe.h) on P ranks for M micro-batches, simulated with the given chunk times (whole time units):
// prints each rank's timeline (one cell per time unit), its busy time and bubble (idle time within the step), and
// DeepSeek's bubble formula (PP/2−1)(F&B+B−3W) for comparison, then one JSON line with the same numbers.
// `mpirun -np P fp8train dist pipeline [--preset tiny] [--layers L] [--micro-batches M] ...`: one DualPipeV training
// step of fp8train's model (CPU ranks; blocks from the preset, L of them, default 2P) over the P ranks launched
// (train::ModelStages), checked against the same micro-batches run one after another on each rank
// (forward_backward): prints the loss both ways, the largest gradient difference, each rank's stages, bytes sent and
// received (the communicator's counters, against the expected count) and time, then one JSON line (rank 0).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "dist/bootstrap.h"
#include "dist/dualpipe.h"
#include "dist/pipeline_executor.h"
#include "model/model.h"
#include "train/config.h"
#include "train/pipeline_model.h"

namespace fp8train::cli {
namespace {

struct ScheduleOptions {
  int pp = 4, micro_batches = 10;
  int f = 1, b = 2, w = 1, fb = -1;
};

void run_schedule(const ScheduleOptions& o) {
  dist::ChunkTimes times;
  times.f = o.f;
  times.b = o.b;
  times.w = o.w;
  times.fb = o.fb < 0 ? -1.0 : o.fb;
  times.validate();
  const dist::PipeSchedule schedule = dist::dualpipev_schedule(o.pp, o.micro_batches);
  const dist::PipeSimulation sim = dist::simulate(schedule, times);
  const int stages = 2 * o.pp;
  std::printf("DualPipeV: %d ranks, %d stages (rank r holds stages r and %d-r), %d micro-batches\n", o.pp, stages,
              stages - 1, o.micro_batches);
  std::printf("chunk times: F=%g  B=%g (full backward: input %g + weights W=%g)  F&B=%g (overlapped pair)\n", times.f,
              times.b, times.b - times.w, times.w, times.overlapped());
  std::printf(
      "cells: one per time unit. F forward, B backward for input, W backward for weights; upper case stage r\n"
      "(going down), lower case stage %d-r (coming back); an F&B pair shows its forward's letter, then its full\n"
      "backward's; '.' idle. Second line: the micro-batch of each cell (0-9, then a-z).\n\n",
      stages - 1);
  std::fputs(dist::render_timeline(sim, times).c_str(), stdout);
  const double formula = dist::dualpipev_bubble_formula(stages, times);
  std::printf("\nmakespan %g\n", sim.makespan);
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < o.pp; ++r) {
    const double bubble = sim.bubble[static_cast<size_t>(r)];
    std::printf("rank %-3d busy %-6g bubble %g\n", r, sim.busy[static_cast<size_t>(r)], bubble);
    ranks.push_back({{"rank", r}, {"busy", sim.busy[static_cast<size_t>(r)]}, {"bubble", bubble}});
  }
  std::printf(
      "bubble (largest of the ranks) %g; formula (PP/2-1)(F&B+B-3W) with PP = %d stages = %g; %s\n", sim.max_bubble(),
      stages, formula,
      sim.max_bubble() == formula ? "equal" : fmt::format("differs by {:g}", sim.max_bubble() - formula).c_str());
  nlohmann::json j = {{"pp", o.pp},
                      {"micro_batches", o.micro_batches},
                      {"f", times.f},
                      {"b", times.b},
                      {"w", times.w},
                      {"fb", times.overlapped()},
                      {"makespan", sim.makespan},
                      {"bubble_max", sim.max_bubble()},
                      {"bubble_formula", formula},
                      {"ranks", ranks}};
  std::printf("%s\n", j.dump().c_str());
}

struct PipelineOptions {
  std::string preset = "tiny", recipe = "fp32";
  int layers = 0;         // 0: 2 × ranks
  int micro_batches = 0;  // 0: 2 × ranks
  int64_t micro_batch_size = 2, seq_len = 32;
  uint64_t seed = 1;
  int threads = 1;
  bool check = true;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The rank whose stages use parameter `name`: a block's by its stage; the embedding, head, final norm and MTP
// are rank 0's (stages 0 and 2P−1).
int owner_rank(const std::string& name, const model::DeepSeekV3Model& m, int ranks) {
  if (name.rfind("layers.", 0) != 0) return 0;
  const int block = std::stoi(name.substr(7));
  for (int s = 0; s < 2 * ranks; ++s) {
    const auto [first, last] = m.stage_blocks(s, 2 * ranks);
    if (block >= first && block < last) return dist::dualpipev_rank(s, ranks);
  }
  return 0;
}

void run_pipeline_step(const PipelineOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  start_device("cpu");
  const std::unique_ptr<dist::Communicator> world = dist::init_world("cpu", dist::CommOptions{});
  const int P = world->size(), r = world->rank();
  FP8T_CHECK(P >= 2,
             "dist pipeline runs one DualPipeV step over the ranks it is launched on, so it needs at least 2 (e.g. "
             "mpirun -np 4 fp8train dist pipeline); got {}",
             P);
  train::TrainConfig tc = train::preset_config(o.preset);
  tc.model.n_layers = o.layers > 0 ? o.layers : 2 * P;
  tc.model.n_dense_layers = std::min(tc.model.n_dense_layers, tc.model.n_layers);
  train::validate_model_config(tc);
  FP8T_CHECK(tc.model.n_layers >= 2 * P,
             "{} ranks cut the model into {} stages of at least one block each, but --layers is {}", P, 2 * P,
             tc.model.n_layers);
  const int M = o.micro_batches > 0 ? o.micro_batches : 2 * P;
  const dist::PipeSchedule schedule = dist::dualpipev_schedule(P, M);
  const model::ModelOptions mo{.dtype = DType::F32, .seed = o.seed, .recipe = o.recipe};

  // The micro-batches: random tokens, the same on every rank; targets are the next tokens.
  std::vector<train::ModelStages::MicroBatch> batches;
  const int64_t n = o.micro_batch_size * o.seq_len;
  for (int m = 0; m < M; ++m) {
    std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(m));
    std::vector<int32_t> in(static_cast<size_t>(n)), tg(static_cast<size_t>(n));
    for (auto& t : in) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(tc.model.vocab_size));
    for (int64_t i = 0; i < n; ++i)
      tg[static_cast<size_t>(i)] = (i + 1) % o.seq_len == 0 ? -1 : in[static_cast<size_t>(i + 1)];
    batches.push_back({Tensor::from_vector(in, {n}), Tensor::from_vector(tg, {n}), o.micro_batch_size});
  }
  const double scale = 1.0 / M;

  model::DeepSeekV3Model piped(tc.model, mo);
  piped.zero_grad();
  train::ModelStages stages(piped, r, P, batches, scale);
  const ExecCtx& ctx = ExecCtx::cpu();
  world->barrier();
  world->reset_stats();
  const auto t0 = std::chrono::steady_clock::now();
  dist::run_pipeline(schedule, *world, stages, ctx);
  const double pipe_seconds = seconds_since(t0);
  const dist::CommStats traffic = world->stats();
  std::vector<double> totals;
  for (const model::LossBreakdown& l : stages.losses()) totals.push_back(l.total);
  totals = dist::sum_in_rank_order(*world, totals, ctx);
  double loss = 0;
  for (double t : totals) loss += t * scale;

  // The reference: the same micro-batches one after another through the whole model, on every rank.
  double ref_loss = 0, ref_seconds = 0, diff = 0, largest = 0;
  if (o.check) {
    model::DeepSeekV3Model ref(tc.model, mo);
    ref.zero_grad();
    const auto t1 = std::chrono::steady_clock::now();
    for (const auto& b : batches) ref_loss += scale * ref.forward_backward(b.inputs, b.targets, b.batch, scale).total;
    ref_seconds = seconds_since(t1);
    for (model::Parameter* p : ref.parameters().trainable()) {
      if (owner_rank(p->name, ref, P) != r) continue;
      const std::vector<float> want = p->grad.to_vector<float>();
      const std::vector<float> got = piped.parameters().get(p->name).grad.to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
        largest = std::max(largest, std::abs(static_cast<double>(want[i])));
      }
    }
    const Tensor m = Tensor::from_vector(std::vector<double>{diff, largest}, {2});
    world->all_reduce(m, m, dist::ReduceOp::Max, ctx);
    diff = m.to_vector<double>()[0];
    largest = m.to_vector<double>()[1];
  }
  // Every rank's traffic and time, to rank 0.
  // (+ the Wgrad GEMMs the rank's W steps ran: B queues them, W runs them.)
  const Tensor mine = Tensor::from_vector(
      std::vector<double>{static_cast<double>(traffic.bytes_sent), static_cast<double>(traffic.bytes_received),
                          pipe_seconds, static_cast<double>(stages.wgrad_gemms_in_w())},
      {4});
  const Tensor all = Tensor::zeros({4 * static_cast<int64_t>(P)}, DType::F64);
  world->all_gather(mine, all, ctx);
  if (r != 0) return;

  const std::vector<double> a = all.to_vector<double>();
  const int64_t tensor_bytes = n * tc.model.hidden_size * static_cast<int64_t>(dtype_size(piped.compute_dtype()));
  std::printf(
      "DualPipeV step: %d ranks, %d stages of a %lld-block %s model (hidden %lld, recipe %s), %d micro-batches of %lld "
      "x %lld tokens\n",
      P, 2 * P, static_cast<long long>(tc.model.n_layers), o.preset.c_str(),
      static_cast<long long>(tc.model.hidden_size), o.recipe.c_str(), M, static_cast<long long>(o.micro_batch_size),
      static_cast<long long>(o.seq_len));
  std::printf("%-5s %-28s %14s %14s %14s %9s %11s\n", "rank", "stages (blocks)", "bytes sent", "received", "expected",
              "seconds", "Wgrad in W");
  nlohmann::json ranks = nlohmann::json::array();
  for (int q = 0; q < P; ++q) {
    std::string text;
    for (int c = 0; c < 2; ++c) {
      const int s = dist::dualpipev_stage(q, c, P);
      const auto [first, last] = piped.stage_blocks(s, 2 * P);
      text += fmt::format("{}{} ({}{})", c ? ", " : "", s, first, last - first > 1 ? fmt::format("-{}", last - 1) : "");
    }
    const int crossings = (q < P - 1 ? 1 : 0) + (q > 0 ? 1 : 0);
    const int64_t expected = 2 * crossings * M * tensor_bytes;
    const double sent = a[static_cast<size_t>(4 * q)], received = a[static_cast<size_t>(4 * q + 1)],
                 secs = a[static_cast<size_t>(4 * q + 2)], in_w = a[static_cast<size_t>(4 * q + 3)];
    std::printf("%-5d %-28s %14.0f %14.0f %14lld %9.3f %11.0f\n", q, text.c_str(), sent, received,
                static_cast<long long>(expected), secs, in_w);
    ranks.push_back({{"rank", q},
                     {"stages", text},
                     {"bytes_sent", sent},
                     {"bytes_received", received},
                     {"bytes_expected", expected},
                     {"seconds", secs},
                     {"wgrad_gemms_in_w", in_w}});
  }
  nlohmann::json j = {
      {"pp", P}, {"micro_batches", M}, {"layers", tc.model.n_layers}, {"loss_pipeline", loss}, {"ranks", ranks}};
  std::printf("loss: pipeline %.9g", loss);
  if (o.check) {
    std::printf(" | micro-batches one after another on one rank %.9g (difference %.3g)\n", ref_loss, loss - ref_loss);
    std::printf("gradients: largest difference %.3g, largest gradient %.3g (relative %.3g)\n", diff, largest,
                largest > 0 ? diff / largest : 0.0);
    double slowest = 0;
    for (int q = 0; q < P; ++q) slowest = std::max(slowest, a[static_cast<size_t>(4 * q + 2)]);
    std::printf("time: pipeline step %.3f s (slowest rank) | one rank %.3f s\n", slowest, ref_seconds);
    j["loss_sequential"] = ref_loss;
    j["grad_max_diff"] = diff;
    j["grad_max"] = largest;
    j["seconds_sequential"] = ref_seconds;
  } else {
    std::printf("\n");
  }
  std::printf("%s\n", j.dump().c_str());
}

void add_dist(CLI::App& root) {
  auto* dist = root.add_subcommand("dist", "Distributed training tools (pipeline schedules)");
  dist->require_subcommand(1);
  auto* cmd = dist->add_subcommand(
      "schedule", "Print the DualPipeV pipeline schedule per rank and its bubble against DeepSeek's formula");
  static ScheduleOptions o;
  cmd->add_option("--pp", o.pp, "Pipeline ranks (the model is cut into 2 x PP stages)")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  cmd->add_option("--micro-batches", o.micro_batches, "Micro-batches per step (at least 2 x PP)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--f", o.f, "Time of a forward chunk (whole time units)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--b", o.b, "Time of a full backward chunk: input and weights (> W)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--w", o.w, "Time of the weights part of a backward chunk")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--fb", o.fb, "Time of an overlapped forward + full backward pair (default F + B)")
      ->check(CLI::Range(1, 2000));
  cmd->callback([] { run_schedule(o); });

  auto* pipe = dist->add_subcommand(
      "pipeline",
      "One DualPipeV training step of the model over the ranks launched (mpirun -np P), checked against one rank");
  static PipelineOptions po;
  pipe->add_option("--preset", po.preset, "Model dimensions from this preset (tiny, small, base)")
      ->capture_default_str();
  pipe->add_option("--layers", po.layers, "Blocks (default 2 x ranks: one per stage)")->check(CLI::Range(1, 4096));
  pipe->add_option("--micro-batches", po.micro_batches, "Micro-batches (default and least: 2 x ranks)")
      ->check(CLI::Range(1, 100000));
  pipe->add_option("--micro-batch-size", po.micro_batch_size, "Sequences per micro-batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  pipe->add_option("--seq-len", po.seq_len, "Tokens per sequence")->capture_default_str()->check(CLI::Range(2, 65536));
  pipe->add_option("--recipe", po.recipe, "Precision recipe (fp32, bf16, fp8-deepseek, ...)")->capture_default_str();
  pipe->add_option("--seed", po.seed, "Weights and tokens seed")->capture_default_str();
  pipe->add_option("--threads", po.threads, "CPU threads per rank")->capture_default_str()->check(CLI::Range(1, 1024));
  pipe->add_flag("!--no-check", po.check, "Skip the one-rank reference (its loss, gradients and time)");
  pipe->callback([] { run_pipeline_step(po); });
}

const bool registered = register_command("dist", 70, &add_dist);

}  // namespace
}  // namespace fp8train::cli
