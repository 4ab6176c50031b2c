// Experiments 1–5 of the SNR study (see snr_study.h): inner products of quantized vectors.
//   1 length × scaling × accumulation × σ      a, b ~ N(0, σ²) independent, E4M3
//   2 correlation ρ × scaling × accumulation   a ~ N(0, 1), b = ρa + √(1−ρ²)z, K = 4096, E4M3
//   3 promotion interval N_C × K × ρ           per-vector scaled E4M3, Hopper with N_C = 32 .. 1024, never
//   4 outlier channels × activation scaling    X [128, K] with 4 channels ×factor, W 128×128 blocks; E4M3, INT8
//                                              (products by quant::ref_gemm, scales re-expressed as 1×128 tiles)
//   5 formats                                  E4M3 / E5M2 / INT8 (RNE, stochastic), per-vector and 1×128
#include <string>
#include <vector>

#include "common/error.h"
#include "lab/sample_random.h"
#include "lab/snr_internal.h"
#include "numerics/hopper_accum.h"
#include "quant/ref_gemm.h"

namespace fp8train::lab {
namespace {

using detail::Accumulation;
using detail::LabOperand;

const std::vector<Accumulation>& grid_accumulations() {
  static const std::vector<Accumulation> accs = {
      {"hopper", num::kNeverPromote}, {"hopper", 128}, {"fp32", -1}};
  return accs;
}

SnrRow base_row(int experiment, int sample, const std::string& data, int64_t k) {
  SnrRow r;
  r.experiment = experiment;
  r.sample = sample;
  r.data = data;
  r.length = k;
  r.rounding = "rne";
  return r;
}

// Every (scaling, accumulation) of the grid for one pair of sample matrices [rows, k] (E4M3, per-vector
// "tensor" scaling), appended to `out`.
void grid_rows(const SnrRow& base, const std::vector<float>& a, const std::vector<float>& b, int64_t rows, int64_t k,
               std::vector<SnrRow>& out) {
  const auto pairs = detail::diagonal_pairs(rows);
  const std::vector<double> ref = detail::exact_dots(a, b, k, pairs);
  for (const std::string& scaling : study_scalings()) {
    const LabOperand qa = detail::quantize_operand(a, rows, k, quant::Format::E4M3, scaling, true);
    const LabOperand qb = detail::quantize_operand(b, rows, k, quant::Format::E4M3, scaling, true);
    for (const Accumulation& acc : grid_accumulations()) {
      SnrRow r = base;
      r.format = "e4m3";
      r.scaling = scaling;
      r.accumulation = acc.name;
      r.promote_interval = acc.promote_interval;
      detail::score(r, ref, qa, qb, pairs, acc);
      out.push_back(std::move(r));
    }
  }
}

std::vector<float> scaled(const std::vector<float>& z, double sigma) {
  std::vector<float> v(z.size());
  for (size_t i = 0; i < z.size(); ++i) v[i] = static_cast<float>(sigma * z[i]);
  return v;
}

}  // namespace

std::vector<SnrRow> run_length_experiment(const SnrStudyConfig& c) {
  c.validate();
  const auto& ks = study_lengths();
  const int n = static_cast<int>(ks.size()) * c.samples;
  return detail::run_tasks(n, [&](int t) {
    const int64_t k = ks[t / c.samples];
    const int s = t % c.samples;
    CounterRng rng(stream_key(c.seed, {1, static_cast<uint64_t>(k), static_cast<uint64_t>(s)}));
    const int64_t rows = c.pairs_per_sample;
    const std::vector<float> za = normal_vector(rng, rows * k), zb = normal_vector(rng, rows * k);
    std::vector<SnrRow> out;
    for (double sigma : study_sigmas()) {
      SnrRow base = base_row(1, s, "gaussian", k);
      base.sigma = sigma;
      base.rho = 0.0;
      grid_rows(base, scaled(za, sigma), scaled(zb, sigma), rows, k, out);
    }
    return out;
  });
}

std::vector<SnrRow> run_correlation_experiment(const SnrStudyConfig& c) {
  c.validate();
  const auto& rhos = study_correlations();
  const int64_t k = 4096;
  const int n = static_cast<int>(rhos.size()) * c.samples;
  return detail::run_tasks(n, [&](int t) {
    const int ri = t / c.samples;
    const int s = t % c.samples;
    CounterRng rng(stream_key(c.seed, {2, static_cast<uint64_t>(ri), static_cast<uint64_t>(s)}));
    const int64_t rows = c.pairs_per_sample;
    const std::vector<float> a = normal_vector(rng, rows * k);
    const std::vector<float> b = correlated_with(rng, a, rhos[ri]);
    SnrRow base = base_row(2, s, "gaussian", k);
    base.sigma = 1.0;
    base.rho = rhos[ri];
    base.measured_rho = pearson(a, b);
    std::vector<SnrRow> out;
    grid_rows(base, a, b, rows, k, out);
    return out;
  });
}

std::vector<SnrRow> run_promotion_experiment(const SnrStudyConfig& c) {
  c.validate();
  const std::vector<int64_t> ks = {4096, 16384};
  const std::vector<double> rhos = {0.0, 0.9};
  const int per_k = static_cast<int>(rhos.size()) * c.samples;
  const int n = static_cast<int>(ks.size()) * per_k;
  return detail::run_tasks(n, [&](int t) {
    const int64_t k = ks[t / per_k];
    const int ri = (t % per_k) / c.samples;
    const int s = t % c.samples;
    CounterRng rng(stream_key(c.seed, {3, static_cast<uint64_t>(k), static_cast<uint64_t>(ri), static_cast<uint64_t>(s)}));
    const int64_t rows = c.pairs_per_sample;
    const std::vector<float> a = normal_vector(rng, rows * k);
    const std::vector<float> b = correlated_with(rng, a, rhos[ri]);
    const auto pairs = detail::diagonal_pairs(rows);
    const std::vector<double> ref = detail::exact_dots(a, b, k, pairs);
    const LabOperand qa = detail::quantize_operand(a, rows, k, quant::Format::E4M3, "tensor", true);
    const LabOperand qb = detail::quantize_operand(b, rows, k, quant::Format::E4M3, "tensor", true);
    std::vector<Accumulation> accs;
    for (int nc : study_promote_intervals()) accs.push_back({"hopper", nc});
    accs.push_back({"fp32", -1});
    const double measured = pearson(a, b);
    std::vector<SnrRow> out;
    for (const Accumulation& acc : accs) {
      SnrRow r = base_row(3, s, "gaussian", k);
      r.sigma = 1.0;
      r.rho = rhos[ri];
      r.measured_rho = measured;
      r.format = "e4m3";
      r.scaling = "tensor";
      r.accumulation = acc.name;
      r.promote_interval = acc.promote_interval;
      detail::score(r, ref, qa, qb, pairs, acc);
      out.push_back(std::move(r));
    }
    return out;
  });
}

std::vector<SnrRow> run_outlier_experiment(const SnrStudyConfig& c) {
  c.validate();
  const auto& factors = study_outlier_factors();
  const int64_t k = c.outlier_k, tokens = c.outlier_tokens, wrows = c.outlier_weight_rows;
  return detail::run_tasks(c.samples, [&](int s) {
    // One task per sample: the same activations for every factor (only the outlier channels' magnitude
    // changes), so the factors are paired.
    CounterRng rng(stream_key(c.seed, {4, static_cast<uint64_t>(s)}));
    std::vector<int64_t> channels;
    const std::vector<float> x_base = outlier_activations(rng, tokens, k, c.outlier_channels, 1.0, &channels);
    // Weight rows [2 * wrows, k]: rows 0..wrows-1 as drawn ("all channels"); rows wrows.. the same rows with
    // the outlier channels zeroed ("ordinary channels"), whose outputs measure what the outliers' scale does
    // to the ordinary channels alone (with the outlier products in, they dominate every output).
    std::vector<float> w = normal_vector(rng, wrows * k);
    w.resize(static_cast<size_t>(2 * wrows * k));
    std::copy(w.begin(), w.begin() + wrows * k, w.begin() + wrows * k);
    for (int64_t j = wrows; j < 2 * wrows; ++j)
      for (int64_t ch : channels) w[j * k + ch] = 0.0f;
    // FP64 references: the ordinary-channel products do not depend on the factor; an all-channel product is
    // the ordinary one plus the outlier channels' terms.
    std::vector<std::pair<int64_t, int64_t>> ordinary_pairs;
    for (int64_t i = 0; i < tokens; ++i)
      for (int64_t j = 0; j < wrows; ++j) ordinary_pairs.emplace_back(i, wrows + j);
    const std::vector<double> ref_ordinary = detail::exact_dots(x_base, w, k, ordinary_pairs);
    std::vector<quant::QTensor> qw;  // E4M3, INT8
    for (quant::Format f : {quant::Format::E4M3, quant::Format::INT8})
      qw.push_back(quant::quantize(w, 2 * wrows, k, {f, quant::Granularity::block_128x128(), quant::ScaleMode::Amax}));
    std::vector<SnrRow> out;
    for (double factor : factors) {
      std::vector<float> x = x_base;
      for (int64_t r = 0; r < tokens; ++r)
        for (int64_t ch : channels) x[r * k + ch] = static_cast<float>(x[r * k + ch] * factor);
      std::vector<double> ref_all(ref_ordinary);
      for (int64_t i = 0; i < tokens; ++i)
        for (int64_t j = 0; j < wrows; ++j)
          for (int64_t ch : channels)
            ref_all[i * wrows + j] += static_cast<double>(x[i * k + ch]) * static_cast<double>(w[j * k + ch]);
      for (size_t fi = 0; fi < qw.size(); ++fi) {
        const quant::Format f = qw[fi].format();
        // Every activation scaling re-expressed as 1×128 tiles (exact: each scale is constant over 128
        // columns), so the fast reference GEMM computes the products: Hopper N_C = 128 for E4M3 (equal to
        // num::hopper_dot_scaled per 128-group), exact int32 groups for INT8.
        const Accumulation acc = f == quant::Format::INT8 ? Accumulation{"int32", -1} : Accumulation{"hopper", 128};
        quant::GemmConfig g;
        g.mode = quant::AccumMode::Hopper;
        g.promote_interval = 128;
        for (const std::string scaling : {"tensor", "1x128", "128x128"}) {
          // d [tokens, 2 * wrows]; no accumulation-only SNR here (this experiment is about scaling).
          const std::vector<float> d = quant::ref_gemm(
              detail::as_row_tiles(detail::quantize_operand(x, tokens, k, f, scaling, false), 128), qw[fi], g);
          for (int part = 0; part < 2; ++part) {
            std::vector<float> test_part;
            for (int64_t i = 0; i < tokens; ++i)
              for (int64_t j = 0; j < wrows; ++j) test_part.push_back(d[i * 2 * wrows + part * wrows + j]);
            SnrRow r = base_row(4, s, part == 0 ? "all-channels" : "ordinary-channels", k);
            r.outlier_factor = factor;
            r.format = std::string(quant::format_name(f));
            r.scaling = scaling;
            r.accumulation = acc.name;
            r.promote_interval = acc.promote_interval;
            detail::score(r, part == 0 ? ref_all : ref_ordinary, test_part);
            out.push_back(std::move(r));
          }
        }
      }
    }
    return out;
  });
}

std::vector<SnrRow> run_format_experiment(const SnrStudyConfig& c) {
  c.validate();
  const std::vector<std::string> dists = {"gaussian", "student-t3", "gradient-like"};
  const int64_t k = 4096;
  const int n = static_cast<int>(dists.size()) * c.samples;
  return detail::run_tasks(n, [&](int t) {
    const int di = t / c.samples;
    const int s = t % c.samples;
    const uint64_t key = stream_key(c.seed, {5, static_cast<uint64_t>(di), static_cast<uint64_t>(s)});
    CounterRng rng(key);
    const int64_t rows = c.pairs_per_sample;
    std::vector<float> a, b;
    if (dists[di] == "gaussian") {
      a = normal_vector(rng, rows * k);
      b = normal_vector(rng, rows * k);
    } else if (dists[di] == "student-t3") {
      a = student_t3_vector(rng, rows * k);
      b = student_t3_vector(rng, rows * k);
    } else {  // a Wgrad-like product: gradient rows against activation rows
      a = gradient_like(rng, rows, k);
      b = normal_vector(rng, rows * k);
    }
    const auto pairs = detail::diagonal_pairs(rows);
    const std::vector<double> ref = detail::exact_dots(a, b, k, pairs);
    std::vector<SnrRow> out;
    auto emit = [&](quant::Format f, const std::string& scaling, quant::Rounding rounding, const Accumulation& acc) {
      const LabOperand qa = detail::quantize_operand(a, rows, k, f, scaling, true, rounding, stream_key(key, {1}));
      const LabOperand qb = detail::quantize_operand(b, rows, k, f, scaling, true, rounding, stream_key(key, {2}));
      SnrRow r = base_row(5, s, dists[di], k);
      r.format = std::string(quant::format_name(f));
      r.scaling = scaling;
      r.rounding = rounding == quant::Rounding::Nearest ? "rne" : "stochastic";
      r.accumulation = acc.name;
      r.promote_interval = acc.promote_interval;
      detail::score(r, ref, qa, qb, pairs, acc);
      out.push_back(std::move(r));
    };
    for (const std::string scaling : {"tensor", "1x128"}) {
      emit(quant::Format::E4M3, scaling, quant::Rounding::Nearest, {"hopper", 128});
      emit(quant::Format::E5M2, scaling, quant::Rounding::Nearest, {"hopper", 128});
      emit(quant::Format::INT8, scaling, quant::Rounding::Nearest, {"int32", -1});
      emit(quant::Format::INT8, scaling, quant::Rounding::Stochastic, {"int32", -1});
    }
    return out;
  });
}

}  // namespace fp8train::lab
