// `fp8train bench ops`: the memory-bound ops of a training step on the GPU against the device-to-device copy
// bandwidth measured in the same run. Each op runs through its entry point (ops/*.h) on BF16 activations of a
// benchmark-model shape (tokens × hidden, the MoE's expert rows, the vocabulary), timed with CUDA events after
// warm-up (median of --repeats); its bandwidth counts the bytes the op must move at least (every input read
// once, every output written once), and `of_copy` is that bandwidth over cudaMemcpy's (read + write bytes per
// second). The target: every memory-bound kernel at >= 80 % of copy. Cross-entropy also runs through its
// launcher (ops/op_table.h) alone, "cross_entropy kernel": the entry point reads the row losses and the targets
// back to the host after the kernel, and the event timing includes those copies and the host's round trips. The
// numerics-health rows (the sampled steps' reductions) say what one health sample's reductions cost at these shapes.
// Output: one JSON line per op on stdout, a table on stderr.
#ifdef FP8TRAIN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "ops/adamw.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/health_stats.h"
#include "ops/moe_dispatch.h"
#include "ops/op_table.h"
#include "ops/quantize.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/router.h"
#include "ops/swiglu.h"
#include "recipe/health.h"
#include "tensor/backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"

namespace fp8train::cli {
namespace {

struct BenchOpsOptions {
  int64_t tokens = 8192, hidden = 2048, heads = 16, rope = 64, experts = 64, top_k = 6, ffn = 1408;
  int64_t vocab = 32768, ce_rows = 2048, params = int64_t{1} << 29;
  int64_t moe_rows = 57344;  // the MoE benchmark's padded expert rows (quantizer rows)
  int repeats = 20, warmup = 3;
  bool quant_only = false;
};

// Median milliseconds of `run` on the stream, each call between two events.
double time_ms(cudaStream_t stream, int warmup, int repeats, const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> ms;
  fp8train::cuda::Event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(stream);
    run();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A [rows, cols] tensor of random values (U(-1, 1), F32 then rounded to `dtype`) on the device.
Tensor random_tensor(const ExecCtx& ctx, int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = u(gen);
  const Tensor f = Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, ctx.device);
  if (dtype == DType::F32) return f;
  Tensor t = Tensor::empty({rows, cols}, dtype, MemCategory::Workspace, ctx.device);
  ops::copy(ctx, f, t);
  return t;
}

void bench_ops(const BenchOpsOptions& o) {
  FP8T_CHECK(o.params > 0 && o.params % 1024 == 0, "bench ops: --params must be a positive multiple of 1024");
  FP8T_CHECK(o.tokens > 0 && o.hidden > 0 && o.experts % 8 == 0 && o.top_k > 0 && o.ffn > 0 && o.vocab > 0,
             "bench ops: sizes must be positive and --experts a multiple of 8 (8 expert groups)");
  FP8T_CHECK(o.moe_rows > 0 && o.moe_rows % 128 == 0, "bench ops: --moe-rows must be a positive multiple of 128");
  start_device("cuda");
  const ExecCtx ctx = ExecCtx::on(default_device());
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const std::string where = fp8train::cuda::device_info(fp8train::cuda::current_device()).describe();
  const DType bf = DType::BF16, f32 = DType::F32;
  const int64_t T = o.tokens, d = o.hidden;

  // The copy baseline: 1 GiB device to device.
  const size_t copy_bytes = size_t{1} << 30;
  const Tensor src = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::U8, MemCategory::Workspace, ctx.device);
  const Tensor dst = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::U8, MemCategory::Workspace, ctx.device);
  const double copy_ms = time_ms(stream, o.warmup, o.repeats, [&] {
    FP8T_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), copy_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e-3) / 1e9;

