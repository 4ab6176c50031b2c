// Experiment 7 of the SNR study, "method checks": each flaw of the published simulation, changed alone
// against this study's corrected setup, so the methods section can say how much each one matters.
//   quantizer variants (K = 4096, ρ = 0, one amax scale per vector, exact FP64 accumulation of the
//   dequantized values, so only rounding differs):
//     OCP E4M3 (max 448, RNE)            quant::quantize — this study
//     E4M3 max 448, ties away from zero  emulated
//     IEEE-style E4M3 (max 240, ties away) emulated — the published one
//     INT8 RNE                           quant::quantize — this study
//     INT8 truncated toward zero         emulated — the published one
//   accumulator variants (OCP E4M3 per-vector inputs, K ∈ {1024, 4096}, ρ ∈ {0, 0.9}):
//     Hopper FP22, no promotion          num::hopper_block chain — this study
//     FP8 running sum, no promotion      acc = round(acc + product) to E4M3's 3 mantissa bits (RNE, no range
//                                        limit: precision only) — the published kind of model
//     FP8 running sum, promoted every 128 into FP32
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "lab/lab_dot.h"
#include "lab/sample_random.h"
#include "lab/snr_internal.h"
#include "lab/snr_method_checks.h"
#include "numerics/hopper_accum.h"

namespace fp8train::lab {

double round_e4m3_variant(double x, double max_value, bool ties_away) {
  if (x == 0.0 || std::isnan(x)) return x;
  const double ax = std::fabs(x);
  int e;
  std::frexp(ax, &e);  // ax = f * 2^e, f in [0.5, 1): unbiased exponent e - 1
  const int exp = std::max(e - 1, -6);  // below 2^-6 the quantum stays 2^-9 (subnormals)
  const double quantum = std::ldexp(1.0, exp - 3);
  const double units = ax / quantum;  // exact: a power-of-two division
  double r = std::floor(units);
  const double diff = units - r;  // exact
  if (diff > 0.5 || (diff == 0.5 && (ties_away || std::fmod(r, 2.0) != 0.0))) r += 1.0;
  double v = r * quantum;
  if (v > max_value) v = max_value;
  return std::copysign(v, x);
}

double round_to_mantissa_bits(double x, int bits) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e;
  const double f = std::frexp(x, &e);  // x = f * 2^e, |f| in [0.5, 1)
  const double scaled = std::ldexp(f, bits + 1);
  double r = std::floor(scaled);
  const double diff = scaled - r;
  if (diff > 0.5 || (diff == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return std::ldexp(r, e - bits - 1);
}

namespace {

// Dot products of emulated-quantized rows: per-vector amax scale to `max_value`, exact accumulation.
std::vector<double> emulated_e4m3_dots(const std::vector<float>& a, const std::vector<float>& b, int64_t rows,
                                       int64_t k, double max_value, bool ties_away) {
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    auto quantize = [&](const float* x, std::vector<double>& q) {
      double amax = 0;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      const double scale = amax > 0 ? amax / max_value : 1.0;
      q.resize(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) q[i] = round_e4m3_variant(x[i] / scale, max_value, ties_away) * scale;
    };
    std::vector<double> qa, qb;
    quantize(a.data() + r * k, qa);
    quantize(b.data() + r * k, qb);
    double s = 0;
    for (int64_t i = 0; i < k; ++i) s += qa[i] * qb[i];
    out[r] = s;
  }
  return out;
}

std::vector<double> truncated_int8_dots(const std::vector<float>& a, const std::vector<float>& b, int64_t rows,
                                        int64_t k) {
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    auto quantize = [&](const float* x, std::vector<double>& q) {
      double amax = 0;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      const double scale = amax > 0 ? amax / 127.0 : 1.0;
      q.resize(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) q[i] = std::clamp(std::trunc(x[i] / scale), -127.0, 127.0) * scale;
    };
    std::vector<double> qa, qb;
    quantize(a.data() + r * k, qa);
    quantize(b.data() + r * k, qb);
    double s = 0;
    for (int64_t i = 0; i < k; ++i) s += qa[i] * qb[i];
    out[r] = s;
  }
  return out;
}

// FP8-precision running sum over the code values of per-vector-scaled operands; promote_interval 0 = never.
std::vector<float> fp8_running_sum_dots(const detail::LabOperand& a, const detail::LabOperand& b, int64_t rows,
                                        int64_t k, int promote_interval) {
  std::vector<float> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0, total = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double p = static_cast<double>(num::e4m3_decode(a.codes[r * k + i])) * num::e4m3_decode(b.codes[r * k + i]);
      acc = round_to_mantissa_bits(acc + p, 3);
      if (promote_interval > 0 && ((i + 1) % promote_interval == 0 || i + 1 == k)) {
        total += acc;
        acc = 0;
      }
    }
    if (promote_interval == 0) total = acc;
    out[r] = static_cast<float>(static_cast<double>(a.scales[r]) * b.scales[r] * total);
  }
  return out;
}

}  // namespace

