// The scaled-GEMM ops on CUDA QTensors (ops/scaled_gemm.h) against the CPU op of the same name, on operands the
// CUDA quantizer made: fp8train's own kernels by default — bit for bit the CPU hopper model, including the split-K
// arithmetic the numerics ask for — and cuBLASLt on request (FP8TRAIN_FP8_GEMM / set_fp8_gemm_backend), within
// DeepGEMM's calc_diff < 1e-3. Fprop form: x 1x128 · W 128x128 -> BF16; Dgrad: dy · Wᵀ through W's column-wise
// payload, also accumulating into a BF16 dx; Wgrad: dyᵀ 1x128 · xᵀ 1x128 -> FP32 accumulated into the output, both
// from column-wise payloads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "fp8_gemm_test_util.h"
#include "numerics/metrics.h"
#include "ops/gemm.h"
#include "ops/quantize.h"
#include "ops/scaled_gemm.h"

namespace fp8train::gputest {
namespace {

using ops::cuda::Fp8GemmBackend;

Tensor bf16_matrix(const std::vector<float>& x, int64_t rows, int64_t cols, Device d) {
  std::vector<bf16> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf16(x[i]);
  return Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, Device::cpu()).to(d);
}

quant::QuantSpec spec(quant::Granularity g) {
  quant::QuantSpec s;
  s.granularity = g;
  return s;
}

// The product of one call on each device: d (+)= a·bᵀ, d starting from `init`.
std::vector<float> run(const ExecCtx& ctx, const quant::QTensor& a, const quant::QTensor& b, DType out,
                       const std::vector<float>& init, const ops::ScaledGemmOptions& o) {
  Tensor d = Tensor::from_vector(init, {a.rows, b.rows}, MemCategory::Workspace, Device::cpu());
  if (out == DType::BF16) {
    std::vector<bf16> v(init.size());
    for (size_t i = 0; i < init.size(); ++i) v[i] = bf16(init[i]);
    d = Tensor::from_vector(v, {a.rows, b.rows}, MemCategory::Workspace, Device::cpu());
  }
  d = d.to(ctx.device);
  ops::scaled_gemm(ctx, a, b, d, o);
  const Tensor h = d.to(Device::cpu());
  if (out == DType::F32) return h.to_vector<float>();
  std::vector<float> f;
  for (bf16 v : h.to_vector<bf16>()) f.push_back(static_cast<float>(v));
  return f;
}

TEST(ScaledGemmOpsGpu, OwnKernelsBitExactCublasLtWithinBound) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // k = 640: padded scale pitch. The second shape has partial last K blocks in Fprop (k = 192) and Dgrad (n = 576,
  // MLA's kv_lora_rank + rope dims): the kernels zero-fill them, the CPU model runs shorter blocks.
  for (const auto [m, n, k] : {std::array<int64_t, 3>{256, 384, 640}, std::array<int64_t, 3>{256, 576, 192}}) {
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    const Tensor x = bf16_matrix(random_matrix(m, k, seed), m, k, gpu);
    const Tensor w = bf16_matrix(random_matrix(n, k, seed + 1), n, k, gpu);
    const Tensor dy = bf16_matrix(random_matrix(m, n, seed + 2), m, n, gpu);
    for (quant::ScaleLayout layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative}) {
      const auto xq = ops::quantize(ctx, x, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both, layout);
      const auto wq =
          ops::quantize(ctx, w, spec(quant::Granularity::block_128x128()), ops::QuantizeOutputs::Both, layout);
      const auto dyq =
          ops::quantize(ctx, dy, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both, layout);
      const auto host = [](const quant::QTensor& q) { return q.to(Device::cpu()); };
      ops::ScaledGemmOptions fprop;
      fprop.numerics = hopper_config();
      ops::ScaledGemmOptions wgrad = fprop;
      wgrad.accumulate = true;
      const std::vector<float> c0 = random_matrix(n, k, seed + 3);
      const std::vector<float> nan_init(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> nan_dx(static_cast<size_t>(m * k), std::numeric_limits<float>::quiet_NaN());
      // Dgrad adding into an input gradient another Linear wrote (MLA's wkv_a after wq_a): d = bf16(d + dy·W).
      const std::vector<float> dx0 = random_matrix(m, k, seed + 4);
      ops::ScaledGemmOptions dgrad_acc = fprop;
      dgrad_acc.accumulate = true;
      struct Form {
        const char* name;
        const quant::QTensor &a, &b;
        DType out;
        const std::vector<float>& init;
        const ops::ScaledGemmOptions& o;
      };
      const quant::QTensor wt = wq.transposed(), dyt = dyq.transposed(), xt = xq.transposed();
      const Form forms[] = {
          {"fprop", xq, wq, DType::BF16, nan_init, fprop},       {"dgrad", dyq, wt, DType::BF16, nan_dx, fprop},
          {"dgrad +=", dyq, wt, DType::BF16, dx0, dgrad_acc},    {"fprop f32", xq, wq, DType::F32, nan_init, fprop},
          {"dgrad f32 +=", dyq, wt, DType::F32, dx0, dgrad_acc}, {"wgrad", dyt, xt, DType::F32, c0, wgrad}};
      for (const Form& f : forms) {
        const std::vector<float> want =
            run(ExecCtx::cpu(), host(f.a).rowwise_only(), host(f.b).rowwise_only(), f.out, f.init, f.o);
        for (Fp8GemmBackend be : {Fp8GemmBackend::Own, Fp8GemmBackend::CublasLt}) {
          SCOPED_TRACE(std::string(f.name) + " " + ops::cuda::fp8_gemm_backend_name(be) + " " +
                       std::string(quant::scale_layout_name(layout)));
          ops::cuda::set_fp8_gemm_backend(be);
          const std::vector<float> got = run(ctx, f.a, f.b, f.out, f.init, f.o);
          if (be == Fp8GemmBackend::Own)
            EXPECT_TRUE(same_bits_f32(got, want, f.b.rows));
          else
            EXPECT_LT(num::calc_diff(std::span<const float>(got), std::span<const float>(want)), 1e-3);
        }
      }
    }
  }
  ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::Auto);
}

