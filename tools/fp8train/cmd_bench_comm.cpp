// `fp8train bench comm`: the bandwidth of dist::Communicator's collectives between the ranks it is launched on
// (mpirun / srun / the torchrun-style environment; NCCL between GPU ranks, MPI between CPU ranks; one rank alone
// moves nothing), by nccl-tests' conventions:
//   size   all_reduce: the tensor; reduce_scatter: the input (all ranks' blocks); all_gather: the output;
//          all_to_all: what one rank sends (its blocks for every rank, its own included)
//   time   per size, the median over --repeats of the slowest rank's time (a barrier, the call, the device
//          synchronized), so a rank that waits counts
//   algbw  size / time;  busbw  algbw × the collective's bus factor: 2(n−1)/n for all_reduce, (n−1)/n for the
//          others — what each link carries, comparable across rank counts and with the hardware's peak
// and the expert-parallel question the FP8 dispatch answers: at one MoE layer's dispatch shape (--tokens per rank,
// --hidden, --top-k; each token's k copies spread evenly over the ranks), the all_to_all of FP8 codes plus their
// 1×128 FP32 scales (one fused exchange, as expert_parallel.cpp sends them; "fp8-2x": the same bytes as two
// collectives) against the all_to_all of BF16 rows, timed
// alike: tokens dispatched per second each, and their ratio.
// Output: one JSON line per measurement on rank 0's stdout, a table on its stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "tensor/backend.h"

namespace fp8train::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchCommOptions {
  std::string device = "auto";
  std::vector<int64_t> sizes;  // bytes; empty: by device
  std::vector<std::string> collectives = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"};
  int repeats = 10, warmup = 2;
  int64_t tokens = 8192, hidden = 2048, top_k = 6;  // the EP dispatch shape (moe_bench's micro-batch)
  double timeout = 300;
};

// The median over repeats of the slowest rank's seconds for `call`.
template <class Call>
double time_collective(dist::Communicator& comm, const ExecCtx& ctx, Device device, const BenchCommOptions& o,
                       Call&& call) {
  std::vector<double> seconds;
  for (int i = 0; i < o.warmup + o.repeats; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    call();
    backend(device).synchronize();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= o.warmup) seconds.push_back(s);
  }
  // Slowest rank per repeat: every rank's times, the maximum element-wise.
  Tensor t = Tensor::from_vector(seconds, {static_cast<int64_t>(seconds.size())}, MemCategory::Workspace, Device::cpu())
                 .to(device);
  comm.all_reduce(t, t, dist::ReduceOp::Max, ctx);
  std::vector<double> slowest = t.to(Device::cpu()).to_vector<double>();
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2];
}

double bus_factor(const std::string& collective, int n) {
  if (n <= 1) return 0.0;
  const double f = static_cast<double>(n - 1) / n;
  return collective == "all_reduce" ? 2.0 * f : f;
}

// One collective at one size (bytes rounded down to whole elements of every rank's block).
double run_collective(dist::Communicator& comm, const ExecCtx& ctx, Device device, const BenchCommOptions& o,
                      const std::string& collective, int64_t bytes, int64_t* used_bytes) {
  const int n = comm.size();
  const int64_t elems = std::max<int64_t>(1, bytes / 4 / n) * n;  // F32, a multiple of n
  *used_bytes = elems * 4;
  auto make = [&](int64_t numel) { return Tensor::zeros({numel}, DType::F32, MemCategory::Workspace, device); };
  if (collective == "all_reduce") {
    const Tensor x = make(elems);
    return time_collective(comm, ctx, device, o, [&] { comm.all_reduce(x, x, dist::ReduceOp::Sum, ctx); });
  }
  if (collective == "reduce_scatter") {
    const Tensor x = make(elems), y = make(elems / n);
    return time_collective(comm, ctx, device, o, [&] { comm.reduce_scatter(x, y, dist::ReduceOp::Sum, ctx); });
  }
  if (collective == "all_gather") {
    const Tensor x = make(elems / n), y = make(elems);
    return time_collective(comm, ctx, device, o, [&] { comm.all_gather(x, y, ctx); });
  }
  FP8T_CHECK(collective == "all_to_all",
             "bench comm: unknown collective '{}' (all_reduce, reduce_scatter, all_gather, "
             "all_to_all)",
             collective);
  const Tensor x = make(elems), y = make(elems);
  return time_collective(comm, ctx, device, o, [&] { comm.all_to_all(x, y, ctx); });
}

