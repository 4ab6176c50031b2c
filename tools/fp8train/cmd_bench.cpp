// `fp8train bench gemm|quant`: GPU benchmarks, one JSON line per case on stdout and a summary table on stderr.
//   bench gemm   cuBLASLt BF16 (the baseline), FP8 E4M3 1x128 x 128x128 block-scaled (DeepSeek-V3 Fprop),
//                per-tensor FP8 (promoting and fast accumulation) and the Wgrad form (1x128 x 1x128, FP32
//                accumulate) on DeepSeek-V3 shapes: M in {128, 4096} x (N, K) in {(2112, 7168), (24576, 1536),
//                (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)}, plus 8192^3; TFLOP/s, GB/s and the
//                ratio to the BF16 and FP8 block-scaled baselines measured in the same run.
//   bench quant  every CUDA quantization kernel on a >= 256 MiB input, GB/s (bytes read + written) and the
//                ratio to the device-to-device copy bandwidth measured in the same run.
// Timing: warm-up launches, L2 flushed before every timed launch, CUDA events, median of the repeats. Our own
// FP8 GEMMs (ours_*) and cuBLASLt's same GEMM are timed interleaved for their ratio (vs_cublaslt_same_gemm), so a
// board at its power cap does not favour whichever runs first.
// Inputs are pseudo-random (never zeros). Built only with CUDA; without it `bench` explains that and fails.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "common/error.h"

#if FP8TRAIN_HAVE_CUDA
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <sstream>
#include <tuple>

#include "ops/cuda/bench_harness.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/quantize_cuda.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#endif

