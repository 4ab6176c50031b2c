// `fp8train bench gemm|quant`: GPU benchmarks, one JSON line per case on stdout and a summary table on stderr.
//   bench gemm   cuBLASLt BF16 (the baseline), FP8 E4M3 1x128 x 128x128 block-scaled (DeepSeek-V3 Fprop),
//                per-tensor FP8 (promoting and fast accumulation) and the Wgrad form (1x128 x 1x128, FP32
//                accumulate) on DeepSeek-V3 shapes: M in {128, 4096} x (N, K) in {(2112, 7168), (24576, 1536),
//                (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)}, plus 8192^3; and fp8train's own FP8
//                GEMM kernels (ops/cuda/fp8_gemm.h) on the same operands -- dense Fprop/Dgrad and Wgrad -- and on
//                MoE shapes (M-grouped experts, K-grouped Wgrad). TFLOP/s, GB/s and the ratio to the BF16 and FP8
//                block-scaled baselines measured in the same run.
//                For kernel work: --family picks the families, --config runs explicit kernel configurations
//                instead of (or beside) the heuristic's, --sweep every built tile width x multicast mode (and the
//                192-row tiles), --split-sweep every split-K width x range count on the few-row shapes, --floor
//                times a read-only kernel over the operands of the few-row shapes (their memory floor),
//                --clean-flush leaves L2 clean after the flush, --scales picks the scale layouts our kernels read
//                (cuBLASLt's native ones take the bulk-copy path, QTensor's row-major ones the cp.async
//                path). Every configuration of ours is first checked bit for bit on sampled outputs against the
//                CPU Hopper model (num::hopper_dot_scaled_split, --check), so a fast wrong variant cannot pass:
//                a mismatch or a failed case of ours makes the command fail after the table. --int8 times the
//                INT8 build of ours instead (ours_int8_*: the same random bytes read as INT8, checked against the
//                exact INT8 arithmetic; cuBLASLt has no block-scaled INT8 GEMM to interleave with).
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
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <tuple>

#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "ops/cuda/bench_harness.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/fp8_gemm_plan.h"
#include "ops/cuda/kernels.h"
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
  bool clean_flush = false;
  std::string filter;  // substring of the case name; empty = all
  // gemm
  std::string shapes = "default";
  std::string families = "all";
  std::string configs = "heuristic";
  bool sweep = false;
  bool split_sweep = false;
  bool floor = false;
  bool no_baselines = false;
  std::string scales = "native";
  int check = 64;
  std::string grouped_shapes = "8x4096:4096x7168;3900,4300,0,4100,5000,3000,4600,4700:4096x7168";
  std::string kgrouped_shapes = "8x2048:4096x7168";
  bool int8 = false;  // our kernels' INT8 build instead of the FP8 one
  // quant
  double mib = 256.0;
};

struct Row {
  std::string name;
  double us;
  double primary;    // TFLOP/s (gemm) or GB/s (quant)
  double ratio;      // vs BF16 (gemm) or vs copy (quant)
  double ratio2;     // vs FP8 block, or for ours vs cuBLASLt's same GEMM (gemm); unused for quant
  std::string note;  // gemm: the bit-exactness check of ours
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
  const Device d = ops::cuda::init(o.device);  // the CUDA backend and its op table
  fp8train::cuda::select_device(o.device);
  fp8train::cuda::require_hopper("fp8train bench");
  c.info = fp8train::cuda::device_info(o.device);
  c.stream = fp8train::cuda::compute_stream(d);
  c.timer = std::make_unique<oc::GpuTimer>(c.stream);
  c.timing.warmup = o.warmup;
  c.timing.repeats = o.repeats;
  c.timing.flush_l2 = !o.no_flush;
  c.timing.clean_flush = o.clean_flush;
  std::fprintf(stderr, "device: %s, %s\n", c.info.describe().c_str(), oc::cublaslt_version().c_str());
  return c;
}

void add_run_info(nlohmann::json& j, const Context& ctx, const BenchOptions& o) {
  j["device"] = ctx.info.name;
  j["repeats"] = o.repeats;
  j["l2_flush"] = !o.no_flush;
  if (o.clean_flush) j["clean_flush"] = true;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t end = text.find(sep, pos);
    out.push_back(text.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) return out;
    pos = end + 1;
  }
}

int64_t parse_positive(const std::string& text, const std::string& what, const std::string& option, bool zero_ok) {
  int64_t v = -1;
  std::stringstream is(text);
  char extra = 0;
  FP8T_CHECK(static_cast<bool>(is >> v) && !(is >> extra) && (v > 0 || (zero_ok && v == 0)),
             "bench gemm: {}: '{}' in '{}' must be a {} integer", option, text, what,
             zero_ok ? "non-negative" : "positive");
  return v;
}

// ---- gemm: what to run ------------------------------------------------------------------------------------
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

// A MoE shape: tokens per expert, then the two other dimensions -- "8x4096:4096x7168" (8 experts of 4096 tokens)
// or "3900,4300,0,4100:4096x7168" (one count per expert). M-grouped experts: N x K; K-grouped Wgrad: M x N.
struct MoeShape {
  std::vector<int64_t> tokens;
  int64_t x = 0, y = 0;
  std::string text;
};

std::vector<MoeShape> parse_moe_shapes(const std::string& text, const std::string& option) {
  std::vector<MoeShape> out;
  for (const std::string& item : split(text, ';')) {
    const size_t colon = item.find(':');
    FP8T_CHECK(colon != std::string::npos,
               "bench gemm: {}: cannot read '{}' (expected EXPERTSxTOKENS:AxB or T1,T2,...:AxB, several separated "
               "by ';')", option, item);
    MoeShape s;
    s.text = item;
    const std::string tokens = item.substr(0, colon), dims = item.substr(colon + 1);
    const size_t x = tokens.find('x');
    if (x != std::string::npos) {
      const int64_t experts = parse_positive(tokens.substr(0, x), item, option, false);
      FP8T_CHECK(experts <= 1024, "bench gemm: {}: '{}' asks for {} experts (at most 1024)", option, item, experts);
      s.tokens.assign(static_cast<size_t>(experts), parse_positive(tokens.substr(x + 1), item, option, true));
    } else {
      for (const std::string& t : split(tokens, ',')) s.tokens.push_back(parse_positive(t, item, option, true));
    }
    const size_t dx = dims.find('x');
    FP8T_CHECK(dx != std::string::npos, "bench gemm: {}: '{}' must end in two dimensions AxB", option, item);
    s.x = parse_positive(dims.substr(0, dx), item, option, false);
    s.y = parse_positive(dims.substr(dx + 1), item, option, false);
    int64_t total = 0;
    for (int64_t t : s.tokens) total += t;
    FP8T_CHECK(total > 0, "bench gemm: {}: '{}' has no tokens", option, item);
    out.push_back(s);
  }
  return out;
}

struct Families {
  bool cublaslt = false, dense = false, wgrad = false, grouped = false;
};

Families parse_families(const std::string& text) {
  Families f;
  for (const std::string& name : split(text, ',')) {
    if (name == "all") f = {true, true, true, true};
    else if (name == "cublaslt") f.cublaslt = true;
    else if (name == "dense") f.dense = true;
    else if (name == "wgrad") f.wgrad = true;
    else if (name == "grouped") f.grouped = true;
    else FP8T_FAIL("bench gemm: --family '{}': unknown family '{}' (all, cublaslt, dense, wgrad, grouped)", text, name);
  }
  return f;
}

// The scale layouts the GEMM benchmarks time, named as --scales spells them.
const char* bench_layout_name(quant::ScaleLayout l) {
  return l == quant::ScaleLayout::GemmNative ? "native" : "row-major";
}

