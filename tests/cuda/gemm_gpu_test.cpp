// cuBLASLt scaled GEMMs against the CPU reference GEMM (quant/ref_gemm.h) on fresh random operands with
// poisoned outputs:
//  - an open question answered by measurement: is cuBLASLt's default FP8 accumulation the CPU
//    `hopper` model (FP22 chains of 32, promotion every 128 into FP32, acc = fma(sa*sb, chain, acc)) bit for
//    bit — with unit scales, and with real 1x128 x 128x128 block scales? Where it is, the test asserts
//    bit-exactness; every case also asserts DeepGEMM's calc_diff < 1e-3 against the FP64 product of the
//    dequantized operands. Each case prints one "FINDING" line (mismatch counts, and for block scales how
//    many elements each candidate promotion formula reproduces) so the answer is on record in the log.
//    Measured on the H200 (docs/gpu.md): per-tensor FP8 (E4M3xE4M3,
//    E5M2xE4M3, unit and real scales, promoting and fast, FP32 and BF16 out) and 1x128 x 128x128 block
//    scaling (unit and real scales, both scale layouts) are bit-exact, so that is asserted. The Wgrad form
//    (1x128 x 1x128, FP32 += C) is not (41660 of 98304 outputs differ; calc_diff 8.6e-9): only calc_diff is
//    asserted there, and bit-exactness with FP8TRAIN_EXPECT_SCALED_BITEXACT=1.
//  - Fprop (1x128 x 128x128), Wgrad (1x128 x 1x128, accumulate into FP32), per-tensor E4M3xE4M3 and
//    E5M2xE4M3 (with and without fast accumulation), BF16 x BF16; BF16 and FP32 outputs; both scale layouts;
//    K not a multiple of 128 (the padded 128x128 scale pitch); the plan cache; and the errors of validate().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "numerics/hopper_accum.h"
#include "numerics/metrics.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "quant/quant.h"
#include "quant/ref_gemm.h"