namespace fp8train::cli {
namespace {

#if FP8TRAIN_HAVE_CUDA
using fp8train::cuda::DeviceBuffer;
namespace oc = fp8train::ops::cuda;

struct BenchOptions {
  int device = 0;
  int warmup = 5;
  int repeats = 30;
  bool no_flush = false;
  std::string shapes = "default";
  double mib = 256.0;
  std::string filter;  // substring of the case name; empty = all
};

struct Row {
  std::string name;
  double us;
  double primary;    // TFLOP/s (gemm) or GB/s (quant)
  double ratio;      // vs BF16 (gemm) or vs copy (quant)
  double ratio2;     // vs FP8 block (gemm); unused for quant
};

void emit(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

struct Context {
  fp8train::cuda::DeviceInfo info;
  cudaStream_t stream;
  std::unique_ptr<oc::GpuTimer> timer;
  oc::TimingConfig timing;
};

Context start(const BenchOptions& o) {
  Context c;
  const Device d = fp8train::cuda::init_cuda_backend(o.device);
  fp8train::cuda::select_device(o.device);
  fp8train::cuda::require_hopper("fp8train bench");
  c.info = fp8train::cuda::device_info(o.device);
  c.stream = fp8train::cuda::compute_stream(d);
  c.timer = std::make_unique<oc::GpuTimer>(c.stream);
  c.timing.warmup = o.warmup;
  c.timing.repeats = o.repeats;
  c.timing.flush_l2 = !o.no_flush;
  std::fprintf(stderr, "device: %s, %s\n", c.info.describe().c_str(), oc::cublaslt_version().c_str());
  return c;
}

// ---- gemm -------------------------------------------------------------------------------------------------
struct GemmShape {
  int64_t m, n, k;
};

std::vector<GemmShape> parse_shapes(const std::string& text) {
  std::vector<GemmShape> out;
  if (text == "default") {
    const std::pair<int64_t, int64_t> nk[] = {{2112, 7168}, {24576, 1536}, {32768, 512},
                                              {7168, 16384}, {4096, 7168},  {7168, 2048}};
    for (int64_t m : {128, 4096})
      for (auto [n, k] : nk) out.push_back({m, n, k});
    out.push_back({8192, 8192, 8192});
    return out;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    GemmShape s{};
    char x1 = 0, x2 = 0;
    std::stringstream is(item);
    FP8T_CHECK(static_cast<bool>(is >> s.m >> x1 >> s.n >> x2 >> s.k) && (x1 == 'x' || x1 == ',') &&
                   (x2 == 'x' || x2 == ','),
               "bench gemm: cannot read shape '{}' (expected MxNxK, several separated by ';')", item);
    FP8T_CHECK(s.m > 0 && s.n > 0 && s.k > 0, "bench gemm: shape '{}' must be positive", item);
    out.push_back(s);
  }
  FP8T_CHECK(!out.empty(), "bench gemm: no shapes given");
  return out;
}

// fp8train's own Hopper FP8 GEMMs (src/ops/cuda/fp8_gemm_*) on the same operands and
// cuBLASLt-native scale layouts as the cuBLASLt cases: the dense Fprop/Dgrad kernel (1x128 x 128x128, BF16
// out) and the Wgrad kernel (1x128 x 1x128, FP32 accumulated in place), with the heuristic's configuration.
// vs_cublaslt_same_gemm is measured fairly: ours and cuBLASLt's same GEMM timed interleaved (GpuTimer::time_pair),
// since timing one after the other on a board at its power cap favours the first (measured; docs/fp8_gemm.md).
// The cuBLASLt launches come as `lt_block` / `lt_wgrad` (empty: that cuBLASLt case failed or was filtered out).
using Launch = std::function<void(cudaStream_t)>;
void bench_own_fp8_gemms(const Context& ctx, const BenchOptions& o, int64_t M, int64_t N, int64_t K, const void* a8,
                         const void* b8, const float* sa, const float* sb_blk, int64_t sb_blk_ld, const float* sb_tile,
                         void* d16, void* d32, double bf16_ms, double block_ms, const Launch& lt_block,
                         const Launch& lt_wgrad, std::vector<Row>& rows) {
  if (K % 128 != 0 || N % 16 != 0) return;  // shapes the kernels do not take
  struct OwnCase {
    const char* name;
    Launch run;
    std::string config;
    double out_bytes;
    const Launch* ref;  // cuBLASLt's launch of the same GEMM
  };
  oc::Fp8GemmDenseProblem dp;
  dp.m = M;
  dp.n = N;
  dp.k = K;
  dp.a = static_cast<const uint8_t*>(a8);
  dp.b = static_cast<const uint8_t*>(b8);
  dp.a_scales = oc::ScaleView{sa, 1, M, 0};             // VEC128 native: [K/128, M]
  dp.b_scales = oc::ScaleView{sb_blk, sb_blk_ld, 1, 0};  // BLK128x128 native: [N/128, ld]
  dp.d = static_cast<uint16_t*>(d16);
  const oc::Fp8GemmConfig dc = oc::fp8_gemm_dense_heuristic(M, N, K, oc::fp8_gemm_num_sms());
  oc::Fp8GemmWgradProblem wp;
  wp.m = M;
  wp.n = N;
  wp.k = K;
  wp.a = dp.a;
  wp.b = dp.b;
  wp.a_scales = oc::ScaleView{sa, 1, M, 0};
  wp.b_scales = oc::ScaleView{sb_tile, 1, N, 0};  // VEC128 native: [K/128, N]
  wp.c = static_cast<const float*>(d32);
  wp.d = static_cast<float*>(d32);
  const oc::Fp8GemmConfig wc = oc::fp8_gemm_wgrad_heuristic(M, N, K, 1, oc::fp8_gemm_num_sms());
  const OwnCase cases[] = {
      {"ours_fp8_1x128_128x128", [&](cudaStream_t s) { oc::fp8_gemm_dense(dp, dc, s); }, dc.describe(), 2.0, &lt_block},
      {"ours_fp8_1x128_1x128_f32_acc", [&](cudaStream_t s) { oc::fp8_gemm_wgrad(wp, wc, s); }, wc.describe(), 8.0,
       &lt_wgrad},
  };
  for (const OwnCase& c : cases) {
    if (!o.filter.empty() && std::string(c.name).find(o.filter) == std::string::npos) continue;
    nlohmann::json j = {{"bench", "gemm"}, {"case", c.name}, {"m", M}, {"n", N}, {"k", K}, {"config", c.config}};
    try {
      oc::Timing t, ref;
      if (*c.ref) std::tie(t, ref) = ctx.timer->time_pair(c.run, *c.ref, ctx.timing);
      else t = ctx.timer->time(c.run, ctx.timing);
      const double bytes = 1.0 * (M * K + N * K) + c.out_bytes * M * N;
      const double tflops = 2.0 * M * N * K / (t.median_ms * 1e-3) / 1e12;
      j["median_us"] = t.median_ms * 1e3;
      j["min_us"] = t.min_ms * 1e3;
      j["tflops"] = tflops;
      j["gbps"] = bytes / (t.median_ms * 1e-3) / 1e9;
      j["vs_bf16"] = bf16_ms > 0 ? bf16_ms / t.median_ms : 0.0;
      j["vs_fp8_block"] = block_ms > 0 ? block_ms / t.median_ms : 0.0;
      j["vs_cublaslt_same_gemm"] = ref.median_ms > 0 ? ref.median_ms / t.median_ms : 0.0;
      j["cublaslt_interleaved_us"] = ref.median_ms * 1e3;
      rows.push_back({fmt::format("{:<24} {:>5}x{:>5}x{:>5}", c.name, M, N, K), t.median_ms * 1e3, tflops,
                      j["vs_bf16"].get<double>(), j["vs_cublaslt_same_gemm"].get<double>()});
    } catch (const Error& e) {
      j["error"] = e.what();
      rows.push_back({fmt::format("{:<24} {:>5}x{:>5}x{:>5} ERROR", c.name, M, N, K), 0, 0, 0, 0});
    }
    j["device"] = ctx.info.name;
    j["repeats"] = o.repeats;
    j["l2_flush"] = !o.no_flush;
    emit(j);
  }
}

void bench_gemm(const BenchOptions& o) {
  Context ctx = start(o);
  oc::CublasLtGemm& gemm = oc::cublaslt_gemm(o.device);
  std::vector<Row> rows;
  uint64_t seed = 1;
  for (const GemmShape& s : parse_shapes(o.shapes)) {
    const int64_t M = s.m, N = s.n, K = s.k, kb = (K + 127) / 128, kb4 = (kb + 3) / 4 * 4;
    DeviceBuffer a16(M * K * 2, ctx.stream), b16(N * K * 2, ctx.stream), a8(M * K, ctx.stream), b8(N * K, ctx.stream);
    DeviceBuffer sa(M * kb * 4, ctx.stream), sb_blk(((N + 127) / 128) * kb4 * 4, ctx.stream),
        sb_tile(N * kb * 4, ctx.stream), st(32, ctx.stream);
    DeviceBuffer d16(M * N * 2, ctx.stream), d32(M * N * 4, ctx.stream);
    oc::fill_random_bf16(a16.as<uint16_t>(), M * K, seed++, 1.0f, ctx.stream);
    oc::fill_random_bf16(b16.as<uint16_t>(), N * K, seed++, 1.0f, ctx.stream);
    oc::fill_random_fp8(a8.as<uint8_t>(), M * K, seed++, false, ctx.stream);
    oc::fill_random_fp8(b8.as<uint8_t>(), N * K, seed++, false, ctx.stream);
    oc::fill_random_positive(sa.as<float>(), M * kb, seed++, 1e-3f, 2e-3f, ctx.stream);
    oc::fill_random_positive(sb_blk.as<float>(), ((N + 127) / 128) * kb4, seed++, 1e-3f, 2e-3f, ctx.stream);
    oc::fill_random_positive(sb_tile.as<float>(), N * kb, seed++, 1e-3f, 2e-3f, ctx.stream);
    oc::fill_random_positive(st.as<float>(), 8, seed++, 1e-3f, 2e-3f, ctx.stream);
    oc::fill_random_f32(d32.as<float>(), M * N, seed++, 1.0f, ctx.stream);

    struct Case {
      const char* name;
      oc::ScaledGemmProblem p;
      const void *a, *b;
      const float *sa, *sb;
      void* d;
    };
    auto problem = [&](oc::GemmInput t, oc::OperandScaling as, oc::OperandScaling bs, oc::GemmOutput out) {
      oc::ScaledGemmProblem p;
      p.m = M;
      p.n = N;
      p.k = K;
      p.a_type = p.b_type = t;
      p.a_scaling = as;
      p.b_scaling = bs;
      p.a_scale_layout = p.b_scale_layout = oc::ScaleLayout::Native;
      p.out = out;
      return p;
    };
    using oc::GemmInput;
    using oc::GemmOutput;
    using oc::OperandScaling;
    std::vector<Case> cases;
    cases.push_back({"bf16", problem(GemmInput::BF16, OperandScaling::None, OperandScaling::None, GemmOutput::BF16),
                     a16.get(), b16.get(), nullptr, nullptr, d16.get()});
    cases.push_back({"fp8_1x128_128x128",
                     problem(GemmInput::E4M3, OperandScaling::Tile1x128, OperandScaling::Block128x128, GemmOutput::BF16),
                     a8.get(), b8.get(), sa.as<float>(), sb_blk.as<float>(), d16.get()});
    cases.push_back({"fp8_tensor",
                     problem(GemmInput::E4M3, OperandScaling::Tensor, OperandScaling::Tensor, GemmOutput::BF16),
                     a8.get(), b8.get(), st.as<float>(), st.as<float>() + 4, d16.get()});
    Case fast{"fp8_tensor_fast",
              problem(GemmInput::E4M3, OperandScaling::Tensor, OperandScaling::Tensor, GemmOutput::BF16), a8.get(),
              b8.get(), st.as<float>(), st.as<float>() + 4, d16.get()};
    fast.p.fast_accum = true;
    cases.push_back(fast);
    Case wgrad{"fp8_1x128_1x128_f32_acc",
               problem(GemmInput::E4M3, OperandScaling::Tile1x128, OperandScaling::Tile1x128, GemmOutput::F32),
               a8.get(), b8.get(), sa.as<float>(), sb_tile.as<float>(), d32.get()};
    wgrad.p.accumulate = true;
    cases.push_back(wgrad);

    double bf16_ms = 0, block_ms = 0;
    Launch lt_block, lt_wgrad;  // the cuBLASLt cases our kernels are compared with, when they ran
    for (const Case& c : cases) {
      if (!o.filter.empty() && std::string(c.name).find(o.filter) == std::string::npos && std::string(c.name) != "bf16" &&
          std::string(c.name) != "fp8_1x128_128x128")
        continue;
      nlohmann::json j = {{"bench", "gemm"}, {"case", c.name}, {"m", M}, {"n", N}, {"k", K}};
      try {
        const oc::Timing t = ctx.timer->time(
            [&](cudaStream_t st_) { gemm.run(c.p, c.a, c.sa, c.b, c.sb, c.d, st_); }, ctx.timing);
        if (std::string(c.name) == "bf16") bf16_ms = t.median_ms;
        const Launch run = [&gemm, c](cudaStream_t st_) { gemm.run(c.p, c.a, c.sa, c.b, c.sb, c.d, st_); };
        if (std::string(c.name) == "fp8_1x128_128x128") {
          block_ms = t.median_ms;
          lt_block = run;
        }
        if (std::string(c.name) == "fp8_1x128_1x128_f32_acc") lt_wgrad = run;
        const double in_bytes = c.p.a_type == GemmInput::BF16 ? 2.0 : 1.0;
        const double out_bytes = c.p.out == GemmOutput::F32 ? 4.0 : 2.0;
        const double bytes = in_bytes * (M * K + N * K) + out_bytes * M * N * (c.p.accumulate ? 2 : 1);
        const double tflops = 2.0 * M * N * K / (t.median_ms * 1e-3) / 1e12;
        j["median_us"] = t.median_ms * 1e3;
        j["min_us"] = t.min_ms * 1e3;
        j["tflops"] = tflops;
        j["gbps"] = bytes / (t.median_ms * 1e-3) / 1e9;
        j["vs_bf16"] = bf16_ms > 0 ? bf16_ms / t.median_ms : 0.0;
        j["vs_fp8_block"] = block_ms > 0 ? block_ms / t.median_ms : 0.0;
        j["algo"] = gemm.algorithm(c.p);
        rows.push_back({fmt::format("{:<24} {:>5}x{:>5}x{:>5}", c.name, M, N, K), t.median_ms * 1e3, tflops,
                        j["vs_bf16"].get<double>(), j["vs_fp8_block"].get<double>()});
      } catch (const Error& e) {
        j["error"] = e.what();
        rows.push_back({fmt::format("{:<24} {:>5}x{:>5}x{:>5} ERROR", c.name, M, N, K), 0, 0, 0, 0});
      }
      j["device"] = ctx.info.name;
      j["repeats"] = o.repeats;
      j["l2_flush"] = !o.no_flush;
      emit(j);
    }
    bench_own_fp8_gemms(ctx, o, M, N, K, a8.get(), b8.get(), sa.as<float>(), sb_blk.as<float>(), kb4,
                        sb_tile.as<float>(), d16.get(), d32.get(), bf16_ms, block_ms, lt_block, lt_wgrad, rows);
  }
  std::fprintf(stderr, "\n%-42s %10s %9s %8s %9s\n", "case", "median_us", "TFLOP/s", "vs_bf16", "vs_fp8blk");
  std::fprintf(stderr, "(ours_* rows: vs_fp8blk is against cuBLASLt's same GEMM, the two timed interleaved)\n");
  for (const Row& r : rows)
    std::fprintf(stderr, "%-42s %10.1f %9.1f %8.2f %9.2f\n", r.name.c_str(), r.us, r.primary, r.ratio, r.ratio2);
}

// ---- quant ------------------------------------------------------------------------------------------------
void bench_quant(const BenchOptions& o) {
  Context ctx = start(o);
  std::vector<Row> rows;
  const int64_t cols = 8192;
  const double total_bytes = o.mib * (1 << 20);
  FP8T_CHECK(o.mib >= 1, "bench quant: --mib must be at least 1");

  for (oc::InType type : {oc::InType::BF16, oc::InType::F32}) {
    const size_t esize = oc::in_type_size(type);
    const int64_t rows_n = std::max<int64_t>(128, static_cast<int64_t>(total_bytes / (esize * cols)) / 128 * 128);
    const int64_t n = rows_n * cols, kb = cols / 128, rb = rows_n / 128;
    const char* tname = type == oc::InType::BF16 ? "bf16" : "f32";
    DeviceBuffer x(n * esize, ctx.stream), copy_dst(n * esize, ctx.stream);
    DeviceBuffer q(n, ctx.stream), qt(n, ctx.stream), qs(n / 128 * 4, ctx.stream), qts(n / 128 * 4, ctx.stream);
    DeviceBuffer packed(n / 8 * 12, ctx.stream), out(n * 4, ctx.stream), scratch(64, ctx.stream);
    if (type == oc::InType::BF16) oc::fill_random_bf16(x.as<uint16_t>(), n, 11, 3.0f, ctx.stream);
    else oc::fill_random_f32(x.as<float>(), n, 11, 3.0f, ctx.stream);
    oc::fill_random_fp8(q.as<uint8_t>(), n, 12, false, ctx.stream);
    oc::fill_random_positive(qs.as<float>(), n / 128, 13, 0.5f, 2.0f, ctx.stream);
    const double in_bytes = static_cast<double>(n) * esize, scale_bytes = static_cast<double>(n) / 128 * 4;

    struct Case {
      std::string name;
      double bytes;
      std::function<void(cudaStream_t)> run;
    };
    std::vector<Case> cases;
    cases.push_back({"copy_d2d", 2 * in_bytes, [&](cudaStream_t s) {
                       FP8T_CUDA_CHECK(cudaMemcpyAsync(copy_dst.get(), x.get(), n * esize, cudaMemcpyDeviceToDevice, s));
                     }});
    auto act = [&](bool fused, bool pow2, oc::Encoder enc, oc::CodeFormat f) {
      oc::Quant1x128Args a;
      a.x = x.get();
      a.x_type = type;
      a.rows = rows_n;
      a.cols = cols;
      a.opt = {f, pow2, false, 0, enc};
      a.q = q.as<uint8_t>();
      a.q_scales = qs.as<float>();
      a.q_strides = oc::mn_major_scales(rows_n);
      if (fused) {
        a.qt = qt.as<uint8_t>();
        a.qt_scales = qts.as<float>();
        a.qt_strides = oc::mn_major_scales(cols);
      }
      return a;
    };
    for (bool pow2 : {false, true})
      for (oc::Encoder enc : {oc::Encoder::Hardware, oc::Encoder::Software}) {
        const std::string suffix = std::string(pow2 ? "_pow2" : "") + (enc == oc::Encoder::Software ? "_swenc" : "");
        const auto a1 = act(false, pow2, enc, oc::CodeFormat::E4M3);
        const auto a2 = act(true, pow2, enc, oc::CodeFormat::E4M3);
        cases.push_back({"e4m3_1x128" + suffix, in_bytes + n + scale_bytes,
                         [&, a1](cudaStream_t s) { oc::quantize_1x128(a1, s); }});
        cases.push_back({"e4m3_1x128+128x1T" + suffix, in_bytes + 2.0 * n + 2 * scale_bytes,
                         [&, a2](cudaStream_t s) { oc::quantize_1x128(a2, s); }});
      }
    const auto i8 = act(false, false, oc::Encoder::Hardware, oc::CodeFormat::INT8);
    cases.push_back({"int8_1x128", in_bytes + n + scale_bytes, [&, i8](cudaStream_t s) { oc::quantize_1x128(i8, s); }});
    {
      oc::Quant128x128Args w;
      w.x = x.get();
      w.x_type = type;
      w.rows = rows_n;
      w.cols = cols;
      w.q = q.as<uint8_t>();
      w.q_scales = qs.as<float>();
      w.q_strides = oc::row_major_scales(kb);
      w.qt = qt.as<uint8_t>();
      w.qt_scales = qts.as<float>();
      w.qt_strides = oc::row_major_scales(rb);
      cases.push_back({"e4m3_128x128+T", in_bytes + 2.0 * n, [&, w](cudaStream_t s) { oc::quantize_128x128(w, s); }});
      oc::Quant128x128Args w8 = w;
      w8.opt.format = oc::CodeFormat::INT8;
      w8.qt = nullptr;
      cases.push_back({"int8_128x128", in_bytes + n, [&, w8](cudaStream_t s) { oc::quantize_128x128(w8, s); }});
    }
    {
      oc::QuantE5M6Args e;
      e.x = x.get();
      e.x_type = type;
      e.rows = rows_n;
      e.cols = cols;
      e.packed = packed.as<uint8_t>();
      e.scales = qs.as<float>();
      e.strides = oc::row_major_scales(kb);
      cases.push_back({"e5m6_1x128_pow2_pack", in_bytes + 1.5 * n + scale_bytes,
                       [&, e](cudaStream_t s) { oc::quantize_e5m6_1x128(e, s); }});
      cases.push_back({"e5m6_unpack_to_" + std::string(tname), 1.5 * n + scale_bytes + in_bytes, [&](cudaStream_t s) {
                         oc::dequantize_e5m6_1x128(packed.as<uint8_t>(), qs.as<float>(), oc::row_major_scales(kb),
                                                   rows_n, cols, out.get(), type, s);
                       }});
    }
    {
      oc::DequantArgs d;
      d.q = q.as<uint8_t>();
      d.rows = rows_n;
      d.cols = cols;
      d.block_rows = 1;
      d.block_cols = 128;
      d.scales = qs.as<float>();
      d.strides = oc::row_major_scales(kb);
      d.out = out.get();
      d.out_type = type;
      cases.push_back({"dequant_e4m3_1x128_to_" + std::string(tname), n + scale_bytes + in_bytes,
                       [&, d](cudaStream_t s) { oc::dequantize(d, s); }});
    }
    cases.push_back({"amax", in_bytes, [&](cudaStream_t s) {
                       FP8T_CUDA_CHECK(cudaMemsetAsync(scratch.get(), 0, 4, s));
                       oc::amax_accumulate(x.get(), type, n, scratch.as<uint32_t>(), s);
                     }});
    {
      oc::QuantWithScaleArgs w;
      w.x = x.get();
      w.x_type = type;
      w.rows = rows_n;
      w.cols = cols;
      w.scale_inverse = qs.as<float>();
      w.q = q.as<uint8_t>();
      w.scale_out = scratch.as<float>() + 4;
      w.amax_bits = scratch.as<uint32_t>();
      cases.push_back({"e4m3_tensor_delayed+amax", in_bytes + n, [&, w](cudaStream_t s) { oc::quantize_with_scale(w, s); }});
      oc::QuantBlocksArgs g;
      g.x = x.get();
      g.x_type = type;
      g.rows = rows_n;
      g.cols = cols;
      g.block_rows = 1;
      g.block_cols = 128;
      g.q = q.as<uint8_t>();
      g.scales = qs.as<float>();
      g.strides = oc::row_major_scales(kb);
      cases.push_back({"e4m3_1x128_generic_fallback", in_bytes + n + scale_bytes,
                       [&, g](cudaStream_t s) { oc::quantize_blocks(g, s); }});
    }

    double copy_gbps = 0;
    for (const Case& c : cases) {
      if (!o.filter.empty() && c.name.find(o.filter) == std::string::npos && c.name != "copy_d2d") continue;
      const oc::Timing t = ctx.timer->time(c.run, ctx.timing);
      const double gbps = c.bytes / (t.median_ms * 1e-3) / 1e9;
      if (c.name == "copy_d2d") copy_gbps = gbps;
      nlohmann::json j = {{"bench", "quant"},  {"case", c.name},         {"input", tname},
                          {"rows", rows_n},     {"cols", cols},           {"input_mib", in_bytes / (1 << 20)},
                          {"bytes", c.bytes},   {"median_us", t.median_ms * 1e3},
                          {"min_us", t.min_ms * 1e3}, {"gbps", gbps}, {"copy_gbps", copy_gbps},
                          {"ratio_to_copy", copy_gbps > 0 ? gbps / copy_gbps : 0.0},
                          {"device", ctx.info.name},  {"repeats", o.repeats}};
      emit(j);
      rows.push_back({fmt::format("{:<34} {:<4}", c.name, tname), t.median_ms * 1e3, gbps,
                      copy_gbps > 0 ? gbps / copy_gbps : 0.0, 0});
    }
  }
  std::fprintf(stderr, "\n%-40s %10s %9s %8s\n", "case", "median_us", "GB/s", "vs_copy");
  for (const Row& r : rows) std::fprintf(stderr, "%-40s %10.1f %9.1f %8.3f\n", r.name.c_str(), r.us, r.primary, r.ratio);
}

void add_common(CLI::App* app, BenchOptions& o) {
  app->add_option("--device", o.device, "CUDA device ordinal")->capture_default_str();
  app->add_option("--warmup", o.warmup, "untimed launches before timing")->capture_default_str();
  app->add_option("--repeats", o.repeats, "timed launches; the median is reported")->capture_default_str();
  app->add_flag("--no-flush", o.no_flush, "do not flush L2 before each timed launch");
  app->add_option("--filter", o.filter, "only cases whose name contains this (baselines always run)");
}

void add_bench(CLI::App& root) {
  auto* bench = root.add_subcommand("bench", "GPU benchmarks (JSON lines on stdout, a table on stderr)");
  bench->require_subcommand(1);
  static BenchOptions gemm_opts, quant_opts;
  auto* g = bench->add_subcommand("gemm", "cuBLASLt BF16, FP8 block-scaled and per-tensor FP8 GEMMs");
  add_common(g, gemm_opts);
  g->add_option("--shapes", gemm_opts.shapes, "'default' (DeepSeek-V3 shapes + 8192^3) or MxNxK;MxNxK;...")
      ->capture_default_str();
  g->callback([] { bench_gemm(gemm_opts); });
  auto* q = bench->add_subcommand("quant", "quantization kernels against the device-to-device copy bandwidth");
  add_common(q, quant_opts);
  q->add_option("--mib", quant_opts.mib, "input size in MiB per input type (>= 256 for the speed target)")
      ->capture_default_str();
  q->callback([] { bench_quant(quant_opts); });
}
#else
void add_bench(CLI::App& root) {
  auto* bench = root.add_subcommand("bench", "GPU benchmarks (needs a build with CUDA)");
  bench->allow_extras();
  bench->callback([] {
    FP8T_FAIL("fp8train was built without CUDA, so `bench` is unavailable: rebuild on a machine with nvcc "
              "(cmake -DFP8TRAIN_CUDA=ON) and run it on an H100/H200");
  });
}
#endif

const bool registered = register_command("bench", 90, &add_bench);

}  // namespace
}  // namespace fp8train::cli