std::vector<quant::ScaleLayout> parse_scale_layouts(const std::string& text) {
  if (text == "native") return {quant::ScaleLayout::GemmNative};
  if (text == "row-major") return {quant::ScaleLayout::RowMajor};
  if (text == "both") return {quant::ScaleLayout::GemmNative, quant::ScaleLayout::RowMajor};
  FP8T_FAIL("bench gemm: --scales '{}' must be native, row-major or both", text);
}

// --config: "heuristic" or a configuration for oc::parse_fp8_gemm_config, several separated by ';'.
struct ConfigChoice {
  bool heuristic = true;
  oc::Fp8GemmConfig config;
};

std::vector<ConfigChoice> parse_configs(const std::string& text) {
  std::vector<ConfigChoice> out;
  for (const std::string& item : split(text, ';')) {
    FP8T_CHECK(!item.empty(), "bench gemm: --config '{}' has an empty entry (entries are separated by ';')", text);
    if (item == "heuristic") out.push_back({true, {}});
    else out.push_back({false, oc::parse_fp8_gemm_config(item)});
  }
  return out;
}

enum class Family { Dense, Wgrad, Grouped, KGroupedWgrad };

struct Variant {
  oc::Fp8GemmConfig config;
  const char* origin;  // "heuristic", "config", "sweep", "split-sweep"
};

bool same_config(const oc::Fp8GemmConfig& a, const oc::Fp8GemmConfig& b) {
  return a.block_m == b.block_m && a.block_n == b.block_n && a.multicast == b.multicast && a.grid == b.grid &&
         a.raster_group_m == b.raster_group_m && a.epilogue == b.epilogue && a.k_splits == b.k_splits;
}

// The configurations to time for one problem of a family: the --config list (the heuristic's by default), then
// with --sweep every built width x multicast mode and the 192-row tiles where they are built and M has more than
// two row blocks, then with --split-sweep (dense, M <= 256) every split-K width x range count with at least two K
// blocks per range. Duplicates run once.
std::vector<Variant> make_variants(Family family, const oc::Fp8GemmConfig& heuristic, int64_t m, int64_t k,
                                   const std::vector<ConfigChoice>& configs, const BenchOptions& o) {
  using MC = oc::Fp8GemmMulticast;
  std::vector<Variant> out;
  auto add = [&](const oc::Fp8GemmConfig& c, const char* origin) {
    for (const Variant& v : out)
      if (same_config(v.config, c)) return;
    out.push_back({c, origin});
  };
  for (const ConfigChoice& c : configs) add(c.heuristic ? heuristic : c.config, c.heuristic ? "heuristic" : "config");
  auto plain = [&](int block_m, int block_n, MC mc) {
    oc::Fp8GemmConfig c;
    c.block_m = block_m;
    c.block_n = block_n;
    c.multicast = mc;
    c.k_splits = heuristic.k_splits > 0 && family != Family::Dense ? heuristic.k_splits : 1;
    return c;
  };
  if (o.sweep) {
    int count = 0;
    const int* widths = family == Family::Dense     ? oc::fp8_gemm_dense_block_ns(&count)
                        : family == Family::Grouped ? oc::fp8_gemm_grouped_block_ns(&count)
                                                    : oc::fp8_gemm_wgrad_block_ns(&count);
    for (int i = 0; i < count; ++i)
      for (MC mc : {MC::None, MC::ShareA, MC::ShareB})
        if (family != Family::Grouped || mc != MC::ShareB) add(plain(128, widths[i], mc), "sweep");
    if (family != Family::Grouped && m > 256) {  // 192-row tiles: block_n 128; dense also with B multicast
      add(plain(192, 128, MC::None), "sweep");
      if (family == Family::Dense) add(plain(192, 128, MC::ShareB), "sweep");
    }
  }
  if (o.split_sweep && family == Family::Dense && m <= 256) {
    int count = 0;
    const int* widths = oc::fp8_gemm_dense_split_block_ns(&count);
    const int64_t kb = k / 128;
    for (int i = 0; i < count; ++i)
      for (int splits : {1, 2, 3, 4, 6, 8, 12, 16}) {
        if (splits > 1 && kb / splits < 2) continue;
        oc::Fp8GemmConfig c = plain(128, widths[i], MC::None);
        c.k_splits = splits;
        add(c, "split-sweep");
      }
  }
  return out;
}

// "128x192 mcB", "128x32 split2", "192x128 direct": a table-width summary of a configuration.
std::string short_config(const oc::Fp8GemmConfig& c) {
  std::string s =
      c.block_n == 0 ? std::string("auto") : fmt::format("{}x{}", c.block_m == 0 ? 128 : c.block_m, c.block_n);
  if (c.multicast == oc::Fp8GemmMulticast::ShareA) s += " mcA";
  if (c.multicast == oc::Fp8GemmMulticast::ShareB) s += " mcB";
  if (c.k_splits > 1) s += fmt::format(" split{}", c.k_splits);
  if (c.epilogue == oc::Fp8GemmEpilogue::Direct) s += " direct";
  if (c.epilogue == oc::Fp8GemmEpilogue::TmaStoreWarp) s += " ws";
  if (c.epilogue == oc::Fp8GemmEpilogue::TmaStoreWarp2) s += " ws2";
  if (c.grid > 0) s += fmt::format(" grid{}", c.grid);
  return s;
}

// ---- gemm: the bit-exactness check of ours ------------------------------------------------------------------
template <class T>
std::vector<T> download(const void* device, size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  if (count == 0) return host;
  FP8T_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}