// The experts' grouped form over M, into BF16 (the training GEMM) and into F32 (the numerics-health samples: one
// F32 product per expert), bit for bit the CPU's; an empty expert and spare rows past the last offset included.
TEST(ScaledGemmOpsGpu, GroupedOverMBitExactIntoBf16AndF32) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t experts = 3, rows = 512, n = 256, k = 192;
  const std::vector<int32_t> off = {0, 128, 128, 384};  // expert 1 empty; rows 384..511 spare (zero in a)
  std::vector<float> xa = random_matrix(rows, k, seed);
  std::fill(xa.begin() + 384 * k, xa.end(), 0.0f);
  const Tensor x = bf16_matrix(xa, rows, k, gpu);
  const Tensor w = bf16_matrix(random_matrix(experts * n, k, seed + 1), experts * n, k, gpu);
  const Tensor offsets = Tensor::from_vector(off, {experts + 1}, MemCategory::Workspace, Device::cpu());
  const auto xq = ops::quantize(ctx, x, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Rowwise,
                                quant::ScaleLayout::GemmNative);
  const auto wq = ops::quantize(ctx, w, spec(quant::Granularity::block_128x128()), ops::QuantizeOutputs::Rowwise,
                                quant::ScaleLayout::GemmNative, experts);
  ops::ScaledGemmOptions o;
  o.numerics = hopper_config();
  for (DType out : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(out));
    const std::vector<float> nan_init(static_cast<size_t>(rows * n), std::numeric_limits<float>::quiet_NaN());
    auto product = [&](const ExecCtx& c, const quant::QTensor& a, const quant::QTensor& b, const Tensor& offs) {
      Tensor d = Tensor::from_vector(nan_init, {rows, n}, MemCategory::Workspace, Device::cpu());
      if (out == DType::BF16)
        d = Tensor::from_vector(std::vector<bf16>(nan_init.size(), bf16(0.5f)), {rows, n}, MemCategory::Workspace,
                                Device::cpu());
      d = d.to(c.device);
      ops::scaled_gemm_grouped(c, a, b, offs, d, o);
      const Tensor h = d.to(Device::cpu());
      if (out == DType::F32) return h.to_vector<float>();
      std::vector<float> f;
      for (bf16 v : h.to_vector<bf16>()) f.push_back(static_cast<float>(v));
      return f;
    };
    const std::vector<float> want = product(ExecCtx::cpu(), xq.to(Device::cpu()), wq.to(Device::cpu()), offsets);
    const std::vector<float> got = product(ctx, xq, wq, offsets.to(gpu));
    EXPECT_TRUE(same_bits_f32(got, want, n));
  }
}

TEST(ScaledGemmOpsGpu, BfSixteenGemmEntryOnCublasLt) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 128, n = 256, k = 512;
  const std::vector<float> xa = random_matrix(m, k, seed, 0.0f), wa = random_matrix(n, k, seed + 1, 0.0f);
  const Tensor x = bf16_matrix(xa, m, k, gpu), w = bf16_matrix(wa, n, k, gpu);
  Tensor y = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, gpu);
  ops::gemm(ctx, x, false, w, true, y);
  const Tensor xh = x.to(Device::cpu()), wh = w.to(Device::cpu());
  Tensor yh = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, Device::cpu());
  ops::gemm(ExecCtx::cpu(), xh, false, wh, true, yh);  // FP32 accumulation of the same BF16 inputs
  EXPECT_LT(num::calc_diff(std::span<const float>(y.to(Device::cpu()).to_vector<float>()),
                           std::span<const float>(yh.to_vector<float>())),
            1e-6);
  // a·b with b not transposed ([K, N]): served too (every transpose form runs on cuBLASLt)
  const Tensor b = bf16_matrix(random_matrix(k, n, seed + 2, 0.0f), k, n, gpu);
  Tensor z = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, gpu);
  ops::gemm(ctx, x, false, b, false, z);
  Tensor zh = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, Device::cpu());
  ops::gemm(ExecCtx::cpu(), xh, false, b.to(Device::cpu()), false, zh);
  EXPECT_LT(num::calc_diff(std::span<const float>(z.to(Device::cpu()).to_vector<float>()),
                           std::span<const float>(zh.to_vector<float>())),
            1e-6);
}

}  // namespace
}  // namespace fp8train::gputest