std::vector<SnrRow> run_method_checks(const SnrStudyConfig& c) {
  c.validate();
  struct Task {
    int64_t k;
    double rho;
  };
  const std::vector<Task> tasks = {{1024, 0.0}, {4096, 0.0}, {1024, 0.9}, {4096, 0.9}};
  const int n = static_cast<int>(tasks.size()) * c.samples;
  return detail::run_tasks(n, [&](int t) {
    const Task task = tasks[t / c.samples];
    const int s = t % c.samples;
    CounterRng rng(stream_key(c.seed, {7, static_cast<uint64_t>(task.k), static_cast<uint64_t>(task.rho * 10),
                                       static_cast<uint64_t>(s)}));
    const int64_t rows = c.pairs_per_sample, k = task.k;
    const std::vector<float> a = normal_vector(rng, rows * k);
    const std::vector<float> b = correlated_with(rng, a, task.rho);
    const auto pairs = detail::diagonal_pairs(rows);
    const std::vector<double> ref = detail::exact_dots(a, b, k, pairs);
    std::vector<SnrRow> out;
    auto row = [&](const std::string& variant, const std::string& format, const std::string& accumulation, int nc) {
      SnrRow r;
      r.experiment = 7;
      r.sample = s;
      r.data = "gaussian";
      r.sigma = 1.0;
      r.rho = task.rho;
      r.length = k;
      r.format = format;
      r.scaling = "tensor";
      r.rounding = "rne";
      r.accumulation = accumulation;
      r.promote_interval = nc;
      r.recipe = variant;
      return r;
    };
    auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    const detail::LabOperand qa = detail::quantize_operand(a, rows, k, quant::Format::E4M3, "tensor", true);
    const detail::LabOperand qb = detail::quantize_operand(b, rows, k, quant::Format::E4M3, "tensor", true);
    const std::vector<double> exact_q = detail::dequantized_dots(qa, qb, pairs);
    if (task.k == 4096 && task.rho == 0.0) {  // quantizer variants
      SnrRow r = row("OCP E4M3 (max 448, RNE)", "e4m3", "exact", -1);
      detail::score(r, ref, to_float(exact_q));
      out.push_back(r);
      r = row("E4M3 max 448, ties away", "e4m3", "exact", -1);
      r.rounding = "ties-away";
      detail::score(r, ref, to_float(emulated_e4m3_dots(a, b, rows, k, 448.0, true)));
      out.push_back(r);
      r = row("IEEE-style E4M3 (max 240, ties away)", "e4m3-ieee240", "exact", -1);
      r.rounding = "ties-away";
      detail::score(r, ref, to_float(emulated_e4m3_dots(a, b, rows, k, 240.0, true)));
      out.push_back(r);
      const detail::LabOperand ia = detail::quantize_operand(a, rows, k, quant::Format::INT8, "tensor", true);
      const detail::LabOperand ib = detail::quantize_operand(b, rows, k, quant::Format::INT8, "tensor", true);
      r = row("INT8 rounded to nearest even", "int8", "exact", -1);
      detail::score(r, ref, to_float(detail::dequantized_dots(ia, ib, pairs)));
      out.push_back(r);
      r = row("INT8 truncated toward zero", "int8", "exact", -1);
      r.rounding = "truncate";
      detail::score(r, ref, to_float(truncated_int8_dots(a, b, rows, k)));
      out.push_back(r);
    }
    // Accumulator variants on the same quantized inputs.
    SnrRow r = row("Hopper FP22, no promotion", "e4m3", "hopper", num::kNeverPromote);
    detail::score(r, ref, detail::quantized_dots(qa, qb, pairs, {"hopper", num::kNeverPromote}), &exact_q);
    out.push_back(r);
    r = row("FP8 running sum, no promotion", "e4m3", "fp8-sum", num::kNeverPromote);
    detail::score(r, ref, fp8_running_sum_dots(qa, qb, rows, k, 0), &exact_q);
    out.push_back(r);
    r = row("FP8 running sum, N_C = 128", "e4m3", "fp8-sum", 128);
    detail::score(r, ref, fp8_running_sum_dots(qa, qb, rows, k, 128), &exact_q);
    out.push_back(r);
    return out;
  });
}

}  // namespace fp8train::lab
