// The numerics-health sample on GPU tensors (recipe/health.h through ops/health_stats.h): measure_health gives the
// CPU's counts and scale range exactly, measure_accuracy its sums to the last bits, for an activation (1x128 and
// its transposed Wgrad copy) and expert weights (128x128, row groups); and on a context whose stream is not the
// device's own (a side queue), the measurement sees the work queued before it there. (The backend test table runs
// the two ops themselves over every format and layout.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "ops/elementwise.h"
#include "ops/quantize.h"
#include "recipe/health.h"
#include "tensor/backend.h"

namespace fp8train::gputest {
namespace {

using recipe::GemmAccuracy;
using recipe::OperandHealth;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

void expect_same(const OperandHealth& got, const OperandHealth& want, const std::string& what) {
  EXPECT_EQ(got.elements, want.elements) << what;
  EXPECT_EQ(got.nonzero, want.nonzero) << what;
  EXPECT_EQ(got.saturated, want.saturated) << what;
  EXPECT_EQ(got.underflow, want.underflow) << what;
  EXPECT_TRUE(same_bits(got.scale_min, want.scale_min)) << what << ": " << got.scale_min << " vs " << want.scale_min;
  EXPECT_TRUE(same_bits(got.scale_max, want.scale_max)) << what << ": " << got.scale_max << " vs " << want.scale_max;
}

void expect_close(const GemmAccuracy& got, const GemmAccuracy& want, const std::string& what) {
  for (const auto& [g, w, name] : {std::tuple{got.error_sq, want.error_sq, "error_sq"},
                                   std::tuple{got.reference_sq, want.reference_sq, "reference_sq"},
                                   std::tuple{got.row_rel_sum, want.row_rel_sum, "row_rel_sum"}})
    EXPECT_LE(std::abs(g - w), 1e-12 * std::abs(w)) << what << " " << name << ": " << g << " vs " << w;
  EXPECT_EQ(got.rows, want.rows) << what;
}

Tensor bf16_on(const std::vector<float>& x, int64_t rows, int64_t cols, Device d) {
  const Tensor f = Tensor::from_vector(x, {rows, cols}, MemCategory::Workspace, Device::cpu());
  const Tensor b = Tensor::empty({rows, cols}, DType::BF16, MemCategory::Workspace, Device::cpu());
  ops::copy(ExecCtx::cpu(), f, b);
  return b.to(d);
}

// After quantization, as a stale scale sees it: some values ×8 (saturate), zeros, NaNs.
std::vector<float> stale(std::vector<float> x) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 13 == 1) x[i] *= 8.0f;
    if (i % 29 == 2) x[i] = 0.0f;
    if (i % 31 == 4) x[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

quant::QuantSpec spec(quant::Granularity g) {
  quant::QuantSpec s;
  s.granularity = g;
  return s;
}

TEST(HealthGpu, OperandHealthAndAccuracyEqualTheCpus) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  // An activation [T, d] in BF16 with tiny values (underflow), its 1x128 quantization and the 128x1 Wgrad copy.
  const int64_t T = 1024, d = 520;
  std::vector<float> x = random_matrix(T, d, seed);
  for (size_t i = 0; i < x.size(); i += 11) x[i] *= 1e-6f;
  const quant::QTensor q = ops::quantize(ctx, bf16_on(x, T, d, gpu), spec(quant::Granularity::tile_1x128()),
                                         ops::QuantizeOutputs::Both, quant::ScaleLayout::GemmNative);
  const Tensor xs_cpu = bf16_on(stale(x), T, d, Device::cpu()), xs = xs_cpu.to(gpu);
  const quant::QTensor q_cpu = q.to(Device::cpu());
  const OperandHealth fprop = recipe::measure_health(ctx, xs, q.rowwise_only());
  expect_same(fprop, recipe::measure_health(xs_cpu, q_cpu.rowwise_only()), "1x128");
  EXPECT_GT(fprop.saturated, 0);
  EXPECT_GT(fprop.underflow, 0);
  expect_same(recipe::measure_health(ctx, xs, q.transposed().rowwise_only(), true),
              recipe::measure_health(xs_cpu, q_cpu.transposed().rowwise_only(), true), "128x1 (transposed)");
  // Expert weights [E·N, K] (N = 160: a short block per expert), F32 masters, 128x128 blocks.
  const int64_t E = 3, N = 160, K = 384;
  const std::vector<float> w = random_matrix(E * N, K, seed + 1);
  const Tensor w_cpu = Tensor::from_vector(w, {E * N, K}, MemCategory::Workspace, Device::cpu());
  const quant::QTensor wq = ops::quantize(ctx, w_cpu.to(gpu), spec(quant::Granularity::block_128x128()),
                                          ops::QuantizeOutputs::Rowwise, quant::ScaleLayout::GemmNative, E);
  expect_same(recipe::measure_health(ctx, w_cpu.to(gpu), wq), recipe::measure_health(w_cpu, wq.to(Device::cpu())),
              "128x128 experts");
  // A product in F32 and in BF16 against an F32 reference.
  std::vector<float> ref = random_matrix(T, d, seed + 2), y = ref;
  for (size_t i = 0; i < y.size(); ++i) y[i] *= 1.0f + 0.004f * std::sin(static_cast<float>(i));
  const Tensor y_cpu = Tensor::from_vector(y, {T, d}, MemCategory::Workspace, Device::cpu());
  const Tensor ref_cpu = Tensor::from_vector(ref, {T, d}, MemCategory::Workspace, Device::cpu());
  expect_close(recipe::measure_accuracy(ctx, y_cpu.to(gpu), ref_cpu.to(gpu)), recipe::measure_accuracy(y_cpu, ref_cpu),
               "f32");
  const Tensor yb_cpu = bf16_on(y, T, d, Device::cpu());
  expect_close(recipe::measure_accuracy(ctx, yb_cpu.to(gpu), ref_cpu.to(gpu)),
               recipe::measure_accuracy(yb_cpu, ref_cpu), "bf16 vs f32");
}

// The measurement runs on its context's stream and waits for it: y scaled by 2 on a side stream just before is
// what it measures (with the wait missing, the read-back on the device's own stream could overtake the side work).
TEST(HealthGpu, MeasuresAfterTheWorkQueuedOnItsContext) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device gpu = Device::cuda(0);
  std::unique_ptr<SideQueue> side = backend(gpu).side_queue();
  const ExecCtx ctx = ExecCtx::on(gpu).with_stream(side->side_stream());
  const int64_t rows = 4096, cols = 4096;
  const std::vector<float> ref = random_matrix(rows, cols, seed);
  const Tensor ref_cpu = Tensor::from_vector(ref, {rows, cols}, MemCategory::Workspace, Device::cpu());
  const Tensor y = ref_cpu.to(gpu), r = ref_cpu.to(gpu);
  backend(gpu).synchronize();
  for (int round = 0; round < 3; ++round) {
    ops::scale(ctx, y, 2.0);  // y = 2^(round + 1) · ref, on the side stream
    const GemmAccuracy a = recipe::measure_accuracy(ctx, y, r);
    // Σ(2^k R − R)² / ΣR² = (2^k − 1)² exactly in exact arithmetic; the FP64 sums carry ~1e-12.
    const double k = std::ldexp(1.0, round + 1) - 1.0;
    EXPECT_NEAR(a.relative_error(), k, 1e-9 * k) << "round " << round;
  }
}

}  // namespace
}  // namespace fp8train::gputest