namespace fp8train::gputest {
namespace {

using ops::cuda::GemmInput;
using ops::cuda::GemmOutput;
using ops::cuda::OperandScaling;
using ops::cuda::CublasLtProblem;
using quant::ScaleLayout;

ops::cuda::CublasLtGemm& gemm() { return ops::cuda::cublaslt_gemm(0); }

GemmInput gemm_input(quant::Format f) { return f == quant::Format::E5M2 ? GemmInput::E5M2 : GemmInput::E4M3; }
OperandScaling scaling_of(const quant::QTensor& q) {
  if (q.granularity().per_tensor) return OperandScaling::Tensor;
  return q.granularity().block_rows == 1 ? OperandScaling::Tile1x128 : OperandScaling::Block128x128;
}

// Native cuBLASLt scale layout of a QTensor's row-major scales (quant.h) — see cublaslt_gemm.h.
std::vector<float> native_scales(const quant::QTensor& q) {
  const int64_t sr = q.scale_rows(), sc = q.scale_cols();
  if (scaling_of(q) == OperandScaling::Tile1x128) {
    std::vector<float> out(static_cast<size_t>(sr * sc));
    for (int64_t r = 0; r < sr; ++r)
      for (int64_t c = 0; c < sc; ++c) out[c * sr + r] = q.scale_ptr()[r * sc + c];
    return out;
  }
  if (scaling_of(q) == OperandScaling::Block128x128) {
    const int64_t ld = (sc + 3) / 4 * 4;
    std::vector<float> out(static_cast<size_t>(sr * ld), 0.0f);
    for (int64_t r = 0; r < sr; ++r)
      for (int64_t c = 0; c < sc; ++c) out[r * ld + c] = q.scale_ptr()[r * sc + c];
    return out;
  }
  return q.row_major_scales();
}

struct GpuResult {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};

// D = A·Bᵀ (+ C) on the GPU from two CPU QTensors.
GpuResult run_gpu(const quant::QTensor& a, const quant::QTensor& b, GemmOutput out, bool fast_accum,
                  ScaleLayout layout, const std::vector<float>* c = nullptr) {
  CublasLtProblem p;
  p.m = a.rows;
  p.n = b.rows;
  p.k = a.cols;
  p.a_type = gemm_input(a.format());
  p.b_type = gemm_input(b.format());
  p.a_scaling = scaling_of(a);
  p.b_scaling = scaling_of(b);
  p.a_scale_layout = p.b_scale_layout = layout;
  p.out = out;
  p.fast_accum = fast_accum;
  p.accumulate = c != nullptr;
  DeviceArray<uint8_t> da(a.code_vector()), db(b.code_vector());
  DeviceArray<float> sa(layout == ScaleLayout::GemmNative ? native_scales(a) : a.row_major_scales());
  DeviceArray<float> sb(layout == ScaleLayout::GemmNative ? native_scales(b) : b.row_major_scales());
  GpuResult r;
  if (out == GemmOutput::F32) {
    DeviceArray<float> d(a.rows * b.rows);
    if (c) d.upload(*c);
    gemm().run(p, da.get(), sa.get(), db.get(), sb.get(), d.get(), nullptr);
    r.f32 = d.download();
  } else {
    DeviceArray<uint16_t> d(a.rows * b.rows);
    gemm().run(p, da.get(), sa.get(), db.get(), sb.get(), d.get(), nullptr);
    r.bf16 = d.download();
  }
  return r;
}

quant::QTensor quantize(const std::vector<float>& x, int64_t rows, int64_t cols, quant::Format f,
                            quant::Granularity g) {
  quant::QuantSpec c;
  c.format = f;
  c.granularity = g;
  return quant::quantize(x, rows, cols, c);
}

// Random finite codes with all scales 1 (the setting of the captured H200 vectors).
quant::QTensor unit_scale_operand(int64_t rows, int64_t cols, quant::Format f, quant::Granularity g,
                                      uint64_t seed) {
  std::vector<float> x = random_matrix(rows, cols, seed, 0.0f);
  quant::QTensor q = quantize(x, rows, cols, f, g);
  for (int64_t i = 0; i < q.rowwise.scales.numel(); ++i) q.scale_ptr()[i] = 1.0f;
  return q;
}

double calc_diff_vs_fp64(const std::vector<float>& got, const quant::QTensor& a, const quant::QTensor& b) {
  const std::vector<double> ref = quant::ref_gemm_fp64(a, b);
  return num::calc_diff(std::span<const float>(got), std::span<const double>(ref));
}

// How many outputs each candidate promotion formula reproduces (block-scaled operands, G = 128): the
// FP22 chain of each 128-group (num::hopper_dot over the group) is promoted by
//   0: acc = fma(sa*sb, chain, acc)   (the CPU hopper model)   1: acc = acc + (sa*sb)*chain
//   2: acc = acc + (chain*sa)*sb                                3: acc = fma(chain*sa, sb, acc)
std::vector<int64_t> candidate_matches(const quant::QTensor& a, const quant::QTensor& b,
                                       const std::vector<float>& got, int64_t max_rows) {
  const int64_t K = a.cols, groups = (K + 127) / 128;
  const auto fa = a.format() == quant::Format::E5M2 ? num::Fp8Format::E5M2 : num::Fp8Format::E4M3;
  const auto fb = b.format() == quant::Format::E5M2 ? num::Fp8Format::E5M2 : num::Fp8Format::E4M3;
  std::vector<int64_t> matches(4, 0);
  for (int64_t i = 0; i < std::min(a.rows, max_rows); ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      float acc[4] = {0, 0, 0, 0};
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t k0 = g * 128, len = std::min<int64_t>(128, K - k0);
        const float chain = num::hopper_dot(a.code_ptr() + i * K + k0, fa, b.code_ptr() + j * K + k0, fb,
                                            static_cast<int>(len), num::kNeverPromote);
        const float sa = a.scale_of(i, k0), sb = b.scale_of(j, k0);
        acc[0] = std::fma(sa * sb, chain, acc[0]);
        acc[1] = acc[1] + (sa * sb) * chain;
        acc[2] = acc[2] + (chain * sa) * sb;
        acc[3] = std::fma(chain * sa, sb, acc[3]);
      }
      for (int m = 0; m < 4; ++m) matches[m] += same_float(acc[m], got[i * b.rows + j]) ? 1 : 0;
    }
  return matches;
}

struct GemmShape {
  int64_t m, n, k;
};

TEST(GemmGpu, Fp8BlockScaledUnitScalesAgainstTheHopperModel) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (GemmShape s : {GemmShape{128, 256, 1024}, GemmShape{64, 128, 4096}, GemmShape{132, 68, 384}}) {
    const auto a = unit_scale_operand(s.m, s.k, quant::Format::E4M3, quant::Granularity::tile_1x128(), seed + s.k);
    const auto b = unit_scale_operand(s.n, s.k, quant::Format::E4M3, quant::Granularity::block_128x128(), seed + s.n);
    const GpuResult got = run_gpu(a, b, GemmOutput::F32, false, ScaleLayout::RowMajor);
    quant::GemmConfig cfg;
    cfg.mode = quant::AccumMode::Hopper;
    cfg.promote_interval = 128;
    const std::vector<float> want = quant::ref_gemm(a, b, cfg);
    std::string first;
    const int64_t bad = count_float_mismatches(got.f32, want, &first);
    std::printf("FINDING unit-scale 1x128x128x128 M=%lld N=%lld K=%lld: %lld of %zu outputs differ from the hopper "
                "model; calc_diff vs FP64 %.3g\n",
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                static_cast<long long>(bad), want.size(), calc_diff_vs_fp64(got.f32, a, b));
    EXPECT_LT(calc_diff_vs_fp64(got.f32, a, b), 1e-3);
    EXPECT_EQ(bad, 0) << first;  // measured on the H200: 0 mismatches on every shape
  }
}

