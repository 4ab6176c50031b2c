// `fp8train bench attention`: times the attention core's entry points (ops/attention.h: attention_forward and
// attention_backward) on BF16 device tensors, causal, contiguous [tokens, heads, dim] layouts.
//   fp8train bench attention [--shapes '4x16x2048:192/128;1x128x4096:192/128'] [--repeats 10] [--warmup 3]
// Each shape BxHxT:qk/v is batch x heads x seq with head dims qk_dim / v_dim. CUDA events around each call after
// warm-up, L2 flushed before each, median of the repeats. FLOPs (causal): forward 2·B·H·(T²/2)·(qk + v), backward
// 2.5 × forward. One JSON line per shape and direction on stdout, a table on stderr.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "common/error.h"

#if FP8TRAIN_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <cmath>

#include "ops/attention.h"
#include "ops/cuda/bench_harness.h"
#include "tensor/backend.h"
#include "tensor/exec_ctx.h"
#include "tensor/tensor.h"

namespace fp8train::cli {
namespace {

struct AttnBenchOptions {
  std::string shapes = "4x16x2048:192/128;1x128x4096:192/128";
  int repeats = 10, warmup = 3;
};

struct AttnShape {
  int64_t batch = 0, heads = 0, seq = 0, qk = 0, v = 0;
  std::string text;
};

std::vector<AttnShape> parse_shapes(const std::string& text) {
  std::vector<AttnShape> out;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ';')) {
    if (item.empty()) continue;
    AttnShape s;
    s.text = item;
    char x1 = 0, x2 = 0, colon = 0, slash = 0;
    std::stringstream is(item);
    is >> s.batch >> x1 >> s.heads >> x2 >> s.seq >> colon >> s.qk >> slash >> s.v;
    FP8T_CHECK(!is.fail() && is.peek() == EOF && x1 == 'x' && x2 == 'x' && colon == ':' && slash == '/',
               "bench attention: cannot read shape '{}' (expected BxHxT:qk/v, several separated by ';')", item);
    FP8T_CHECK(s.batch > 0 && s.heads > 0 && s.seq > 0 && s.qk > 0 && s.v > 0,
               "bench attention: shape '{}' must be positive", item);
    out.push_back(s);
  }
  FP8T_CHECK(!out.empty(), "bench attention: no shapes given");
  return out;
}

void bench_attention(const AttnBenchOptions& o) {
  FP8T_CHECK(o.repeats >= 1 && o.warmup >= 0, "bench attention: --repeats must be >= 1 and --warmup >= 0");
  const std::vector<AttnShape> shapes = parse_shapes(o.shapes);
  start_device("cuda");
  const ExecCtx ctx = ExecCtx::on(default_device());
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  ops::cuda::GpuTimer timer(stream);
  ops::cuda::TimingConfig timing;
  timing.warmup = o.warmup;
  timing.repeats = o.repeats;
  std::fprintf(stderr, "device: %s\n", device_description().c_str());
  std::fprintf(stderr, "%-24s %-9s %10s %10s\n", "shape BxHxT:qk/v", "direction", "ms", "TFLOP/s");
  uint64_t seed = 1;
  for (const AttnShape& s : shapes) {
    const int64_t rows = s.batch * s.seq;
    const auto bf16 = [&](int64_t dim) {
      Tensor t = ctx.scratch({rows, s.heads, dim}, DType::BF16);
      ops::cuda::fill_random_bf16(static_cast<uint16_t*>(t.raw()), rows * s.heads * dim, seed++, 1.0f, stream);
      return t;
    };
    const Tensor q = bf16(s.qk), k = bf16(s.qk), v = bf16(s.v), dout = bf16(s.v);
    const Tensor o_t = ctx.scratch({rows, s.heads, s.v}, DType::BF16);
    const Tensor dq = ctx.scratch({rows, s.heads, s.qk}, DType::BF16),
                 dk = ctx.scratch({rows, s.heads, s.qk}, DType::BF16),
                 dv = ctx.scratch({rows, s.heads, s.v}, DType::BF16);
    const Tensor lse = ctx.scratch({s.batch, s.heads, s.seq}, DType::F32);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.qk));
    const double fwd_flops =
        2.0 * static_cast<double>(s.batch * s.heads) * (static_cast<double>(s.seq) * s.seq / 2.0) * (s.qk + s.v);
    const auto fwd = [&](cudaStream_t) { ops::attention_forward(ctx, q, k, v, o_t, lse, s.batch, scale); };
    const auto bwd = [&](cudaStream_t) {
      ops::attention_backward(ctx, q, k, v, o_t, lse, dout, dq, dk, dv, s.batch, scale);
    };
    fwd(stream);  // o and lse for the backward
    const ops::cuda::Timing tf = timer.time(fwd, timing);
    const ops::cuda::Timing tb = timer.time(bwd, timing);
    const struct {
      const char* dir;
      ops::cuda::Timing t;
      double flops;
    } results[] = {{"forward", tf, fwd_flops}, {"backward", tb, 2.5 * fwd_flops}};
    for (const auto& r : results) {
      const double tflops = r.flops / (r.t.median_ms * 1e-3) / 1e12;
      nlohmann::json j = {{"bench", "attention"}, {"shape", s.text},      {"batch", s.batch}, {"heads", s.heads},
                          {"seq", s.seq},         {"qk_dim", s.qk},       {"v_dim", s.v},     {"direction", r.dir},
                          {"ms", r.t.median_ms},  {"min_ms", r.t.min_ms}, {"tflops", tflops}, {"repeats", o.repeats}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "%-24s %-9s %10.3f %10.1f\n", s.text.c_str(), r.dir, r.t.median_ms, tflops);
    }
  }
}

void add_bench_attention(CLI::App& root) {
  CLI::App* bench = root.get_subcommand("bench");
  auto* cmd =
      bench->add_subcommand("attention", "Causal BF16 attention forward / backward (ops entry points), TFLOP/s");
  static AttnBenchOptions opts;
  cmd->add_option("--shapes", opts.shapes, "Shapes BxHxT:qk/v separated by ';'")->capture_default_str();
  cmd->add_option("--repeats", opts.repeats, "Timed repeats (median reported)")->capture_default_str();
  cmd->add_option("--warmup", opts.warmup, "Untimed warm-up calls")->capture_default_str();
  cmd->callback([] { bench_attention(opts); });
}

const bool registered = register_command("bench attention", 92, &add_bench_attention);

}  // namespace
}  // namespace fp8train::cli
#endif