template <class T>
void upload(void* device, const std::vector<T>& host, cudaStream_t stream) {
  if (host.empty()) return;
  FP8T_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream));
}
// [outer][inner] -> [inner][outer]: between the MN-major (native) and row-major scale layouts.
std::vector<float> transpose(const std::vector<float>& v, int64_t outer, int64_t inner, int64_t inner_ld) {
  std::vector<float> t(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      t[static_cast<size_t>(i * outer + o)] = v[static_cast<size_t>(o * inner_ld + i)];
  return t;
}

struct CheckResult {
  int checked = 0, bad = 0;
  std::string first;
  std::string note() const {
    return bad == 0 ? fmt::format("exact {}/{}", checked, checked)
                    : fmt::format("MISMATCH {}/{} first {}", bad, checked, first);
  }
};

// One GEMM D[i, j] = finish(i, j, dot(A row i, B row j)) of `rows` x `cols` outputs over `k`, checked on `samples`
// random outputs and the two corners against num::hopper_dot_scaled_split: the model of the kernels' arithmetic,
// with the split-K ranges the launch used. a_row / b_row give the row's first K element, scale_a / scale_b the
// scale of (row, K block).
struct CheckSpec {
  int64_t rows = 0, cols = 0, k = 0;
  int k_splits = 1;
  bool int8 = false;  // the operands' bytes are INT8 codes: exact integer sums per 128 block (K a multiple of 128)
  std::function<const uint8_t*(int64_t)> a_row, b_row;
  std::function<float(int64_t, int64_t)> scale_a, scale_b;
  std::function<uint32_t(int64_t, int64_t)> got;
  std::function<uint32_t(int64_t, int64_t, float)> want;
};

// The INT8 kernels' arithmetic (quant::ref_gemm's for INT8 x INT8): per 128 block the exact integer sum of the
// products, then acc = fma(sa * sb, float(sum), acc) with the scale product rounded first.
float int8_dot_scaled(const uint8_t* a, const float* sa, const uint8_t* b, const float* sb, int64_t k) {
  float acc = 0.0f;
  for (int64_t g = 0; g < k / 128; ++g) {
    int32_t sum = 0;
    for (int64_t i = 128 * g; i < 128 * (g + 1); ++i)
      sum += static_cast<int32_t>(static_cast<int8_t>(a[i])) * static_cast<int32_t>(static_cast<int8_t>(b[i]));
    const float scale = sa[g] * sb[g];
    acc = std::fma(scale, static_cast<float>(sum), acc);
  }
  return acc;
}

void check_outputs(const CheckSpec& s, int samples, uint64_t seed, CheckResult& r) {
  if (s.rows == 0 || s.cols == 0) return;
  std::mt19937_64 gen(seed);
  std::vector<std::pair<int64_t, int64_t>> points = {{0, 0}, {s.rows - 1, s.cols - 1}};
  for (int i = 0; i < samples; ++i)
    points.push_back({static_cast<int64_t>(gen() % s.rows), static_cast<int64_t>(gen() % s.cols)});
  const int64_t kb = s.k / 128;
  std::vector<float> sa(static_cast<size_t>(kb)), sb(static_cast<size_t>(kb));
  for (auto [i, j] : points) {
    for (int64_t g = 0; g < kb; ++g) {
      sa[g] = s.scale_a(i, g);
      sb[g] = s.scale_b(j, g);
    }
    const float acc =
        s.int8 ? int8_dot_scaled(s.a_row(i), sa.data(), s.b_row(j), sb.data(), s.k)
               : num::hopper_dot_scaled_split(s.a_row(i), num::Fp8Format::E4M3, sa.data(), s.b_row(j),
                                              num::Fp8Format::E4M3, sb.data(), static_cast<int>(s.k), 128, s.k_splits);
    const uint32_t want = s.want(i, j, acc), got = s.got(i, j);
    ++r.checked;
    if (want != got) {
      if (r.bad == 0) r.first = fmt::format("({}, {}): got 0x{:x} want 0x{:x}", i, j, got, want);
      ++r.bad;
    }
  }
}

// ---- gemm: timing one family's configurations ---------------------------------------------------------------
using Launch = std::function<void(cudaStream_t)>;

// One problem of ours, ready to run under any configuration of its family.
struct OwnProblem {
  const char* case_name;
  Family family;
  nlohmann::json dims;  // m, n, k (and groups, tokens)
  std::string label;    // the shape in the table
  double flops = 0, bytes = 0;
  oc::Fp8GemmConfig heuristic;
  int64_t m = 0, k = 0;
  std::function<void(const oc::Fp8GemmConfig&, cudaStream_t)> run;  // the timed launch
  std::function<CheckResult(const oc::Fp8GemmConfig&, int samples)> check;
  Launch ref;  // cuBLASLt's launch of the same GEMM (empty: none, or it failed or was not run)
  double bf16_ms = 0, block_ms = 0;
};

struct Failures {
  int errors = 0, mismatches = 0;
};

void bench_own(const Context& ctx, const BenchOptions& o, const OwnProblem& p, quant::ScaleLayout layout,
               const std::vector<ConfigChoice>& configs, std::vector<Row>& rows, Failures& failures) {
  if (!o.filter.empty() && std::string(p.case_name).find(o.filter) == std::string::npos) return;
  for (const Variant& v : make_variants(p.family, p.heuristic, p.m, p.k, configs, o)) {
    nlohmann::json j = {{"bench", "gemm"}, {"case", p.case_name}};
    j.update(p.dims);
    j["config"] = v.config.describe();
    j["origin"] = v.origin;
    j["scales"] = bench_layout_name(layout);
    const std::string name = fmt::format("{:<24} {} {}", p.case_name, p.label, short_config(v.config));
    try {
      CheckResult c;
      if (o.check > 0) {
        c = p.check(v.config, o.check);
        j["check"] = c.note();
        if (c.bad > 0) ++failures.mismatches;
      }
      const Launch run = [&](cudaStream_t s) { p.run(v.config, s); };
      oc::Timing t, ref;
      if (p.ref) std::tie(t, ref) = ctx.timer->time_pair(run, p.ref, ctx.timing);
      else t = ctx.timer->time(run, ctx.timing);
      const double tflops = p.flops / (t.median_ms * 1e-3) / 1e12;
      j["median_us"] = t.median_ms * 1e3;
      j["min_us"] = t.min_ms * 1e3;
      j["tflops"] = tflops;
      j["gbps"] = p.bytes / (t.median_ms * 1e-3) / 1e9;
      const double vs_bf16 = p.bf16_ms > 0 ? p.bf16_ms / t.median_ms : 0.0;
      if (p.family == Family::Dense || p.family == Family::Wgrad) {  // 0: that baseline did not run
        j["vs_bf16"] = vs_bf16;
        j["vs_fp8_block"] = p.block_ms > 0 ? p.block_ms / t.median_ms : 0.0;
        j["vs_cublaslt_same_gemm"] = p.ref ? ref.median_ms / t.median_ms : 0.0;
        j["cublaslt_interleaved_us"] = ref.median_ms * 1e3;
      }
      rows.push_back({name, t.median_ms * 1e3, tflops, vs_bf16, p.ref ? ref.median_ms / t.median_ms : 0.0,
                      o.check > 0 ? c.note() : std::string("unchecked")});
    } catch (const Error& e) {
      j["error"] = e.what();
      ++failures.errors;
      rows.push_back({name + " ERROR", 0, 0, 0, 0, ""});
    }
    add_run_info(j, ctx, o);
    emit(j);
  }
}

// ---- gemm: the dense shapes (cuBLASLt cases, ours dense and Wgrad, memory floor) ------------------------------
// Operands of one dense shape on the device, in cuBLASLt's native scale layouts (A [K/128, M], B blocks
// [N/128, round4(K/128)], B tiles [K/128, N]), plus row-major copies of the scales and host copies for the check
// when asked for.
struct DenseOperands {
  int64_t m, n, k, kb, kb4, nb;
  DeviceBuffer a16, b16, a8, b8, sa, sb_blk, sb_tile, st, d16, d32;
  DeviceBuffer sa_rm, sb_blk_rm, sb_tile_rm;  // row-major scales (--scales row-major|both)
  std::vector<uint8_t> ha, hb;                // host copies (--check)
  std::vector<float> hsa, hsb_blk, hsb_tile;

  DenseOperands(const GemmShape& s, uint64_t& seed, cudaStream_t stream)
      : m(s.m), n(s.n), k(s.k), kb((s.k + 127) / 128), kb4((kb + 3) / 4 * 4), nb((s.n + 127) / 128),
        a16(m * k * 2, stream), b16(n * k * 2, stream), a8(m * k, stream), b8(n * k, stream), sa(m * kb * 4, stream),
        sb_blk(nb * kb4 * 4, stream), sb_tile(n * kb * 4, stream), st(32, stream), d16(m * n * 2, stream),
        d32(m * n * 4, stream) {
    oc::fill_random_bf16(a16.as<uint16_t>(), m * k, seed++, 1.0f, stream);
    oc::fill_random_bf16(b16.as<uint16_t>(), n * k, seed++, 1.0f, stream);
    oc::fill_random_fp8(a8.as<uint8_t>(), m * k, seed++, false, stream);
    oc::fill_random_fp8(b8.as<uint8_t>(), n * k, seed++, false, stream);
    oc::fill_random_positive(sa.as<float>(), m * kb, seed++, 1e-3f, 2e-3f, stream);
    oc::fill_random_positive(sb_blk.as<float>(), nb * kb4, seed++, 1e-3f, 2e-3f, stream);
    oc::fill_random_positive(sb_tile.as<float>(), n * kb, seed++, 1e-3f, 2e-3f, stream);
    oc::fill_random_positive(st.as<float>(), 8, seed++, 1e-3f, 2e-3f, stream);
    oc::fill_random_f32(d32.as<float>(), m * n, seed++, 1.0f, stream);
  }
  void make_host_copies(cudaStream_t stream) {
    if (!ha.empty()) return;
    ha = download<uint8_t>(a8.get(), static_cast<size_t>(m * k), stream);
    hb = download<uint8_t>(b8.get(), static_cast<size_t>(n * k), stream);
    hsa = download<float>(sa.get(), static_cast<size_t>(m * kb), stream);
    hsb_blk = download<float>(sb_blk.get(), static_cast<size_t>(nb * kb4), stream);
    hsb_tile = download<float>(sb_tile.get(), static_cast<size_t>(n * kb), stream);
  }
  void make_row_major_scales(cudaStream_t stream) {
    if (sa_rm.get() != nullptr) return;
    make_host_copies(stream);
    sa_rm = DeviceBuffer(m * kb * 4, stream);
    sb_blk_rm = DeviceBuffer(nb * kb * 4, stream);
    sb_tile_rm = DeviceBuffer(n * kb * 4, stream);
    upload(sa_rm.get(), transpose(hsa, kb, m, m), stream);  // [kb][m] -> [m][kb]
    std::vector<float> blk(static_cast<size_t>(nb * kb));  // [nb][kb4] -> [nb][kb]
    for (int64_t r = 0; r < nb; ++r)
      for (int64_t g = 0; g < kb; ++g) blk[r * kb + g] = hsb_blk[r * kb4 + g];
    upload(sb_blk_rm.get(), blk, stream);
    upload(sb_tile_rm.get(), transpose(hsb_tile, kb, n, n), stream);
  }
};

OwnProblem dense_problem(DenseOperands& x, quant::ScaleLayout layout, bool int8, cudaStream_t stream) {
  const bool native = layout == quant::ScaleLayout::GemmNative;
  oc::Fp8GemmDenseProblem dp;
  dp.int8 = int8;
  dp.m = x.m;
  dp.n = x.n;
  dp.k = x.k;
  dp.a = x.a8.as<uint8_t>();
  dp.b = x.b8.as<uint8_t>();
  dp.a_scales =
      native ? oc::ScaleView{x.sa.as<float>(), 1, x.m, 0} : oc::row_major_scale_view(x.sa_rm.as<float>(), x.kb);
  dp.b_scales = native ? oc::ScaleView{x.sb_blk.as<float>(), x.kb4, 1, 0}
                       : oc::row_major_scale_view(x.sb_blk_rm.as<float>(), x.kb);
  dp.d = x.d16.as<uint16_t>();
  OwnProblem p;
  p.case_name = int8 ? "ours_int8_1x128_128x128" : "ours_fp8_1x128_128x128";
  p.family = Family::Dense;
  p.dims = {{"m", x.m}, {"n", x.n}, {"k", x.k}};
  p.label = fmt::format("{:>5}x{:>5}x{:>5}", x.m, x.n, x.k);
  p.flops = 2.0 * x.m * x.n * x.k;
  p.bytes = 1.0 * (x.m * x.k + x.n * x.k) + 2.0 * x.m * x.n;
  // INT8: the family's one INT8 build (the empty config; fp8_gemm.h).
  p.heuristic = int8 ? oc::Fp8GemmConfig{} : oc::fp8_gemm_dense_heuristic(x.m, x.n, x.k, oc::fp8_gemm_num_sms());
  p.m = x.m;
  p.k = x.k;
  p.run = [dp](const oc::Fp8GemmConfig& c, cudaStream_t s) { oc::fp8_gemm_dense(dp, c, s); };
  p.check = [dp, &x, stream](const oc::Fp8GemmConfig& c, int samples) {
    x.make_host_copies(stream);
    FP8T_CUDA_CHECK(cudaMemsetAsync(x.d16.get(), 0xA5, x.d16.bytes(), stream));
    const int splits = oc::fp8gemm::prepare_dense(dp, c, stream).args.k_splits;
    oc::fp8_gemm_dense(dp, c, stream);
    const std::vector<uint16_t> d = download<uint16_t>(x.d16.get(), static_cast<size_t>(x.m * x.n), stream);
    CheckSpec s;
    s.rows = x.m;
    s.cols = x.n;
    s.k = x.k;
    s.k_splits = splits;
    s.int8 = dp.int8;
    s.a_row = [&](int64_t i) { return x.ha.data() + i * x.k; };
    s.b_row = [&](int64_t j) { return x.hb.data() + j * x.k; };
    s.scale_a = [&](int64_t i, int64_t g) { return x.hsa[g * x.m + i]; };
    s.scale_b = [&](int64_t j, int64_t g) { return x.hsb_blk[(j / 128) * x.kb4 + g]; };
    s.got = [&](int64_t i, int64_t j) -> uint32_t { return d[i * x.n + j]; };
    s.want = [](int64_t, int64_t, float acc) -> uint32_t { return num::bf16_encode(acc); };
    CheckResult r;
    check_outputs(s, samples, 11, r);
    return r;
  };
  return p;
}

OwnProblem wgrad_problem(DenseOperands& x, quant::ScaleLayout layout, bool int8, DeviceBuffer& c0, DeviceBuffer& dcheck,
                         std::vector<float>& hc, cudaStream_t stream) {
  const bool native = layout == quant::ScaleLayout::GemmNative;
  oc::Fp8GemmWgradProblem wp;
  wp.int8 = int8;
  wp.m = x.m;
  wp.n = x.n;
  wp.k = x.k;
  wp.a = x.a8.as<uint8_t>();
  wp.b = x.b8.as<uint8_t>();
  wp.a_scales =
      native ? oc::ScaleView{x.sa.as<float>(), 1, x.m, 0} : oc::row_major_scale_view(x.sa_rm.as<float>(), x.kb);
  wp.b_scales = native ? oc::ScaleView{x.sb_tile.as<float>(), 1, x.n, 0}
                       : oc::row_major_scale_view(x.sb_tile_rm.as<float>(), x.kb);
  wp.c = x.d32.as<float>();  // timed in place, as gradient accumulation runs
  wp.d = x.d32.as<float>();
  OwnProblem p;
  p.case_name = int8 ? "ours_int8_1x128_1x128_f32_acc" : "ours_fp8_1x128_1x128_f32_acc";
  p.family = Family::Wgrad;
  p.dims = {{"m", x.m}, {"n", x.n}, {"k", x.k}};
  p.label = fmt::format("{:>5}x{:>5}x{:>5}", x.m, x.n, x.k);
  p.flops = 2.0 * x.m * x.n * x.k;
  p.bytes = 1.0 * (x.m * x.k + x.n * x.k) + 8.0 * x.m * x.n;
  p.heuristic = int8 ? oc::Fp8GemmConfig{} : oc::fp8_gemm_wgrad_heuristic(x.m, x.n, x.k, 1, oc::fp8_gemm_num_sms());
  p.m = x.m;
  p.k = x.k;
  p.run = [wp](const oc::Fp8GemmConfig& c, cudaStream_t s) { oc::fp8_gemm_wgrad(wp, c, s); };
  p.check = [wp, &x, &c0, &dcheck, &hc, stream](const oc::Fp8GemmConfig& c, int samples) {
    x.make_host_copies(stream);
    if (c0.get() == nullptr) {  // C as it stands now, before the timed launches accumulate into it
      c0 = DeviceBuffer(x.m * x.n * 4, stream);
      dcheck = DeviceBuffer(x.m * x.n * 4, stream);
      FP8T_CUDA_CHECK(cudaMemcpyAsync(c0.get(), x.d32.get(), c0.bytes(), cudaMemcpyDeviceToDevice, stream));
      hc = download<float>(c0.get(), static_cast<size_t>(x.m * x.n), stream);
    }
    oc::Fp8GemmWgradProblem checked = wp;  // in place, as timed (the staged epilogue serves that form)
    checked.c = dcheck.as<float>();
    checked.d = dcheck.as<float>();
    FP8T_CUDA_CHECK(cudaMemcpyAsync(dcheck.get(), c0.get(), dcheck.bytes(), cudaMemcpyDeviceToDevice, stream));
    oc::fp8_gemm_wgrad(checked, c, stream);
    const std::vector<float> d = download<float>(dcheck.get(), static_cast<size_t>(x.m * x.n), stream);
    CheckSpec s;
    s.rows = x.m;
    s.cols = x.n;
    s.k = x.k;
    s.int8 = wp.int8;
    s.a_row = [&](int64_t i) { return x.ha.data() + i * x.k; };
    s.b_row = [&](int64_t j) { return x.hb.data() + j * x.k; };
    s.scale_a = [&](int64_t i, int64_t g) { return x.hsa[g * x.m + i]; };
    s.scale_b = [&](int64_t j, int64_t g) { return x.hsb_tile[g * x.n + j]; };
    s.got = [&](int64_t i, int64_t j) { return num::float_bits(d[i * x.n + j]); };
    s.want = [&](int64_t i, int64_t j, float acc) { return num::float_bits(hc[i * x.n + j] + acc); };
    CheckResult r;
    check_outputs(s, samples, 13, r);
    return r;
  };
  return p;
}

// The memory floor of a few-row shape: a kernel that only reads B, then one that reads A and B, each once, in
// the same timing as the GEMMs; TFLOP/s as if the GEMM took that long.
void bench_floor(const Context& ctx, const BenchOptions& o, const DenseOperands& x, std::vector<Row>& rows) {
  DeviceBuffer sink(16, ctx.stream);
  const double flops = 2.0 * x.m * x.n * x.k;
  struct FloorCase {
    const char* name;
    double bytes;
    Launch run;
  };
  const size_t a_bytes = static_cast<size_t>(x.m * x.k) / 16 * 16, b_bytes = static_cast<size_t>(x.n * x.k) / 16 * 16;
  const FloorCase cases[] = {
      {"floor_read_b", static_cast<double>(b_bytes),
       [&](cudaStream_t s) { oc::read_only(x.b8.get(), b_bytes, sink.as<unsigned>(), s); }},
      {"floor_read_a_b", static_cast<double>(a_bytes + b_bytes),
       [&](cudaStream_t s) {
         oc::read_only(x.a8.get(), a_bytes, sink.as<unsigned>(), s);
         oc::read_only(x.b8.get(), b_bytes, sink.as<unsigned>(), s);
       }},
  };
  for (const FloorCase& c : cases) {
    const oc::Timing t = ctx.timer->time(c.run, ctx.timing);
    nlohmann::json j = {{"bench", "gemm"}, {"case", c.name}, {"m", x.m}, {"n", x.n}, {"k", x.k}};
    j["median_us"] = t.median_ms * 1e3;
    j["min_us"] = t.min_ms * 1e3;
    j["bytes"] = c.bytes;
    j["gbps"] = c.bytes / (t.median_ms * 1e-3) / 1e9;
    j["tflops"] = flops / (t.median_ms * 1e-3) / 1e12;
    add_run_info(j, ctx, o);
    emit(j);
    rows.push_back({fmt::format("{:<24} {:>5}x{:>5}x{:>5}", c.name, x.m, x.n, x.k), t.median_ms * 1e3,
                    j["tflops"].get<double>(), 0, 0, ""});
  }
}

void bench_dense_shape(const Context& ctx, const BenchOptions& o, const Families& fam, const GemmShape& shape,
                       const std::vector<quant::ScaleLayout>& layouts, const std::vector<ConfigChoice>& configs,
                       uint64_t& seed, std::vector<Row>& rows, Failures& failures) {
  oc::CublasLtGemm& gemm = oc::cublaslt_gemm(o.device);
  DenseOperands x(shape, seed, ctx.stream);
  const int64_t M = x.m, N = x.n, K = x.k;

  struct Case {
    const char* name;
    oc::CublasLtProblem p;
    const void *a, *b;
    const float *sa, *sb;
    void* d;
  };
  auto problem = [&](oc::GemmInput t, oc::OperandScaling as, oc::OperandScaling bs, oc::GemmOutput out) {
    oc::CublasLtProblem p;
    p.m = M;
    p.n = N;
    p.k = K;
    p.a_type = p.b_type = t;
    p.a_scaling = as;
    p.b_scaling = bs;
    p.a_scale_layout = p.b_scale_layout = quant::ScaleLayout::GemmNative;
    p.out = out;
    return p;
  };
  using oc::GemmInput;
  using oc::GemmOutput;
  using oc::OperandScaling;
  std::vector<Case> cases;
  cases.push_back({"bf16", problem(GemmInput::BF16, OperandScaling::None, OperandScaling::None, GemmOutput::BF16),
                   x.a16.get(), x.b16.get(), nullptr, nullptr, x.d16.get()});
  cases.push_back({"fp8_1x128_128x128",
                   problem(GemmInput::E4M3, OperandScaling::Tile1x128, OperandScaling::Block128x128, GemmOutput::BF16),
                   x.a8.get(), x.b8.get(), x.sa.as<float>(), x.sb_blk.as<float>(), x.d16.get()});
  cases.push_back({"fp8_tensor",
                   problem(GemmInput::E4M3, OperandScaling::Tensor, OperandScaling::Tensor, GemmOutput::BF16),
                   x.a8.get(), x.b8.get(), x.st.as<float>(), x.st.as<float>() + 4, x.d16.get()});
  Case fast{"fp8_tensor_fast",
            problem(GemmInput::E4M3, OperandScaling::Tensor, OperandScaling::Tensor, GemmOutput::BF16), x.a8.get(),
            x.b8.get(), x.st.as<float>(), x.st.as<float>() + 4, x.d16.get()};
  fast.p.fast_accum = true;
  cases.push_back(fast);
  Case wgrad{"fp8_1x128_1x128_f32_acc",
             problem(GemmInput::E4M3, OperandScaling::Tile1x128, OperandScaling::Tile1x128, GemmOutput::F32),
             x.a8.get(), x.b8.get(), x.sa.as<float>(), x.sb_tile.as<float>(), x.d32.get()};
  wgrad.p.accumulate = true;
  cases.push_back(wgrad);

  // The cuBLASLt cases: all of them for --family cublaslt (those matching --filter), and whichever serve as
  // baselines of ours (BF16, the block-scaled Fprop, the Wgrad form) unless --no-baselines.
  double bf16_ms = 0, block_ms = 0;
  Launch lt_block, lt_wgrad;  // the cuBLASLt cases our kernels are compared with, when they ran
  for (const Case& c : cases) {
    const std::string name = c.name;
    const bool baseline = name == "bf16" || (name == "fp8_1x128_128x128" && (fam.cublaslt || fam.dense)) ||
                          (name == "fp8_1x128_1x128_f32_acc" && fam.wgrad);
    const bool wanted = fam.cublaslt && (o.filter.empty() || name.find(o.filter) != std::string::npos);
    if (!wanted && !(baseline && !o.no_baselines && (fam.cublaslt || fam.dense || fam.wgrad))) continue;
    nlohmann::json j = {{"bench", "gemm"}, {"case", c.name}, {"m", M}, {"n", N}, {"k", K}};
    try {
      const Launch run = [&gemm, c](cudaStream_t st_) { gemm.run(c.p, c.a, c.sa, c.b, c.sb, c.d, st_); };
      const oc::Timing t = ctx.timer->time(run, ctx.timing);
      if (name == "bf16") bf16_ms = t.median_ms;
      if (name == "fp8_1x128_128x128") {
        block_ms = t.median_ms;
        lt_block = run;
      }
      if (name == "fp8_1x128_1x128_f32_acc") lt_wgrad = run;
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
                      j["vs_bf16"].get<double>(), j["vs_fp8_block"].get<double>(), ""});
    } catch (const Error& e) {
      j["error"] = e.what();
      rows.push_back({fmt::format("{:<24} {:>5}x{:>5}x{:>5} ERROR", c.name, M, N, K), 0, 0, 0, 0, ""});
    }
    add_run_info(j, ctx, o);
    emit(j);
  }

  if (fam.dense && o.floor && M <= 256) bench_floor(ctx, o, x, rows);
  if (K % 128 != 0 || N % 16 != 0) return;  // shapes our kernels do not take
  DeviceBuffer c0, dcheck;  // the Wgrad check's C and output (allocated on first use)
  std::vector<float> hc;
  for (quant::ScaleLayout layout : layouts) {
    if (layout == quant::ScaleLayout::RowMajor) x.make_row_major_scales(ctx.stream);
    // cuBLASLt reads the native layouts: the interleaved comparison is made on those only.
    const bool native = layout == quant::ScaleLayout::GemmNative;
    if (fam.dense) {
      OwnProblem p = dense_problem(x, layout, o.int8, ctx.stream);
      p.bf16_ms = bf16_ms;
      p.block_ms = block_ms;
      if (native && !o.int8) p.ref = lt_block;  // (cuBLASLt has no INT8 form of the same GEMM)
      bench_own(ctx, o, p, layout, configs, rows, failures);
    }
    if (fam.wgrad) {
      OwnProblem p = wgrad_problem(x, layout, o.int8, c0, dcheck, hc, ctx.stream);
      p.bf16_ms = bf16_ms;
      p.block_ms = block_ms;
      if (native && !o.int8) p.ref = lt_wgrad;
      bench_own(ctx, o, p, layout, configs, rows, failures);
    }
  }
}