TEST(GemmGpu, Fp8BlockScaledRealScalesAgainstHopperModelAndFp64) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (GemmShape s : {GemmShape{128, 256, 1024}, GemmShape{256, 128, 640}, GemmShape{132, 68, 320}, GemmShape{128, 256, 4096}}) {
    const auto xa = random_matrix(s.m, s.k, seed + s.m);
    const auto xb = random_matrix(s.n, s.k, seed + s.n + 1);
    const auto a = quantize(xa, s.m, s.k, quant::Format::E4M3, quant::Granularity::tile_1x128());
    const auto b = quantize(xb, s.n, s.k, quant::Format::E4M3, quant::Granularity::block_128x128());
    for (ScaleLayout layout : {ScaleLayout::RowMajor, ScaleLayout::GemmNative}) {
      const GpuResult got = run_gpu(a, b, GemmOutput::F32, false, layout);
      quant::GemmConfig cfg;
      cfg.mode = quant::AccumMode::Hopper;
      const std::vector<float> want = quant::ref_gemm(a, b, cfg);
      const int64_t bad = count_float_mismatches(got.f32, want);
      const double cd = calc_diff_vs_fp64(got.f32, a, b);
      const auto cand = candidate_matches(a, b, got.f32, 64);
      std::printf("FINDING block-scaled 1x128x128x128 %s M=%lld N=%lld K=%lld: %lld of %zu outputs differ from the "
                  "hopper model; calc_diff vs FP64 %.3g; candidates (first 64 rows, %lld outputs) fma(sa*sb,c,acc) "
                  "%lld, acc+(sa*sb)*c %lld, acc+(c*sa)*sb %lld, fma(c*sa,sb,acc) %lld\n",
                  layout == ScaleLayout::GemmNative ? "native" : "row-major", static_cast<long long>(s.m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(bad), want.size(),
                  cd, static_cast<long long>(std::min<int64_t>(64, s.m) * s.n), static_cast<long long>(cand[0]),
                  static_cast<long long>(cand[1]), static_cast<long long>(cand[2]), static_cast<long long>(cand[3]));
      EXPECT_LT(cd, 1e-3);
      // Bit-exact against the hopper model with real scales (the H200 measured 0 mismatches, both layouts; the
      // promotion is acc = fma(sa*sb, partial, acc), the first candidate).
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(GemmGpu, Fp8BlockScaledBf16OutputAndE5M2Activations) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 128, n = 384, k = 768;
  const auto xa = random_matrix(m, k, seed);
  const auto xb = random_matrix(n, k, seed + 1);
  for (quant::Format fa : {quant::Format::E4M3, quant::Format::E5M2}) {
    const auto a = quantize(xa, m, k, fa, quant::Granularity::tile_1x128());
    const auto b = quantize(xb, n, k, quant::Format::E4M3, quant::Granularity::block_128x128());
    const GpuResult f32 = run_gpu(a, b, GemmOutput::F32, false, ScaleLayout::RowMajor);
    const GpuResult bf = run_gpu(a, b, GemmOutput::BF16, false, ScaleLayout::RowMajor);
    // The BF16 output is the FP32 result rounded to nearest even.
    std::string first;
    EXPECT_EQ(count_mismatches(bf.bf16, to_bf16(f32.f32), &first), 0) << first;
    const std::vector<double> ref = quant::ref_gemm_fp64(a, b);
    const auto bf_values = from_bf16(bf.bf16);
    EXPECT_LT(num::calc_diff(std::span<const float>(bf_values), std::span<const double>(ref)), 1e-3);
    EXPECT_LT(num::calc_diff(std::span<const float>(f32.f32), std::span<const double>(ref)), 1e-3);
  }
}

TEST(GemmGpu, WgradOneByOneTwentyEightAccumulatesIntoFp32) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // dW[O, I] += dyᵀ[O, T] · xᵀ[I, T]ᵀ, both operands tiled 1x128 along T.
  const int64_t O = 256, I = 384, T = 1024;
  const auto dyt = quantize(random_matrix(O, T, seed), O, T, quant::Format::E4M3, quant::Granularity::tile_1x128());
  const auto xt = quantize(random_matrix(I, T, seed + 1), I, T, quant::Format::E4M3, quant::Granularity::tile_1x128());
  const std::vector<float> c = random_matrix(O, I, seed + 2);
  const GpuResult got = run_gpu(dyt, xt, GemmOutput::F32, false, ScaleLayout::RowMajor, &c);
  quant::GemmConfig cfg;
  cfg.mode = quant::AccumMode::Hopper;
  cfg.accumulate = true;
  const std::vector<float> want = quant::ref_gemm(dyt, xt, cfg, &c);
  const int64_t bad = count_float_mismatches(got.f32, want);
  std::vector<double> ref = quant::ref_gemm_fp64(dyt, xt);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] += c[i];
  const double cd = num::calc_diff(std::span<const float>(got.f32), std::span<const double>(ref));
  std::printf("FINDING wgrad 1x128x1x128 accumulate M=%lld N=%lld K=%lld: %lld of %zu outputs differ from the "
              "hopper model (+C); calc_diff vs FP64 %.3g\n",
              static_cast<long long>(O), static_cast<long long>(I), static_cast<long long>(T),
              static_cast<long long>(bad), want.size(), cd);
  EXPECT_LT(cd, 1e-3);
  if (std::getenv("FP8TRAIN_EXPECT_SCALED_BITEXACT")) { EXPECT_EQ(bad, 0); }
}