void bench_comm(const BenchCommOptions& o) {
  FP8T_CHECK(o.repeats >= 1 && o.warmup >= 0, "bench comm: --repeats must be >= 1 and --warmup >= 0");
  FP8T_CHECK(o.tokens >= 1 && o.hidden >= 1 && o.top_k >= 1, "bench comm: --tokens, --hidden and --top-k must be >= 1");
  const std::string dev = start_device(o.device);
  const std::unique_ptr<dist::Communicator> world =
      dist::init_world(dev, dist::CommOptions{.timeout_seconds = o.timeout});
  const Device device = default_device();
  const ExecCtx ctx = ExecCtx::on(device);
  const int n = world->size();
  const bool lead = world->rank() == 0;
  std::vector<int64_t> sizes = o.sizes;
  if (sizes.empty())
    sizes = dev == "cuda" ? std::vector<int64_t>{1 << 20, 16 << 20, 64 << 20, 256 << 20}
                          : std::vector<int64_t>{64 << 10, 1 << 20, 8 << 20};
  for (int64_t s : sizes) FP8T_CHECK(s >= 4, "bench comm: a size of {} bytes is too small (at least 4)", s);
  if (lead)
    std::fprintf(stderr, "bench comm: %d rank%s (%s, %s)\n%-15s %12s %10s %12s %12s\n", n, n == 1 ? "" : "s",
                 std::string(world->backend()).c_str(), dev.c_str(), "collective", "bytes", "time us", "algbw GB/s",
                 "busbw GB/s");
  for (const std::string& c : o.collectives) {
    for (int64_t size : sizes) {
      int64_t bytes = 0;
      const double s = run_collective(*world, ctx, device, o, c, size, &bytes);
      const double algbw = static_cast<double>(bytes) / s / 1e9, busbw = algbw * bus_factor(c, n);
      if (!lead) continue;
      std::printf("%s\n", nlohmann::json{{"collective", c},
                                         {"bytes", bytes},
                                         {"ranks", n},
                                         {"backend", world->backend()},
                                         {"device", dev},
                                         {"time_us", s * 1e6},
                                         {"algbw_GBps", algbw},
                                         {"busbw_GBps", busbw}}
                              .dump()
                              .c_str());
      std::fprintf(stderr, "%-15s %12lld %10.1f %12.2f %12.2f\n", c.c_str(), static_cast<long long>(bytes), s * 1e6,
                   algbw, busbw);
    }
  }
  // The EP dispatch at one layer's shape: rows per destination rank, FP8 (codes + scales) vs BF16.
  const int64_t rows = std::max<int64_t>(1, o.tokens * o.top_k / n), kb = (o.hidden + 127) / 128;
  struct Dispatch {
    const char* format;
    double seconds;
    int64_t bytes;
  };
  std::vector<Dispatch> dispatch;
  {
    const Tensor codes = Tensor::zeros({rows * n * o.hidden}, DType::U8, MemCategory::Workspace, device);
    const Tensor codes_in = Tensor::zeros({rows * n * o.hidden}, DType::U8, MemCategory::Workspace, device);
    const Tensor scales = Tensor::zeros({rows * n * kb}, DType::F32, MemCategory::Workspace, device);
    const Tensor scales_in = Tensor::zeros({rows * n * kb}, DType::F32, MemCategory::Workspace, device);
    // as expert_parallel.cpp sends them: codes and scales in one fused exchange
    const std::vector<int64_t> code_counts(static_cast<size_t>(n), rows * o.hidden),
        scale_counts(static_cast<size_t>(n), rows * kb);
    const dist::Communicator::AllToAllvPart parts[2] = {{codes, code_counts, codes_in, code_counts},
                                                        {scales, scale_counts, scales_in, scale_counts}};
    const double s = time_collective(*world, ctx, device, o, [&] { world->all_to_allv_fused(parts, ctx); });
    dispatch.push_back({"fp8", s, rows * n * (o.hidden + 4 * kb)});
    // the same bytes as two collectives, one after the other (what the fusion saves)
    const double s2 = time_collective(*world, ctx, device, o, [&] {
      world->all_to_all(codes, codes_in, ctx);
      world->all_to_all(scales, scales_in, ctx);
    });
    dispatch.push_back({"fp8-2x", s2, rows * n * (o.hidden + 4 * kb)});
  }
  {
    const Tensor values = Tensor::zeros({rows * n * o.hidden}, DType::BF16, MemCategory::Workspace, device);
    const Tensor values_in = Tensor::zeros({rows * n * o.hidden}, DType::BF16, MemCategory::Workspace, device);
    const double s = time_collective(*world, ctx, device, o, [&] { world->all_to_all(values, values_in, ctx); });
    dispatch.push_back({"bf16", s, rows * n * o.hidden * 2});
  }
  if (!lead) return;
  std::fprintf(stderr, "EP dispatch of %lld tokens x top-%lld, hidden %lld, over %d ranks:\n",
               static_cast<long long>(o.tokens), static_cast<long long>(o.top_k), static_cast<long long>(o.hidden), n);
  for (const Dispatch& d : dispatch) {
    const double tokens_per_s = static_cast<double>(o.tokens) / d.seconds;
    std::printf("%s\n", nlohmann::json{{"ep_dispatch", d.format},
                                       {"tokens", o.tokens},
                                       {"hidden", o.hidden},
                                       {"top_k", o.top_k},
                                       {"ranks", n},
                                       {"bytes_per_rank", d.bytes},
                                       {"time_us", d.seconds * 1e6},
                                       {"tokens_per_s", tokens_per_s}}
                            .dump()
                            .c_str());
    std::fprintf(stderr, "  %-5s %12lld bytes per rank %10.1f us %14.0f tokens/s\n", d.format,
                 static_cast<long long>(d.bytes), d.seconds * 1e6, tokens_per_s);
  }
  const double ratio = dispatch[2].seconds / dispatch[0].seconds;
  const double byte_ratio = static_cast<double>(dispatch[2].bytes) / static_cast<double>(dispatch[0].bytes);
  std::printf("%s\n",
              nlohmann::json{{"ep_dispatch_fp8_over_bf16_tokens_per_s", ratio}, {"bf16_over_fp8_bytes", byte_ratio}}
                  .dump()
                  .c_str());
  std::fprintf(stderr, "  fp8 / bf16 tokens per second: %.2fx (bytes %.2fx fewer)\n", ratio, byte_ratio);
}