// ---- gemm: MoE shapes (M-grouped experts, K-grouped Wgrad) ------------------------------------------------
// Group offsets padded to 128 (rows of the M-grouped family, K of the K-grouped Wgrad), as routing pads them.
std::vector<int32_t> padded_offsets(const std::vector<int64_t>& tokens) {
  std::vector<int32_t> off(tokens.size() + 1, 0);
  for (size_t e = 0; e < tokens.size(); ++e) {
    const int64_t next = off[e] + (tokens[e] + 127) / 128 * 128;
    FP8T_CHECK(next < (int64_t{1} << 31), "bench gemm: {} tokens in all do not fit the kernels' 31-bit offsets", next);
    off[e + 1] = static_cast<int32_t>(next);
  }
  return off;
}

std::string tokens_label(const std::vector<int64_t>& tokens) {
  const bool even = std::all_of(tokens.begin(), tokens.end(), [&](int64_t t) { return t == tokens[0]; });
  int64_t total = 0;
  for (int64_t t : tokens) total += t;
  return even ? fmt::format("{}x{}", tokens.size(), tokens[0]) : fmt::format("{}e {}tok uneven", tokens.size(), total);
}

void bench_grouped_shape(const Context& ctx, const BenchOptions& o, const MoeShape& shape,
                         const std::vector<quant::ScaleLayout>& layouts, const std::vector<ConfigChoice>& configs,
                         uint64_t& seed, std::vector<Row>& rows, Failures& failures) {
  const cudaStream_t stream = ctx.stream;
  const int groups = static_cast<int>(shape.tokens.size());
  const std::vector<int32_t> off = padded_offsets(shape.tokens);
  const int64_t m = off[groups], n = shape.x, k = shape.y;
  FP8T_CHECK(k % 128 == 0 && n % 16 == 0, "bench gemm: --grouped-shapes '{}': K must be a multiple of 128 and N of 16",
             shape.text);
  const int64_t kb = k / 128, kb4 = (kb + 3) / 4 * 4, nb = (n + 127) / 128;
  int64_t tokens = 0;
  for (int64_t t : shape.tokens) tokens += t;
  DeviceBuffer a(m * k, stream), b(groups * n * k, stream), sa(m * kb * 4, stream), sb(groups * nb * kb4 * 4, stream),
      d(m * n * 2, stream), doff(off.size() * 4, stream), sa_rm(m * kb * 4, stream),
      sb_rm(groups * nb * kb * 4, stream);
  oc::fill_random_fp8(a.as<uint8_t>(), m * k, seed++, false, stream);
  oc::fill_random_fp8(b.as<uint8_t>(), groups * n * k, seed++, false, stream);
  oc::fill_random_positive(sa.as<float>(), m * kb, seed++, 1e-3f, 2e-3f, stream);           // [kb][m]
  oc::fill_random_positive(sb.as<float>(), groups * nb * kb4, seed++, 1e-3f, 2e-3f, stream);  // [e][nb][kb4]
  upload(doff.get(), off, stream);
  const std::vector<float> hsa = download<float>(sa.get(), static_cast<size_t>(m * kb), stream);
  const std::vector<float> hsb = download<float>(sb.get(), static_cast<size_t>(groups * nb * kb4), stream);
  upload(sa_rm.get(), transpose(hsa, kb, m, m), stream);
  std::vector<float> blk(static_cast<size_t>(groups * nb * kb));
  for (int64_t r = 0; r < groups * nb; ++r)
    for (int64_t g = 0; g < kb; ++g) blk[r * kb + g] = hsb[r * kb4 + g];
  upload(sb_rm.get(), blk, stream);
  std::vector<uint8_t> ha, hb;
  if (o.check > 0) {
    ha = download<uint8_t>(a.get(), static_cast<size_t>(m * k), stream);
    hb = download<uint8_t>(b.get(), static_cast<size_t>(groups * n * k), stream);
  }
  for (quant::ScaleLayout layout : layouts) {
    oc::Fp8GemmGroupedProblem gp;
    gp.m_total = m;
    gp.n = n;
    gp.k = k;
    gp.num_groups = groups;
    gp.row_offsets = doff.as<int32_t>();
    gp.a = a.as<uint8_t>();
    gp.b = b.as<uint8_t>();
    gp.a_scales = layout == quant::ScaleLayout::GemmNative ? oc::ScaleView{sa.as<float>(), 1, m, 0}
                                                : oc::row_major_scale_view(sa_rm.as<float>(), kb);
    gp.b_scales = layout == quant::ScaleLayout::GemmNative ? oc::ScaleView{sb.as<float>(), kb4, 1, nb * kb4}
                                                : oc::row_major_scale_view(sb_rm.as<float>(), kb, nb * kb);
    gp.d = d.as<uint16_t>();
    gp.int8 = o.int8;
    OwnProblem p;
    p.case_name = o.int8 ? "ours_int8_grouped_1x128_128x128" : "ours_fp8_grouped_1x128_128x128";
    p.family = Family::Grouped;
    p.dims = {{"m", tokens}, {"m_padded", m}, {"n", n}, {"k", k}, {"groups", groups}, {"tokens", shape.tokens}};
    p.label = fmt::format("{} n{} k{}", tokens_label(shape.tokens), n, k);
    p.flops = 2.0 * tokens * n * k;  // the real tokens' (padding rows are overhead the kernel pays)
    p.bytes = 1.0 * (m * k + groups * n * k) + 2.0 * m * n;
    p.heuristic = o.int8 ? oc::Fp8GemmConfig{} : oc::fp8_gemm_grouped_heuristic(m, n, k, oc::fp8_gemm_num_sms());
    p.m = m;
    p.k = k;
    p.run = [gp](const oc::Fp8GemmConfig& c, cudaStream_t s) { oc::fp8_gemm_grouped(gp, c, s); };
    p.check = [&, gp](const oc::Fp8GemmConfig& c, int samples) {
      FP8T_CUDA_CHECK(cudaMemsetAsync(d.get(), 0xA5, d.bytes(), stream));
      oc::fp8_gemm_grouped(gp, c, stream);
      const std::vector<uint16_t> hd = download<uint16_t>(d.get(), static_cast<size_t>(m * n), stream);
      CheckResult r;
      for (int e = 0; e < groups; ++e) {
        CheckSpec s;
        s.rows = off[e + 1] - off[e];
        s.cols = n;
        s.k = k;
        s.int8 = gp.int8;
        s.a_row = [&](int64_t i) { return ha.data() + (off[e] + i) * k; };
        s.b_row = [&](int64_t j) { return hb.data() + (e * n + j) * k; };
        s.scale_a = [&](int64_t i, int64_t g) { return hsa[g * m + off[e] + i]; };
        s.scale_b = [&](int64_t j, int64_t g) { return hsb[(e * nb + j / 128) * kb4 + g]; };
        s.got = [&](int64_t i, int64_t j) -> uint32_t { return hd[(off[e] + i) * n + j]; };
        s.want = [](int64_t, int64_t, float acc) -> uint32_t { return num::bf16_encode(acc); };
        check_outputs(s, std::max(1, samples / groups), 31 + e, r);
      }
      return r;
    };
    bench_own(ctx, o, p, layout, configs, rows, failures);
  }
}