TEST(GemmGpu, PerTensorFp8WithAndWithoutFastAccumulation) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 128, n = 256, k = 2048;
  for (quant::Format fa : {quant::Format::E4M3, quant::Format::E5M2})
    for (bool fast : {false, true})
      for (bool unit : {true, false}) {
        auto a = quantize(random_matrix(m, k, seed + 3), m, k, fa, quant::Granularity::tensor());
        auto b = quantize(random_matrix(n, k, seed + 4), n, k, quant::Format::E4M3, quant::Granularity::tensor());
        if (unit) a.scale_ptr()[0] = b.scale_ptr()[0] = 1.0f;
        const GpuResult got = run_gpu(a, b, GemmOutput::F32, fast, ScaleLayout::RowMajor);
        quant::GemmConfig cfg;
        cfg.mode = quant::AccumMode::Hopper;
        cfg.promote_interval = fast ? num::kNeverPromote : 128;
        const std::vector<float> want = quant::ref_gemm(a, b, cfg);
        const int64_t bad = count_float_mismatches(got.f32, want);
        const double cd = calc_diff_vs_fp64(got.f32, a, b);
        std::printf("FINDING per-tensor %s x e4m3 %s %s scales M=%lld N=%lld K=%lld: %lld of %zu outputs differ "
                    "from the hopper model; calc_diff vs FP64 %.3g\n",
                    fa == quant::Format::E5M2 ? "e5m2" : "e4m3", fast ? "fast-accum" : "promote-128",
                    unit ? "unit" : "real", static_cast<long long>(m), static_cast<long long>(n),
                    static_cast<long long>(k), static_cast<long long>(bad), want.size(), cd);
        EXPECT_LT(cd, fast ? 1e-2 : 1e-3);
        // Measured on the H200 (2026-11-21): 0 mismatches in all eight
        // per-tensor cases, unit and real scales, promoting and fast — so bit-exactness is asserted.
        EXPECT_EQ(bad, 0);
      }
}

