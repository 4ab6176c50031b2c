// `fp8train dist schedule --pp P --micro-batches M [--f 1 --b 2 --w 1 --fb 3]`: the DualPipeV pipeline schedule
// (src/dist/dualpipe.h) on P ranks for M micro-batches, simulated with the given chunk times (whole time units):
// prints each rank's timeline (one cell per time unit), its busy time and bubble (idle time within the step), and
// DeepSeek's bubble formula (PP/2−1)(F&B+B−3W) for comparison, then one JSON line with the same numbers.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "dist/dualpipe.h"

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
}

const bool registered = register_command("dist", 70, &add_dist);

}  // namespace
}  // namespace fp8train::cli