void bench_kgrouped_shape(const Context& ctx, const BenchOptions& o, const MoeShape& shape,
                          const std::vector<quant::ScaleLayout>& layouts, const std::vector<ConfigChoice>& configs,
                          uint64_t& seed, std::vector<Row>& rows, Failures& failures) {
  const cudaStream_t stream = ctx.stream;
  const int groups = static_cast<int>(shape.tokens.size());
  const std::vector<int32_t> off = padded_offsets(shape.tokens);
  const int64_t m = shape.x, n = shape.y, k = off[groups], kb = k / 128;
  FP8T_CHECK(n % 16 == 0, "bench gemm: --kgrouped-shapes '{}': N must be a multiple of 16", shape.text);
  int64_t tokens = 0;
  for (int64_t t : shape.tokens) tokens += t;
  DeviceBuffer a(m * k, stream), b(n * k, stream), sa(m * kb * 4, stream), sb(n * kb * 4, stream),
      c(groups * m * n * 4, stream), d(groups * m * n * 4, stream), doff(off.size() * 4, stream),
      sa_rm(m * kb * 4, stream), sb_rm(n * kb * 4, stream);
  oc::fill_random_fp8(a.as<uint8_t>(), m * k, seed++, false, stream);
  oc::fill_random_fp8(b.as<uint8_t>(), n * k, seed++, false, stream);
  oc::fill_random_positive(sa.as<float>(), m * kb, seed++, 1e-3f, 2e-3f, stream);  // [kb][m]
  oc::fill_random_positive(sb.as<float>(), n * kb, seed++, 1e-3f, 2e-3f, stream);  // [kb][n]
  oc::fill_random_f32(c.as<float>(), groups * m * n, seed++, 1.0f, stream);
  upload(doff.get(), off, stream);
  const std::vector<float> hsa = download<float>(sa.get(), static_cast<size_t>(m * kb), stream);
  const std::vector<float> hsb = download<float>(sb.get(), static_cast<size_t>(n * kb), stream);
  const std::vector<float> hc = download<float>(c.get(), static_cast<size_t>(groups * m * n), stream);
  upload(sa_rm.get(), transpose(hsa, kb, m, m), stream);
  upload(sb_rm.get(), transpose(hsb, kb, n, n), stream);
  FP8T_CUDA_CHECK(cudaMemcpyAsync(d.get(), c.get(), d.bytes(), cudaMemcpyDeviceToDevice, stream));
  std::vector<uint8_t> ha, hb;
  if (o.check > 0) {
    ha = download<uint8_t>(a.get(), static_cast<size_t>(m * k), stream);
    hb = download<uint8_t>(b.get(), static_cast<size_t>(n * k), stream);
  }
  DeviceBuffer dcheck;
  if (o.check > 0) dcheck = DeviceBuffer(groups * m * n * 4, stream);
  for (quant::ScaleLayout layout : layouts) {
    oc::Fp8GemmWgradProblem wp;
    wp.m = m;
    wp.n = n;
    wp.k = k;
    wp.num_groups = groups;
    wp.k_offsets = doff.as<int32_t>();
    wp.a = a.as<uint8_t>();
    wp.b = b.as<uint8_t>();
    wp.a_scales = layout == quant::ScaleLayout::GemmNative ? oc::ScaleView{sa.as<float>(), 1, m, 0}
                                                : oc::row_major_scale_view(sa_rm.as<float>(), kb);
    wp.b_scales = layout == quant::ScaleLayout::GemmNative ? oc::ScaleView{sb.as<float>(), 1, n, 0}
                                                : oc::row_major_scale_view(sb_rm.as<float>(), kb);
    wp.c = d.as<float>();  // timed in place: d = d + A.B^T per expert
    wp.d = d.as<float>();
    wp.int8 = o.int8;
    OwnProblem p;
    p.case_name = o.int8 ? "ours_int8_kgrouped_1x128_1x128_f32_acc" : "ours_fp8_kgrouped_1x128_1x128_f32_acc";
    p.family = Family::KGroupedWgrad;
    p.dims = {{"m", m}, {"n", n}, {"k", tokens}, {"k_padded", k}, {"groups", groups}, {"tokens", shape.tokens}};
    p.label = fmt::format("{} {}x{}", tokens_label(shape.tokens), m, n);
    p.flops = 2.0 * m * n * tokens;
    p.bytes = 1.0 * (m * k + n * k) + 8.0 * groups * m * n;
    p.heuristic = o.int8 ? oc::Fp8GemmConfig{} : oc::fp8_gemm_wgrad_heuristic(m, n, k, groups, oc::fp8_gemm_num_sms());
    p.m = m;
    p.k = k;
    p.run = [wp](const oc::Fp8GemmConfig& cfg, cudaStream_t s) { oc::fp8_gemm_wgrad(wp, cfg, s); };
    p.check = [&, wp](const oc::Fp8GemmConfig& cfg, int samples) {
      oc::Fp8GemmWgradProblem checked = wp;  // in place, as timed (the staged epilogue serves that form)
      checked.c = dcheck.as<float>();
      checked.d = dcheck.as<float>();
      FP8T_CUDA_CHECK(cudaMemcpyAsync(dcheck.get(), c.get(), dcheck.bytes(), cudaMemcpyDeviceToDevice, stream));
      oc::fp8_gemm_wgrad(checked, cfg, stream);
      const std::vector<float> hd = download<float>(dcheck.get(), static_cast<size_t>(groups * m * n), stream);
      CheckResult r;
      for (int e = 0; e < groups; ++e) {
        const int64_t ke = off[e + 1] - off[e];
        CheckSpec s;
        s.rows = m;
        s.cols = n;
        s.k = ke;
        s.int8 = wp.int8;
        s.a_row = [&](int64_t i) { return ha.data() + i * k + off[e]; };
        s.b_row = [&](int64_t j) { return hb.data() + j * k + off[e]; };
        s.scale_a = [&](int64_t i, int64_t g) { return hsa[(off[e] / 128 + g) * m + i]; };
        s.scale_b = [&](int64_t j, int64_t g) { return hsb[(off[e] / 128 + g) * n + j]; };
        const int64_t base = static_cast<int64_t>(e) * m * n;
        s.got = [&](int64_t i, int64_t j) { return num::float_bits(hd[base + i * n + j]); };
        s.want = [&](int64_t i, int64_t j, float acc) { return num::float_bits(hc[base + i * n + j] + acc); };
        if (ke == 0) {  // an expert with no tokens: d = c
          for (int64_t i = 0; i < std::min<int64_t>(m, 4); ++i)
            for (int64_t j = 0; j < std::min<int64_t>(n, 4); ++j) {
              ++r.checked;
              if (num::float_bits(hd[base + i * n + j]) == num::float_bits(hc[base + i * n + j])) continue;
              if (r.bad == 0) r.first = fmt::format("expert {} has no tokens but ({}, {}) != c", e, i, j);
              ++r.bad;
            }
          continue;
        }
        check_outputs(s, std::max(1, samples / groups), 51 + e, r);
      }
      return r;
    };
    bench_own(ctx, o, p, layout, configs, rows, failures);
  }
}