// The fp8-tensorwise recipe's Fprop/Dgrad form: per-tensor FP8 with BF16 output (the bench's fp8_tensor case).
TEST(GemmGpu, PerTensorFp8Bf16Output) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 128, n = 256, k = 2048;
  for (bool fast : {false, true}) {
    const auto a = quantize(random_matrix(m, k, seed + 5), m, k, quant::Format::E4M3, quant::Granularity::tensor());
    const auto b = quantize(random_matrix(n, k, seed + 6), n, k, quant::Format::E4M3, quant::Granularity::tensor());
    const GpuResult got = run_gpu(a, b, GemmOutput::BF16, fast, ScaleLayout::RowMajor);
    quant::GemmConfig cfg;
    cfg.mode = quant::AccumMode::Hopper;
    cfg.promote_interval = fast ? num::kNeverPromote : 128;
    const std::vector<float> want = quant::ref_gemm(a, b, cfg);
    const int64_t bad = count_mismatches(got.bf16, to_bf16(want));
    const double cd = calc_diff_vs_fp64(from_bf16(got.bf16), a, b);
    std::printf("FINDING per-tensor e4m3 x e4m3 %s bf16 output M=%lld N=%lld K=%lld: %lld of %zu outputs differ from "
                "bf16(hopper model); calc_diff vs FP64 %.3g\n",
                fast ? "fast-accum" : "promote-128", static_cast<long long>(m), static_cast<long long>(n),
                static_cast<long long>(k), static_cast<long long>(bad), want.size(), cd);
    EXPECT_LT(cd, 1e-3);
  }
  // Per-tensor scales that are 4- but not 16-byte aligned (two scalars packed in one buffer, as the bench and
  // the tensorwise recipe keep them): cuBLASLt refuses those, so the wrapper copies them; same result.
  const auto a = quantize(random_matrix(m, k, seed + 7), m, k, quant::Format::E4M3, quant::Granularity::tensor());
  const auto b = quantize(random_matrix(n, k, seed + 8), n, k, quant::Format::E4M3, quant::Granularity::tensor());
  CublasLtProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_type = p.b_type = GemmInput::E4M3;
  p.a_scaling = p.b_scaling = OperandScaling::Tensor;
  p.out = GemmOutput::BF16;
  DeviceArray<uint8_t> da(a.code_vector()), db(b.code_vector());
  DeviceArray<float> scales(std::vector<float>{0.0f, a.scale_ptr()[0], b.scale_ptr()[0]});
  DeviceArray<uint16_t> d(m * n);
  gemm().run(p, da.get(), scales.get() + 1, db.get(), scales.get() + 2, d.get(), nullptr);
  const std::vector<uint16_t> aligned = run_gpu(a, b, GemmOutput::BF16, false, ScaleLayout::RowMajor).bf16;
  EXPECT_EQ(count_mismatches(d.download(), aligned), 0);
}

TEST(GemmGpu, Bf16GemmMatchesFp64) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 256, n = 512, k = 1024;
  const auto a16 = to_bf16(random_matrix(m, k, seed, 1.0f));
  const auto b16 = to_bf16(random_matrix(n, k, seed + 1, 1.0f));
  const auto a = from_bf16(a16), b = from_bf16(b16);
  std::vector<double> ref(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += static_cast<double>(a[i * k + q]) * b[j * k + q];
      ref[i * n + j] = s;
    }
  CublasLtProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_type = p.b_type = GemmInput::BF16;
  p.a_scaling = p.b_scaling = OperandScaling::None;
  DeviceArray<uint16_t> da(a16), db(b16);
  for (GemmOutput out : {GemmOutput::F32, GemmOutput::BF16}) {
    p.out = out;
    if (out == GemmOutput::F32) {
      DeviceArray<float> d(m * n);
      gemm().run(p, da.get(), nullptr, db.get(), nullptr, d.get(), nullptr);
      const auto got = d.download();
      EXPECT_LT(num::calc_diff(std::span<const float>(got), std::span<const double>(ref)), 1e-6);
    } else {
      DeviceArray<uint16_t> d(m * n);
      gemm().run(p, da.get(), nullptr, db.get(), nullptr, d.get(), nullptr);
      const auto got = from_bf16(d.download());
      EXPECT_LT(num::calc_diff(std::span<const float>(got), std::span<const double>(ref)), 1e-4);
    }
  }
}