  std::vector<nlohmann::ordered_json> rows;
  auto record = [&](const std::string& op, const std::string& shape, double bytes, const std::function<void()>& run) {
    const double ms = time_ms(stream, o.warmup, o.repeats, run);
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    nlohmann::ordered_json j{{"bench", "ops"},        {"op", op},          {"shape", shape},
                             {"ms", ms},              {"bytes", bytes},    {"gb_per_s", gbs},
                             {"copy_gb_per_s", copy_gbs}, {"of_copy", gbs / copy_gbs}, {"device", where}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    rows.push_back(std::move(j));
  };
  const std::string td = fmt::format("[{}, {}] bf16", T, d);

  // Casts and residual adds (axpby): the per-step FP32 → BF16 weight copy and x + y.
  if (!o.quant_only) {
    const Tensor w = random_tensor(ctx, o.params / 1024, 1024, f32, 1);
    const Tensor wb = Tensor::empty(w.shape(), bf, MemCategory::Workspace, ctx.device);
    record("copy f32->bf16", fmt::format("{} values", w.numel()), 6.0 * static_cast<double>(w.numel()),
           [&] { ops::copy(ctx, w, wb); });
    const Tensor a = random_tensor(ctx, T, d, bf, 2), b = random_tensor(ctx, T, d, bf, 3);
    const Tensor c = Tensor::empty({T, d}, bf, MemCategory::Workspace, ctx.device);
    record("add", td, 6.0 * static_cast<double>(T * d), [&] { ops::add(ctx, a, b, c); });
  }
  // RMSNorm forward and backward over the hidden size.
  if (!o.quant_only) {
    const Tensor x = random_tensor(ctx, T, d, bf, 4), dy = random_tensor(ctx, T, d, bf, 5);
    const Tensor w = random_tensor(ctx, 1, d, f32, 6).view({d});
    const Tensor y = Tensor::empty({T, d}, bf, MemCategory::Workspace, ctx.device);
    const Tensor dx = Tensor::empty({T, d}, bf, MemCategory::Workspace, ctx.device);
    const Tensor rstd = Tensor::empty({T}, f32, MemCategory::Workspace, ctx.device);
    const Tensor dw = Tensor::zeros({d}, f32, MemCategory::Workspace, ctx.device);
    const double td_bytes = 2.0 * static_cast<double>(T * d);
    record("rmsnorm_forward", td, 2.0 * td_bytes + 4.0 * static_cast<double>(T),
           [&] { ops::rmsnorm_forward(ctx, x, w, 1e-6, y, rstd); });
    record("rmsnorm_backward", td, 3.0 * td_bytes + 4.0 * static_cast<double>(T),
           [&] { ops::rmsnorm_backward(ctx, x, w, rstd, dy, dx, dw, false); });
  }
  // RoPE in place on the rope part of q ([T, heads, rope] of a [T, heads, 192] buffer).
  if (!o.quant_only) {
    const int64_t dq = 128 + o.rope;
    const Tensor q = random_tensor(ctx, T, o.heads * dq, bf, 7).view({T, o.heads, dq});
    record("rope", fmt::format("[{}, {}, {}] of [.., {}] bf16", T, o.heads, o.rope, dq),
           4.0 * static_cast<double>(T * o.heads * o.rope), [&] { ops::rope_(ctx, q.narrow(2, 128, o.rope), 2048, 1e4, false); });
  }
  // The MoE: router → plan → permute, SwiGLU over the expert rows, unpermute (+ backward).
  if (!o.quant_only) {
    const Tensor logits = random_tensor(ctx, T, o.experts, f32, 8);
    const Tensor bias = Tensor::zeros({o.experts}, f32, MemCategory::Workspace, ctx.device);
    const ops::RouterOutputs r = ops::router_forward(ctx, logits, bias, {o.top_k, 8, 4, 1.0});
    const ops::MoePlan plan = ops::moe_build_plan(ctx, r.selected, o.experts, 1);
    const int64_t R = plan.rows;
    const Tensor x = random_tensor(ctx, T, d, bf, 9);
    const Tensor xp = Tensor::empty({R, d}, bf, MemCategory::Workspace, ctx.device);
    const double rd = 2.0 * static_cast<double>(R * d);
    record("moe_permute", fmt::format("{} -> {} rows x {} bf16", T, R, d), 2.0 * rd,
           [&] { ops::moe_permute(ctx, x, plan, xp); });
    const Tensor y = Tensor::empty({T, d}, bf, MemCategory::Workspace, ctx.device);
    record("moe_unpermute", fmt::format("{} -> {} rows x {} bf16", R, T, d), rd + 2.0 * static_cast<double>(T * d),
           [&] { ops::moe_unpermute(ctx, xp, plan, r.gates, y, false); });
    const Tensor gu = random_tensor(ctx, R, 2 * o.ffn, bf, 10), dact = random_tensor(ctx, R, o.ffn, bf, 11);
    const Tensor act = Tensor::empty({R, o.ffn}, bf, MemCategory::Workspace, ctx.device);
    const Tensor dgu = Tensor::empty({R, 2 * o.ffn}, bf, MemCategory::Workspace, ctx.device);
    const double rf = 2.0 * static_cast<double>(R * o.ffn);
    const std::string rs = fmt::format("[{}, 2x{}] bf16", R, o.ffn);
    record("swiglu_forward", rs, 3.0 * rf, [&] { ops::swiglu_forward(ctx, gu, act); });
    record("swiglu_backward", rs, 5.0 * rf, [&] { ops::swiglu_backward(ctx, gu, dact, dgu); });
  }
  // Cross-entropy with the gradient, in place on FP32 logits (one head chunk).
  if (!o.quant_only) {
    const Tensor logits = random_tensor(ctx, o.ce_rows, o.vocab, f32, 12);
    std::vector<int32_t> t(static_cast<size_t>(o.ce_rows));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(o.vocab));
    const Tensor targets = Tensor::from_vector(t, {o.ce_rows}, MemCategory::Workspace, ctx.device);
    record("cross_entropy", fmt::format("[{}, {}] f32, gradient in place", o.ce_rows, o.vocab),
           8.0 * static_cast<double>(o.ce_rows * o.vocab),
           [&] { ops::cross_entropy_fused(ctx, logits, targets, true, 1e-3); });
    ops::CrossEntropyProblem p;
    p.rows = o.ce_rows;
    p.vocab = p.ld = o.vocab;
    p.grad_scale = 1e-3;
    p.compute_grad = true;
    const Tensor row_loss = Tensor::empty({o.ce_rows}, DType::F64, MemCategory::Workspace, ctx.device);
    record("cross_entropy kernel", fmt::format("[{}, {}] f32, gradient in place", o.ce_rows, o.vocab),
           8.0 * static_cast<double>(o.ce_rows * o.vocab), [&] {
             ops::launcher(ctx, &ops::OpTable::cross_entropy, "cross_entropy")(
                 ctx, p, logits.raw(), targets.data<int32_t>(), row_loss.data<double>());
           });
  }
  // Embedding forward (FP32 table rows gathered into BF16 activations).
  if (!o.quant_only) {
    const Tensor table = random_tensor(ctx, o.vocab, d, f32, 13);
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 104729) % static_cast<size_t>(o.vocab));
    const Tensor id = Tensor::from_vector(ids, {T}, MemCategory::Workspace, ctx.device);
    const Tensor out = Tensor::empty({T, d}, bf, MemCategory::Workspace, ctx.device);
    record("embedding_forward", td, 6.0 * static_cast<double>(T * d), [&] { ops::embedding_forward(ctx, id, table, out); });
    // Backward: dout read once, each touched table row read and written in F32. Uniform ids, then ids of a
    // byte-level corpus' shape (one token in six the same id, the rest over 259 symbols): one long run.
    const Tensor dout = random_tensor(ctx, T, d, bf, 14);
    const double touched = static_cast<double>(std::min<int64_t>(o.vocab, T));
    record("embedding_backward", td + ", uniform ids", 2.0 * static_cast<double>(T * d) + 8.0 * touched * d,
           [&] { ops::embedding_backward(ctx, id, dout, table); });
    std::vector<int32_t> bytes(static_cast<size_t>(T));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = i % 6 == 0 ? 32 : static_cast<int32_t>((i * 104729) % 259);
    const Tensor bid = Tensor::from_vector(bytes, {T}, MemCategory::Workspace, ctx.device);
    record("embedding_backward", td + ", one id in six tokens", 2.0 * static_cast<double>(T * d) + 8.0 * 259.0 * d,
           [&] { ops::embedding_backward(ctx, bid, dout, table); });
  }
  // AdamW over an arena of FP32 parameters with FP32 moments.
  if (!o.quant_only) {
    const int64_t n = o.params;
    const Tensor p = random_tensor(ctx, n / 1024, 1024, f32, 14).view({n});
    const Tensor g = random_tensor(ctx, n / 1024, 1024, f32, 15).view({n});
    const Tensor m = Tensor::zeros({n}, f32, MemCategory::Workspace, ctx.device);
    const Tensor v = Tensor::zeros({n}, f32, MemCategory::Workspace, ctx.device);
    ops::AdamWHyper h;
    h.lr = 1e-4;
    h.weight_decay = 0.1;
    record("adamw (fp32 moments)", fmt::format("{} parameters", n), 28.0 * static_cast<double>(n),
           [&] { ops::adamw_update(ctx, p, g, m, v, h); });
  }
  // The numerics-health sample (recipe/health.h): an expert GEMM's F32 product against its F32 reference (rows: the
  // expert rows of T·(top_k + 1), about what the plan pads T·top_k to; columns: gate|up), and a [T, hidden] BF16
  // operand against its 1x128 E4M3 quantization (GEMM-native scales), as read by Fprop and, transposed, by Wgrad.
  // The ops alone, then recipe::measure_* whole: op + read-back of the few results + the host's sum over the rows.
  if (!o.quant_only) {
    const int64_t R = T * (o.top_k + 1), n = 2 * o.ffn;
    const Tensor y = random_tensor(ctx, R, n, f32, 16), ref = random_tensor(ctx, R, n, f32, 17);
    const Tensor sums = Tensor::empty({R, 2}, DType::F64, MemCategory::Workspace, ctx.device);
    const std::string rs = fmt::format("[{}, {}] f32 vs f32", R, n);
    const double bytes = 8.0 * static_cast<double>(R * n) + 16.0 * static_cast<double>(R);
    record("row_error_sums", rs, bytes, [&] { ops::row_error_sums(ctx, y, ref, sums); });
    record("measure_accuracy", rs, bytes, [&] { (void)recipe::measure_accuracy(ctx, y, ref); });
    const Tensor x = random_tensor(ctx, T, d, bf, 18);
    quant::QuantSpec spec;  // e4m3 1x128 amax
    const quant::QTensor q = ops::quantize(ctx, x, spec, ops::QuantizeOutputs::Both, quant::ScaleLayout::GemmNative);
    const quant::QTensor qt = q.transposed().rowwise_only();
    const Tensor counts = Tensor::empty({3}, DType::I64, MemCategory::Workspace, ctx.device);
    const Tensor range = Tensor::empty({2}, f32, MemCategory::Workspace, ctx.device);
    const double qbytes = 3.0 * static_cast<double>(T * d) + 4.0 * static_cast<double>(T * ((d + 127) / 128));
    record("quantized_operand_counts", td + " e4m3 1x128", qbytes,
           [&] { ops::quantized_operand_counts(ctx, x, q.rowwise_only(), false, counts, range); });
    record("quantized_operand_counts", td + " e4m3 128x1 (transposed)", qbytes,
           [&] { ops::quantized_operand_counts(ctx, x, qt, true, counts, range); });
    record("measure_health", td + " e4m3 1x128", qbytes, [&] { (void)recipe::measure_health(ctx, x, q); });
  }
  // The FP8 step's quantizers at the MoE benchmark's shapes (expert rows x F = --ffn, tokens x hidden; E4M3 1x128,
  // GEMM-native scales), each as the step calls it.
  {
    const int64_t R = o.moe_rows, F = o.ffn;
    const auto native = quant::ScaleLayout::GemmNative;
    const quant::QuantSpec spec;  // e4m3 1x128 amax
    const double rf = static_cast<double>(R * F), td_elems = static_cast<double>(T * d);
    const Tensor gu = random_tensor(ctx, R, 2 * F, bf, 20), dact = random_tensor(ctx, R, F, bf, 21);
    const std::string gs = fmt::format("[{}, 2x{}]", R, F);
    record("quantize_swiglu_gate_up", gs + " bf16 -> cache + act e4m3", 7.0 * rf,
           [&] { (void)ops::quantize_swiglu_gate_up(ctx, gu, &spec, native, MemCategory::Workspace, spec, native); });
    const quant::QTensor cache =
        ops::quantize_swiglu_gate_up(ctx, gu, &spec, native, MemCategory::Workspace, spec, native).cache;
    record("quantize_swiglu_forward", gs + " e4m3 -> colwise", 3.0 * rf,
           [&] { (void)ops::quantize_swiglu_forward(ctx, cache, bf, spec, ops::QuantizeOutputs::Colwise, native); });
    record("quantize_swiglu_backward", gs + " e4m3 + dout -> both", 8.0 * rf,
           [&] { (void)ops::quantize_swiglu_backward(ctx, cache, dact, spec, ops::QuantizeOutputs::Both, native); });
    const Tensor xe = random_tensor(ctx, R, d, bf, 22);
    const quant::QTensor qe = ops::quantize(ctx, xe, spec, ops::QuantizeOutputs::Rowwise, native);
    record("with_colwise", fmt::format("[{}, {}] e4m3", R, d), 2.0 * static_cast<double>(R * d),
           [&] { (void)ops::with_colwise(ctx, qe); });
    const Tensor x = random_tensor(ctx, T, d, bf, 23);
    // The dgrad_block ablation's dy: 128x128 scales repeated per row (bytes: the block scales read, the row tiles
    // written; a launch-bound op at these sizes).
    quant::QuantSpec blocks = spec;
    blocks.granularity = quant::Granularity::block_128x128();
    const quant::QTensor qb = ops::quantize(ctx, x, blocks, ops::QuantizeOutputs::Rowwise, native);
    const double tiles = static_cast<double>((d + 127) / 128);
    record("block_scales_as_row_tiles", fmt::format("{} e4m3 128x128", td),
           4.0 * tiles * (static_cast<double>((T + 127) / 128) + static_cast<double>(T)),
           [&] { (void)ops::block_scales_as_row_tiles(ctx, qb); });
    const std::pair<ops::QuantizeOutputs, double> outs[] = {
        {ops::QuantizeOutputs::Rowwise, 3.0}, {ops::QuantizeOutputs::Colwise, 3.0}, {ops::QuantizeOutputs::Both, 4.0}};
    for (const auto& [out, per] : outs)
      record("quantize", fmt::format("{} -> e4m3 {}", td, ops::quantize_outputs_name(out)), per * td_elems,
             [&] { (void)ops::quantize(ctx, x, spec, out, native); });
  }
  std::fprintf(stderr, "bench ops: %s, device-to-device copy %.0f GB/s (read + write)\n", where.c_str(), copy_gbs);
  for (const auto& j : rows)
    std::fprintf(stderr, "  %-22s %-40s %8.3f ms %7.0f GB/s  %5.1f %% of copy\n", j["op"].get<std::string>().c_str(),
                 j["shape"].get<std::string>().c_str(), j["ms"].get<double>(), j["gb_per_s"].get<double>(),
                 100.0 * j["of_copy"].get<double>());
}