void bench_gemm(const BenchOptions& o) {
  // Everything the options say is read before the device is touched, so bad input fails first and clearly.
  const Families fam = parse_families(o.families);
  const std::vector<GemmShape> shapes = parse_shapes(o.shapes);
  const std::vector<MoeShape> grouped = parse_moe_shapes(o.grouped_shapes, "--grouped-shapes");
  const std::vector<MoeShape> kgrouped = parse_moe_shapes(o.kgrouped_shapes, "--kgrouped-shapes");
  const std::vector<quant::ScaleLayout> layouts = parse_scale_layouts(o.scales);
  const std::vector<ConfigChoice> configs = parse_configs(o.configs);
  FP8T_CHECK(o.check >= 0, "bench gemm: --check {} must be >= 0", o.check);
  FP8T_CHECK(!o.int8 || (!o.sweep && !o.split_sweep && configs.size() == 1 && configs[0].heuristic),
             "bench gemm: --int8 times the INT8 build (block_n 128, no multicast, no split-K) only: no --sweep, "
             "--split-sweep or --config");

  Context ctx = start(o);
  std::vector<Row> rows;
  Failures failures;
  uint64_t seed = 1;
  if (fam.cublaslt || fam.dense || fam.wgrad)
    for (const GemmShape& s : shapes) bench_dense_shape(ctx, o, fam, s, layouts, configs, seed, rows, failures);
  if (fam.grouped) {
    for (const MoeShape& s : grouped) bench_grouped_shape(ctx, o, s, layouts, configs, seed, rows, failures);
    for (const MoeShape& s : kgrouped) bench_kgrouped_shape(ctx, o, s, layouts, configs, seed, rows, failures);
  }
  std::fprintf(stderr, "\n%-62s %10s %9s %8s %9s  %s\n", "case", "median_us", "TFLOP/s", "vs_bf16", "vs_fp8blk",
               "check");
  std::fprintf(stderr, "(ours_* rows: vs_fp8blk is against cuBLASLt's same GEMM, the two timed interleaved; "
                       "floor_* rows: TFLOP/s as if the GEMM took the read's time)\n");
  for (const Row& r : rows)
    std::fprintf(stderr, "%-62s %10.1f %9.1f %8.2f %9.2f  %s\n", r.name.c_str(), r.us, r.primary, r.ratio, r.ratio2,
                 r.note.c_str());
  FP8T_CHECK(failures.errors == 0 && failures.mismatches == 0,
             "bench gemm: {} configuration(s) of ours failed and {} differ from the CPU Hopper model (see the JSON "
             "lines' error and check fields)", failures.errors, failures.mismatches);
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
    auto act = [&](bool fused, bool pow2, oc::Encoder enc, quant::Format f) {
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
        const auto a1 = act(false, pow2, enc, quant::Format::E4M3);
        const auto a2 = act(true, pow2, enc, quant::Format::E4M3);
        cases.push_back({"e4m3_1x128" + suffix, in_bytes + n + scale_bytes,
                         [&, a1](cudaStream_t s) { oc::quantize_1x128(a1, s); }});
        cases.push_back({"e4m3_1x128+128x1T" + suffix, in_bytes + 2.0 * n + 2 * scale_bytes,
                         [&, a2](cudaStream_t s) { oc::quantize_1x128(a2, s); }});
      }
    const auto i8 = act(false, false, oc::Encoder::Hardware, quant::Format::INT8);
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
      w8.opt.format = quant::Format::INT8;
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
                      copy_gbps > 0 ? gbps / copy_gbps : 0.0, 0, ""});
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
  app->add_flag("--clean-flush", o.clean_flush,
                "after each flush, read the flush buffer back so L2 holds clean lines (no write-back in the timing)");
  app->add_option("--filter", o.filter, "only cases whose name contains this (baselines always run)");
}