TEST(GemmGpu, PlansAreCachedPerShape) {
  const uint64_t seed = fresh_seed();
  const auto a = quantize(random_matrix(128, 512, seed), 128, 512, quant::Format::E4M3, quant::Granularity::tile_1x128());
  const auto b = quantize(random_matrix(256, 512, seed + 1), 256, 512, quant::Format::E4M3,
                          quant::Granularity::block_128x128());
  run_gpu(a, b, GemmOutput::BF16, false, ScaleLayout::GemmNative);
  const size_t plans = gemm().cached_plans();
  for (int i = 0; i < 3; ++i) run_gpu(a, b, GemmOutput::BF16, false, ScaleLayout::GemmNative);
  EXPECT_EQ(gemm().cached_plans(), plans);
  const auto a2 = quantize(random_matrix(64, 512, seed + 2), 64, 512, quant::Format::E4M3, quant::Granularity::tile_1x128());
  run_gpu(a2, b, GemmOutput::BF16, false, ScaleLayout::GemmNative);
  EXPECT_EQ(gemm().cached_plans(), plans + 1);
  CublasLtProblem p;
  p.m = 128;
  p.n = 256;
  p.k = 512;
  p.out = GemmOutput::BF16;
  p.a_scale_layout = ScaleLayout::GemmNative;
  p.b_scale_layout = ScaleLayout::GemmNative;
  std::printf("cuBLASLt plan for %s: %s (%s)\n", p.describe().c_str(), gemm().algorithm(p).c_str(),
              ops::cuda::cublaslt_version().c_str());
}

// The per-expert BF16 GEMMs meet a new row count almost every call: shapes within one 64-rounded bucket share the
// bucket's heuristic choice (checked by cuBLASLt for each exact shape) instead of a query each, and compute right.
TEST(GemmGpu, PlainGemmsShareTheHeuristicWithinA64Bucket) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t n = 392, k = 328;  // shapes no other test plans
  const auto b16 = to_bf16(random_matrix(n, k, seed + 1, 1.0f));
  const auto b = from_bf16(b16);
  DeviceArray<uint16_t> db(b16);
  auto run = [&](int64_t m) {
    const auto a16 = to_bf16(random_matrix(m, k, seed + static_cast<uint64_t>(m), 1.0f));
    const auto a = from_bf16(a16);
    std::vector<double> ref(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t q = 0; q < k; ++q) sum += static_cast<double>(a[i * k + q]) * b[j * k + q];
        ref[i * n + j] = sum;
      }
    ops::cuda::CublasLtPlainProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.trans_b = true;  // b stored [n, k]
    p.out = GemmOutput::F32;
    p.lda = k;
    p.ldb = k;
    p.ldc = n;
    DeviceArray<uint16_t> da(a16);
    DeviceArray<float> d(m * n);
    gemm().run_plain(p, da.get(), db.get(), d.get(), nullptr);
    const auto got = d.download();
    EXPECT_LT(num::calc_diff(std::span<const float>(got), std::span<const double>(ref)), 1e-6) << "m = " << m;
    return gemm().plain_heuristic_queries();
  };
  const int64_t first = run(200);  // bucket m 256
  EXPECT_EQ(run(230), first);      // the same bucket: no query
  EXPECT_EQ(run(256), first);
  EXPECT_EQ(run(300), first + 1);  // bucket m 320: a query of its own
}

TEST(GemmGpu, UnservableProblemsThrowClearErrors) {
  auto expect_error = [](CublasLtProblem p, const char* needle) {
    try {
      ops::cuda::CublasLtGemm::validate(p);
      ADD_FAILURE() << "accepted: " << p.describe();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  CublasLtProblem p;
  p.m = 128;
  p.n = 256;
  p.k = 512;
  ops::cuda::CublasLtGemm::validate(p);  // the Fprop default is servable
  CublasLtProblem q = p;
  q.a_type = q.b_type = GemmInput::E5M2;
  expect_error(q, "E5M2 x E5M2");
  q = p;
  q.a_scaling = OperandScaling::Block128x128;
  expect_error(q, "both operands");
  q = p;
  q.m = 126;
  expect_error(q, "multiples of 4");
  q = p;
  q.k = 520;  // 520 bytes per row is not a multiple of 16
  expect_error(q, "16 bytes");
  q = p;
  q.fast_accum = true;
  expect_error(q, "fast accumulation");
  q = p;
  q.b_scaling = OperandScaling::Tensor;
  expect_error(q, "per-tensor");
  q = p;
  q.a_type = GemmInput::BF16;
  expect_error(q, "not a mix");

  // A misaligned operand pointer is refused before cuBLASLt sees it.
  DeviceArray<uint8_t> a(128 * 512 + 16), b(256 * 512);
  DeviceArray<float> sa(128 * 4), sb(2 * 4);
  DeviceArray<uint16_t> d(128 * 256);
  EXPECT_THROW(gemm().run(p, a.get() + 8, sa.get(), b.get(), sb.get(), d.get(), nullptr), Error);
}

}  // namespace
}  // namespace fp8train::gputest
