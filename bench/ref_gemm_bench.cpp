// Speed of the reference block-scaled GEMM (src/quant/ref_gemm.h) against OpenBLAS SGEMM on the same
// problem, D[M, N] = A[M, K] · B[N, K]ᵀ with A E4M3 1×128 and B E4M3 128×128 (the Fprop recipe).
// Cases: sgemm (cblas_sgemm on the dequantized float32 operands, the baseline), exact, hopper (N_C = 128),
// hopper_never (per-tensor operands, no promotion), fp32. Google Benchmark prints its table; afterwards one
// JSON line per case gives the median wall time and the ratio to the SGEMM median of the same run.
//   ref_gemm_bench [--m=1024 --n=1024 --k=1024] [Google Benchmark flags, e.g. --benchmark_filter=hopper]
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/quant.h"
#include "quant/ref_gemm.h"

namespace {

using namespace fp8train::quant;

int64_t g_m = 1024, g_n = 1024, g_k = 1024;

struct Operands {
  QTensor a, b, a_tensor, b_tensor;
  std::vector<float> a_values, b_values;
};

const Operands& operands() {
  static const Operands ops = [] {
    Operands o;
    std::mt19937_64 rng(42);
    std::normal_distribution<float> n01;
    std::vector<float> a(static_cast<size_t>(g_m * g_k)), b(static_cast<size_t>(g_n * g_k));
    for (auto& x : a) x = n01(rng);
    for (auto& x : b) x = n01(rng);
    QuantSpec ca, cb;
    ca.granularity = Granularity::tile_1x128();
    cb.granularity = Granularity::block_128x128();
    o.a = quantize(a, g_m, g_k, ca);
    o.b = quantize(b, g_n, g_k, cb);
    ca.granularity = cb.granularity = Granularity::tensor();
    o.a_tensor = quantize(a, g_m, g_k, ca);
    o.b_tensor = quantize(b, g_n, g_k, cb);
    o.a_values = dequantize(o.a);
    o.b_values = dequantize(o.b);
    return o;
  }();
  return ops;
}

void set_counters(benchmark::State& state) {
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(g_m * g_n * g_k),
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}

void BM_sgemm(benchmark::State& state) {
  const Operands& o = operands();
  std::vector<float> d(static_cast<size_t>(g_m * g_n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(g_m), static_cast<int>(g_n),
                static_cast<int>(g_k), 1.0f, o.a_values.data(), static_cast<int>(g_k), o.b_values.data(),
                static_cast<int>(g_k), 0.0f, d.data(), static_cast<int>(g_n));
    benchmark::DoNotOptimize(d.data());
  }
  set_counters(state);
}

void run_ref(benchmark::State& state, AccumMode mode, int promote, bool per_tensor) {
  const Operands& o = operands();
  GemmConfig cfg;
  cfg.mode = mode;
  cfg.promote_interval = promote;
  std::vector<float> d(static_cast<size_t>(g_m * g_n));
  for (auto _ : state) {
    if (per_tensor) {
      ref_gemm(o.a_tensor, o.b_tensor, cfg, d.data());
    } else {
      ref_gemm(o.a, o.b, cfg, d.data());
    }
    benchmark::DoNotOptimize(d.data());
  }
  set_counters(state);
}

void BM_exact(benchmark::State& s) { run_ref(s, AccumMode::Exact, 128, false); }
void BM_hopper(benchmark::State& s) { run_ref(s, AccumMode::Hopper, 128, false); }
void BM_hopper_never(benchmark::State& s) { run_ref(s, AccumMode::Hopper, 0, true); }
void BM_fp32(benchmark::State& s) { run_ref(s, AccumMode::Fp32, 128, false); }

// Keeps the Google Benchmark console table and remembers each case's median real time.
class MedianCollector : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal, so the JSON lines of a redirected run start at the line's first byte.
  MedianCollector() : ConsoleReporter(isatty(1) ? OO_ColorTabular : OO_Tabular) {}
  std::map<std::string, double> median_seconds;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
        median_seconds[r.run_name.function_name] =
            r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
    ConsoleReporter::ReportRuns(runs);
  }
};

bool take_int_flag(const char* arg, const char* name, int64_t& value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  value = std::stoll(arg + n + 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i)
    if (!take_int_flag(argv[i], "--m", g_m) && !take_int_flag(argv[i], "--n", g_n) &&
        !take_int_flag(argv[i], "--k", g_k))
      rest.push_back(argv[i]);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  for (auto [name, fn] : {std::pair{"sgemm", &BM_sgemm}, std::pair{"exact", &BM_exact},
                          std::pair{"hopper", &BM_hopper}, std::pair{"hopper_never", &BM_hopper_never},
                          std::pair{"fp32", &BM_fp32}})
    benchmark::RegisterBenchmark(name, fn)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.5)
        ->Repetitions(5)
        ->ReportAggregatesOnly(true);
  MedianCollector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  const auto base = reporter.median_seconds.find("sgemm");
  for (const auto& [name, seconds] : reporter.median_seconds) {
    nlohmann::json j{{"bench", "ref_gemm"}, {"case", name}, {"m", g_m}, {"n", g_n}, {"k", g_k},
                     {"median_s", seconds}, {"gflops", 2.0 * double(g_m) * double(g_n) * double(g_k) / seconds / 1e9}};
    if (base != reporter.median_seconds.end()) j["ratio_to_sgemm"] = seconds / base->second;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}