void add_bench(CLI::App& root) {
  auto* bench = root.add_subcommand("bench", "benchmarks (JSON lines on stdout, a table on stderr)");
  bench->require_subcommand(1);
  static BenchOptions gemm_opts, quant_opts;
  auto* g = bench->add_subcommand("gemm", "cuBLASLt BF16, FP8 block-scaled and per-tensor FP8 GEMMs, and fp8train's "
                                          "own FP8 GEMM kernels");
  add_common(g, gemm_opts);
  g->add_option("--shapes", gemm_opts.shapes, "'default' (DeepSeek-V3 shapes + 8192^3) or MxNxK;MxNxK;...")
      ->capture_default_str();
  g->add_option("--family", gemm_opts.families,
                "comma-separated: cublaslt (every cuBLASLt case), dense, wgrad (ours on --shapes), grouped (ours on "
                "--grouped-shapes and --kgrouped-shapes), or all")
      ->capture_default_str();
  g->add_option("--config", gemm_opts.configs,
                "configurations of ours, ';'-separated: 'heuristic' or key=value pairs, e.g. "
                "'heuristic;block=128x192,multicast=B;block=32,splits=2' (keys: block, multicast, grid, raster, "
                "epilogue, splits)")
      ->capture_default_str();
  g->add_flag("--sweep", gemm_opts.sweep,
              "also every tile width the family builds x multicast mode, and 192-row tiles where built");
  g->add_flag("--split-sweep", gemm_opts.split_sweep,
              "also every split-K width x 1..16 ranges on the dense shapes with M <= 256");
  g->add_flag("--floor", gemm_opts.floor,
              "time a read-only kernel over B, and over A and B, of the dense shapes with M <= 256 (memory floor)");
  g->add_flag("--no-baselines", gemm_opts.no_baselines, "do not run cuBLASLt beside our kernels");
  g->add_option("--scales", gemm_opts.scales,
                "scale layouts our kernels read: native (cuBLASLt's; bulk copies), row-major (QTensor's; "
                "cp.async) or both")
      ->capture_default_str();
  g->add_option("--check", gemm_opts.check,
                "sampled outputs per configuration of ours checked bit for bit against the CPU Hopper model "
                "(0: no check)")
      ->capture_default_str();
  g->add_flag("--int8", gemm_opts.int8,
              "time our kernels' INT8 build instead of the FP8 one (the operands' random bytes read as INT8; "
              "checked against the exact INT8 arithmetic; cuBLASLt's rows stay BF16 / FP8)");
  g->add_option("--grouped-shapes", gemm_opts.grouped_shapes,
                "MoE M-grouped shapes, ';'-separated: EXPERTSxTOKENS:NxK or T1,T2,...:NxK (tokens per expert)")
      ->capture_default_str();
  g->add_option("--kgrouped-shapes", gemm_opts.kgrouped_shapes,
                "MoE K-grouped Wgrad shapes, ';'-separated: EXPERTSxTOKENS:MxN or T1,T2,...:MxN")
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
  auto* bench = root.add_subcommand("bench", "benchmarks (JSON lines on stdout, a table on stderr)");
  bench->require_subcommand(1);
  for (const char* name : {"gemm", "quant", "ops", "attention"}) {
    auto* sub = bench->add_subcommand(name, "GPU benchmark (needs a build with CUDA)");
    sub->allow_extras();
    sub->callback([] {
      FP8T_FAIL("fp8train was built without CUDA, so this benchmark is unavailable: rebuild on a machine with nvcc "
                "(cmake -DFP8TRAIN_CUDA=ON) and run it on an H100/H200");
    });
  }
}
#endif

const bool registered = register_command("bench", 90, &add_bench);

}  // namespace
}  // namespace fp8train::cli