void add_bench_comm(CLI::App& root) {
  CLI::App* bench = root.get_subcommand("bench");
  static BenchCommOptions o;
  auto* c = bench->add_subcommand("comm",
                                  "collective bandwidth between the launched ranks (nccl-tests' busbw), and "
                                  "the FP8 vs BF16 expert-parallel dispatch");
  c->add_option("--device", o.device, "cpu, cuda or auto")->capture_default_str();
  c->add_option("--sizes", o.sizes, "message sizes in bytes (default: 1M..256M on GPUs, 64K..8M on CPUs)")
      ->delimiter(',');
  c->add_option("--collectives", o.collectives, "which collectives")->delimiter(',')->capture_default_str();
  c->add_option("--repeats", o.repeats, "timed calls per size (the median is reported)")->capture_default_str();
  c->add_option("--warmup", o.warmup, "untimed calls first")->capture_default_str();
  c->add_option("--tokens", o.tokens, "EP dispatch: tokens per rank (one layer, one micro-batch)")
      ->capture_default_str();
  c->add_option("--hidden", o.hidden, "EP dispatch: model width")->capture_default_str();
  c->add_option("--top-k", o.top_k, "EP dispatch: routed experts per token")->capture_default_str();
  c->add_option("--dist-timeout", o.timeout, "seconds a collective may take before the run fails")
      ->capture_default_str();
  c->callback([] { bench_comm(o); });
}

const bool registered = register_command("bench comm", 94, &add_bench_comm);

}  // namespace
}  // namespace fp8train::cli
