// `fp8train numerics accum`: the DeepSeek-V3 accumulation-precision experiment on the CPU.
//   fp8train numerics accum [--m 1024] [--n 1024] [--k 4096] [--dist randn|pos] [--seed S] [--promote 128]
// Draws A [m, k] and B [n, k] in E4M3 with unit scales, distributed like the captured H200 vectors
// (tests/data/hopper-fp8-accum): pos = uniform on [0, 448) rounded to E4M3, randn = N(0, 64²) rounded to
// E4M3. Computes D = A·Bᵀ with the reference GEMM in four ways — Hopper model without promotion, Hopper
// model promoting every N_C = --promote elements, plain FP32 FMA, exact per-128-block FP64 — and prints,
// against the FP64 product of the same FP8 inputs, the norm-wise relative error ‖D − D64‖₂ / ‖D64‖₂ and
// the max element-wise relative error max |D − D64| / |D64| (num::rel_error_norm / num::max_rel_error),
// as an aligned table, then exactly one JSON line.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/error.h"
#include "numerics/formats.h"
#include "numerics/hopper_accum.h"
#include "numerics/metrics.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"

namespace fp8train::cli {
namespace {

struct AccumOptions {
  int64_t m = 1024, n = 1024, k = 4096;
  std::string dist = "randn";
  uint64_t seed = 0;
  int promote = 128;
};

// Values of element idx of one operand stream (stream 0: A, 1: B), before E4M3 rounding.
float draw(const std::string& dist, uint64_t seed, int stream, uint64_t idx) {
  const uint64_t s = seed * 2 + static_cast<uint64_t>(stream);
  const auto unit = [&](uint64_t i) {  // [0, 1) in steps of 2^-24
    return static_cast<double>(num::counter_random_u32(s, i) >> 8) * 0x1p-24;
  };
  if (dist == "pos") return static_cast<float>(448.0 * unit(idx));
  // Box-Muller on two counter draws: N(0, 1) scaled to a standard deviation of 64.
  const double u1 = unit(2 * idx), u2 = unit(2 * idx + 1);
  const double z = std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
  return static_cast<float>(64.0 * z);
}

quant::QTensor random_e4m3(const AccumOptions& o, int64_t rows, int stream) {
  std::vector<float> x(static_cast<size_t>(rows * o.k));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows * o.k; ++i) x[static_cast<size_t>(i)] = draw(o.dist, o.seed, stream, static_cast<uint64_t>(i));
  // Unit scale: the values already lie in E4M3's range, like the captured H200 inputs.
  return quant::quantize_with_scale(x.data(), rows, o.k, quant::Format::E4M3, {1.0f, 1.0f});
}

// Norm-wise relative error (%) the H200 measured for all-positive inputs, 1024×1024 outputs; < 0 if unknown.
double h200_figure(const AccumOptions& o, int promote) {
  if (o.dist != "pos" || o.m != 1024 || o.n != 1024) return -1.0;
  if (promote == num::kNeverPromote) return o.k == 4096 ? 7.4 : o.k == 16384 ? 25.0 : -1.0;
  if (promote == 128) return (o.k == 4096 || o.k == 16384) ? 0.055 : -1.0;
  return -1.0;
}

struct Row {
  std::string name, mode;
  int promote;  // -1: not applicable
  double rel_norm, max_rel, seconds, h200;
};

int run_accum(const AccumOptions& o) {
  FP8T_CHECK(o.m >= 1 && o.n >= 1 && o.k >= 1, "numerics accum: --m, --n and --k must be positive (got {}, {}, {})",
             o.m, o.n, o.k);
  FP8T_CHECK(o.m * o.k <= (int64_t{1} << 31) && o.n * o.k <= (int64_t{1} << 31) && o.m * o.n <= (int64_t{1} << 28),
             "numerics accum: {}x{}x{} is too large for this command (at most 2^31 input and 2^28 output elements)",
             o.m, o.n, o.k);
  FP8T_CHECK(o.dist == "randn" || o.dist == "pos", "numerics accum: --dist must be randn or pos, got '{}'", o.dist);
  FP8T_CHECK(o.promote > 0 && o.promote % num::kHopperBlockK == 0,
             "numerics accum: --promote must be a positive multiple of {} (got {})", num::kHopperBlockK, o.promote);

  const quant::QTensor a = random_e4m3(o, o.m, 0), b = random_e4m3(o, o.n, 1);
  const std::vector<double> ref = quant::ref_gemm_fp64(a, b);

  struct Case {
    const char* name;
    quant::AccumMode mode;
    int promote;
  };
  const Case cases[] = {{"hopper, no promotion", quant::AccumMode::Hopper, num::kNeverPromote},
                        {"hopper, N_C promotion", quant::AccumMode::Hopper, o.promote},
                        {"fp32 FMA", quant::AccumMode::Fp32, -1},
                        {"exact (FP64 per 128)", quant::AccumMode::Exact, -1}};
  std::vector<Row> rows;
  std::vector<float> d(static_cast<size_t>(o.m * o.n));
  for (const Case& c : cases) {
    quant::GemmConfig cfg;
    cfg.mode = c.mode;
    cfg.promote_interval = c.promote < 0 ? 128 : c.promote;
    const auto t0 = std::chrono::steady_clock::now();
    quant::ref_gemm(a, b, cfg, d.data());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string name = c.name;
    if (c.mode == quant::AccumMode::Hopper && c.promote != num::kNeverPromote)
      name = "hopper, N_C = " + std::to_string(c.promote);
    rows.push_back({name, std::string(quant::accum_mode_name(c.mode)), c.promote, num::rel_error_norm(d, ref),
                    num::max_rel_error(d, ref), secs, c.mode == quant::AccumMode::Hopper ? h200_figure(o, c.promote) : -1.0});
  }

  std::printf("numerics accum: D[%lld, %lld] = A[%lld, %lld] · B[%lld, %lld]ᵀ, E4M3 inputs with unit scales, "
              "dist %s (%s), seed %llu\n",
              static_cast<long long>(o.m), static_cast<long long>(o.n), static_cast<long long>(o.m),
              static_cast<long long>(o.k), static_cast<long long>(o.n), static_cast<long long>(o.k), o.dist.c_str(),
              o.dist == "pos" ? "uniform [0, 448)" : "N(0, 64^2)", static_cast<unsigned long long>(o.seed));
  std::printf("errors against the FP64 product of the same FP8 inputs\n\n");
  std::printf("%-24s %18s %18s %16s %9s\n", "accumulation", "norm-wise rel err", "max elem rel err", "H200 norm-wise",
              "seconds");
  for (const Row& r : rows) {
    const std::string h200 = r.h200 < 0 ? "-" : fmt::format("{:.3f} %", r.h200);
    std::printf("%-24s %16.4f %% %16.4f %% %16s %9.3f\n", r.name.c_str(), 100.0 * r.rel_norm, 100.0 * r.max_rel,
                h200.c_str(), r.seconds);
  }
  if (o.dist == "randn")
    std::printf("(randn outputs cross zero: the max element-wise relative error comes from outputs near 0)\n");
  std::printf("\n");

  nlohmann::json j;
  j["command"] = "numerics accum";
  j["m"] = o.m;
  j["n"] = o.n;
  j["k"] = o.k;
  j["dist"] = o.dist;
  j["seed"] = o.seed;
  j["format"] = "e4m3";
  j["results"] = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json e{{"name", r.name},
                     {"mode", r.mode},
                     {"rel_error_norm", r.rel_norm},
                     {"max_rel_error", r.max_rel},
                     {"seconds", r.seconds}};
    e["promote_interval"] = r.promote < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.promote);
    if (r.h200 >= 0) e["h200_rel_error_norm"] = r.h200 / 100.0;
    j["results"].push_back(e);
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return 0;
}

void add_numerics_accum(CLI::App& root) {
  CLI::App* numerics = root.get_subcommand("numerics");
  auto* accum = numerics->add_subcommand(
      "accum", "FP8 GEMM accumulation error: Hopper model with/without promotion, FP32, exact, vs FP64");
  static AccumOptions opts;
  accum->add_option("--m", opts.m, "Rows of A and D")->capture_default_str();
  accum->add_option("--n", opts.n, "Rows of B, columns of D")->capture_default_str();
  accum->add_option("--k", opts.k, "Reduction length K")->capture_default_str();
  accum->add_option("--dist", opts.dist, "Input distribution: randn (N(0, 64^2)) or pos (uniform [0, 448))")
      ->check(CLI::IsMember({"randn", "pos"}))
      ->capture_default_str();
  accum->add_option("--seed", opts.seed, "Random seed")->capture_default_str();
  accum->add_option("--promote", opts.promote, "Promotion interval N_C of the promoted Hopper row (multiple of 32)")
      ->capture_default_str();
  accum->callback([] { run_accum(opts); });
}

const bool registered = register_command("numerics accum", 21, &add_numerics_accum);

}  // namespace
}  // namespace fp8train::cli