void add_bench_ops(CLI::App& root) {
  CLI::App* bench = root.get_subcommand("bench");
  static BenchOpsOptions o;
  auto* c = bench->add_subcommand("ops", "memory-bound ops of a training step against the copy bandwidth");
  c->add_option("--tokens", o.tokens, "tokens per micro-batch")->capture_default_str();
  c->add_option("--hidden", o.hidden, "hidden size")->capture_default_str();
  c->add_option("--experts", o.experts, "routed experts")->capture_default_str();
  c->add_option("--top-k", o.top_k, "experts per token")->capture_default_str();
  c->add_option("--ffn", o.ffn, "expert width")->capture_default_str();
  c->add_option("--vocab", o.vocab, "vocabulary")->capture_default_str();
  c->add_option("--params", o.params, "parameters in the AdamW and cast benchmarks (a multiple of 1024)")
      ->capture_default_str();
  c->add_option("--repeats", o.repeats, "timed calls per op (median)")->capture_default_str();
  c->add_option("--moe-rows", o.moe_rows, "expert rows of the quantizer rows (a multiple of 128)")
      ->capture_default_str();
  c->add_flag("--quant-only", o.quant_only, "only the copy baseline and the quantizer rows");
  c->callback([] { bench_ops(o); });
}

const bool registered = register_command("bench ops", 93, &add_bench_ops);

}  // namespace
}  // namespace fp8train::cli
#endif  // FP8TRAIN_HAVE_CUDA
