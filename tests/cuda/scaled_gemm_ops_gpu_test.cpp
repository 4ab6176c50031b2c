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

// int8-blockwise's GEMMs: INT8 x INT8 with 1x128 / 128x128 scales, exact integer sums per 128 block (the recipe's
// exact accumulation), on fp8train's kernels through the integer tensor-core instruction -- every form the
// training step runs (Fprop, Dgrad, Dgrad +=, their F32 health views, Wgrad +=; the experts' grouped form over M
// into BF16 and F32 and over K into F32), bit for bit the CPU's, with both scale layouts. The gradients are
// quantized with stochastic rounding as the recipe does (the same seed gives the same codes on both devices).
TEST(ScaledGemmOpsGpu, Int8FormsBitExactOnTheOwnKernels) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto int8_spec = [](quant::Granularity g, bool stochastic) {
    quant::QuantSpec s = spec(g);
    s.format = quant::Format::INT8;
    if (stochastic) {
      s.rounding = quant::Rounding::Stochastic;
      s.seed = 12345;
    }
    return s;
  };
  ops::ScaledGemmOptions exact;
  exact.numerics.mode = quant::AccumMode::Exact;
  ops::ScaledGemmOptions exact_acc = exact;
  exact_acc.accumulate = true;
  const auto host = [](const quant::QTensor& q) { return q.to(Device::cpu()); };
  // A partial last K block in Fprop (k = 192) and in Dgrad (n = 576).
  for (const auto [m, n, k] : {std::array<int64_t, 3>{256, 384, 640}, std::array<int64_t, 3>{384, 576, 192}}) {
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    const Tensor x = bf16_matrix(random_matrix(m, k, seed), m, k, gpu);
    const Tensor w = bf16_matrix(random_matrix(n, k, seed + 1), n, k, gpu);
    const Tensor dy = bf16_matrix(random_matrix(m, n, seed + 2), m, n, gpu);
    for (quant::ScaleLayout layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative}) {
      SCOPED_TRACE(std::string(quant::scale_layout_name(layout)));
      const auto xq =
          ops::quantize(ctx, x, int8_spec(quant::Granularity::tile_1x128(), false), ops::QuantizeOutputs::Both, layout);
      const auto wq = ops::quantize(ctx, w, int8_spec(quant::Granularity::block_128x128(), false),
                                    ops::QuantizeOutputs::Both, layout);
      const auto dyq =
          ops::quantize(ctx, dy, int8_spec(quant::Granularity::tile_1x128(), true), ops::QuantizeOutputs::Both, layout);
      const quant::QTensor wt = wq.transposed(), dyt = dyq.transposed(), xt = xq.transposed();
      const std::vector<float> nan_y(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> nan_dx(static_cast<size_t>(m * k), std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> dx0 = random_matrix(m, k, seed + 4), c0 = random_matrix(n, k, seed + 3);
      struct Form {
        const char* name;
        const quant::QTensor &a, &b;
        DType out;
        const std::vector<float>& init;
        const ops::ScaledGemmOptions& o;
      };
      const Form forms[] = {
          {"fprop", xq, wq, DType::BF16, nan_y, exact},          {"dgrad", dyq, wt, DType::BF16, nan_dx, exact},
          {"dgrad +=", dyq, wt, DType::BF16, dx0, exact_acc},    {"fprop f32", xq, wq, DType::F32, nan_y, exact},
          {"dgrad f32 +=", dyq, wt, DType::F32, dx0, exact_acc}, {"wgrad +=", dyt, xt, DType::F32, c0, exact_acc}};
      for (const Form& f : forms) {
        SCOPED_TRACE(f.name);
        const std::vector<float> want =
            run(ExecCtx::cpu(), host(f.a).rowwise_only(), host(f.b).rowwise_only(), f.out, f.init, f.o);
        const std::vector<float> got = run(ctx, f.a, f.b, f.out, f.init, f.o);
        EXPECT_TRUE(same_bits_f32(got, want, f.b.rows));
      }
    }
  }

  // The experts: 3 of them, the middle one empty, 128 spare rows past the last offset.
  const int64_t experts = 3, rows = 512, n = 256, k = 192;
  const std::vector<int32_t> off = {0, 128, 128, 384};
  std::vector<float> xa = random_matrix(rows, k, seed + 5);
  std::fill(xa.begin() + 384 * k, xa.end(), 0.0f);
  const Tensor x = bf16_matrix(xa, rows, k, gpu);
  const Tensor w = bf16_matrix(random_matrix(experts * n, k, seed + 6), experts * n, k, gpu);
  const Tensor offsets = Tensor::from_vector(off, {experts + 1}, MemCategory::Workspace, Device::cpu());
  const auto xq = ops::quantize(ctx, x, int8_spec(quant::Granularity::tile_1x128(), false), ops::QuantizeOutputs::Both,
                                quant::ScaleLayout::GemmNative);
  const auto wq = ops::quantize(ctx, w, int8_spec(quant::Granularity::block_128x128(), false),
                                ops::QuantizeOutputs::Rowwise, quant::ScaleLayout::GemmNative, experts);
  for (DType out : {DType::BF16, DType::F32}) {
    SCOPED_TRACE("grouped over M into " + std::string(dtype_name(out)));
    auto product = [&](const ExecCtx& c, const quant::QTensor& a, const quant::QTensor& b, const Tensor& offs) {
      Tensor d = out == DType::F32 ? Tensor::from_vector(std::vector<float>(rows * n, 0.25f), {rows, n},
                                                         MemCategory::Workspace, Device::cpu())
                                   : Tensor::from_vector(std::vector<bf16>(rows * n, bf16(0.5f)), {rows, n},
                                                         MemCategory::Workspace, Device::cpu());
      d = d.to(c.device);
      ops::scaled_gemm_grouped(c, a, b, offs, d, exact);
      const Tensor h = d.to(Device::cpu());
      if (out == DType::F32) return h.to_vector<float>();
      std::vector<float> f;
      for (bf16 v : h.to_vector<bf16>()) f.push_back(static_cast<float>(v));
      return f;
    };
    const std::vector<float> want = product(ExecCtx::cpu(), host(xq).rowwise_only(), host(wq), offsets);
    EXPECT_TRUE(same_bits_f32(product(ctx, xq, wq, offsets.to(gpu)), want, n));
  }
  {
    // Over K: each expert's token range of dyᵀ and xᵀ (1x128 along the tokens) into its own [n2, k] gradient.
    SCOPED_TRACE("grouped over K");
    const int64_t n2 = 128;
    const Tensor dy = bf16_matrix(random_matrix(rows, n2, seed + 7), rows, n2, gpu);
    const auto dyq = ops::quantize(ctx, dy, int8_spec(quant::Granularity::tile_1x128(), true),
                                   ops::QuantizeOutputs::Both, quant::ScaleLayout::GemmNative);
    const quant::QTensor a = dyq.transposed(), b = xq.transposed();  // [n2, rows], [k, rows]
    const std::vector<float> init = random_matrix(experts * n2, k, seed + 8);
    auto product = [&](const ExecCtx& c, const quant::QTensor& qa, const quant::QTensor& qb, const Tensor& offs) {
      Tensor d = Tensor::from_vector(init, {experts, n2, k}, MemCategory::Workspace, Device::cpu()).to(c.device);
      ops::scaled_gemm_grouped_k(c, qa, qb, offs, d, exact_acc);
      return d.to(Device::cpu()).to_vector<float>();
    };
    const std::vector<float> want = product(ExecCtx::cpu(), host(a).rowwise_only(), host(b).rowwise_only(), offsets);
    EXPECT_TRUE(same_bits_f32(product(ctx, a, b, offsets.to(gpu)), want, k));
  }
}

// The promote=never ablation's GEMMs: E4M3 with 1x128 / 128x128 scales, each 128-block's scaled partial added into
// a pending sum with the truncating FP22 adder (quant/ref_gemm.h) -- every form the training step runs (Fprop,
// Dgrad, Dgrad +=, their F32 health views, Wgrad +=; the experts' grouped form over M into BF16 and F32 and over K
// into F32), bit for bit the CPU model, with both scale layouts, K of many blocks and partial last blocks. Either
// backend setting runs fp8train's kernels (cuBLASLt has no such arithmetic).
TEST(ScaledGemmOpsGpu, NeverPromoteFormsBitExactOnTheOwnKernels) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ops::ScaledGemmOptions never;
  never.numerics = hopper_config();
  never.numerics.promote_interval = num::kNeverPromote;
  ops::ScaledGemmOptions never_acc = never;
  never_acc.accumulate = true;
  ops::ScaledGemmOptions promoted;
  promoted.numerics = hopper_config();
  const auto host = [](const quant::QTensor& q) { return q.to(Device::cpu()); };
  // Fprop K = 1280 (ten blocks) and Wgrad K = 1152 tokens (nine); then partial last K blocks in Fprop (k = 592)
  // and Dgrad (n = 576).
  for (const auto [m, n, k] : {std::array<int64_t, 3>{1152, 384, 1280}, std::array<int64_t, 3>{384, 576, 592}}) {
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    const Tensor x = bf16_matrix(random_matrix(m, k, seed), m, k, gpu);
    const Tensor w = bf16_matrix(random_matrix(n, k, seed + 1), n, k, gpu);
    const Tensor dy = bf16_matrix(random_matrix(m, n, seed + 2), m, n, gpu);
    for (quant::ScaleLayout layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative}) {
      SCOPED_TRACE(std::string(quant::scale_layout_name(layout)));
      const auto xq = ops::quantize(ctx, x, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both, layout);
      const auto wq =
          ops::quantize(ctx, w, spec(quant::Granularity::block_128x128()), ops::QuantizeOutputs::Both, layout);
      const auto dyq =
          ops::quantize(ctx, dy, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both, layout);
      const quant::QTensor wt = wq.transposed(), dyt = dyq.transposed(), xt = xq.transposed();
      const std::vector<float> nan_y(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> nan_dx(static_cast<size_t>(m * k), std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> dx0 = random_matrix(m, k, seed + 4), c0 = random_matrix(n, k, seed + 3);
      struct Form {
        const char* name;
        const quant::QTensor &a, &b;
        DType out;
        const std::vector<float>& init;
        const ops::ScaledGemmOptions& o;
      };
      const Form forms[] = {
          {"fprop", xq, wq, DType::BF16, nan_y, never},          {"dgrad", dyq, wt, DType::BF16, nan_dx, never},
          {"dgrad +=", dyq, wt, DType::BF16, dx0, never_acc},    {"fprop f32", xq, wq, DType::F32, nan_y, never},
          {"dgrad f32 +=", dyq, wt, DType::F32, dx0, never_acc}, {"wgrad +=", dyt, xt, DType::F32, c0, never_acc}};
      for (const Form& f : forms) {
        const std::vector<float> want =
            run(ExecCtx::cpu(), host(f.a).rowwise_only(), host(f.b).rowwise_only(), f.out, f.init, f.o);
        for (Fp8GemmBackend be : {Fp8GemmBackend::Own, Fp8GemmBackend::CublasLt}) {
          SCOPED_TRACE(std::string(f.name) + " " + ops::cuda::fp8_gemm_backend_name(be));
          ops::cuda::set_fp8_gemm_backend(be);
          EXPECT_TRUE(same_bits_f32(run(ctx, f.a, f.b, f.out, f.init, f.o), want, f.b.rows));
        }
        ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::Auto);
      }
      // The arithmetic differs from promoting every 128 (else the rows above would not test it).
      const std::vector<float> fp22 =
          run(ExecCtx::cpu(), host(xq).rowwise_only(), host(wq).rowwise_only(), DType::F32, nan_y, never);
      const std::vector<float> fp32 =
          run(ExecCtx::cpu(), host(xq).rowwise_only(), host(wq).rowwise_only(), DType::F32, nan_y, promoted);
      EXPECT_FALSE(same_bits_f32(fp22, fp32, n));
    }
  }

  // The experts: 3 of them, the middle one empty, 128 spare rows past the last offset; K of five blocks, the last
  // partial.
  const int64_t experts = 3, rows = 512, n = 256, k = 592;
  const std::vector<int32_t> off = {0, 128, 128, 384};
  std::vector<float> xa = random_matrix(rows, k, seed + 5);
  std::fill(xa.begin() + 384 * k, xa.end(), 0.0f);
  const Tensor x = bf16_matrix(xa, rows, k, gpu);
  const Tensor w = bf16_matrix(random_matrix(experts * n, k, seed + 6), experts * n, k, gpu);
  const Tensor offsets = Tensor::from_vector(off, {experts + 1}, MemCategory::Workspace, Device::cpu());
  const auto xq = ops::quantize(ctx, x, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both,
                                quant::ScaleLayout::GemmNative);
  const auto wq = ops::quantize(ctx, w, spec(quant::Granularity::block_128x128()), ops::QuantizeOutputs::Rowwise,
                                quant::ScaleLayout::GemmNative, experts);
  for (DType out : {DType::BF16, DType::F32}) {
    SCOPED_TRACE("grouped over M into " + std::string(dtype_name(out)));
    auto product = [&](const ExecCtx& c, const quant::QTensor& a, const quant::QTensor& b, const Tensor& offs) {
      Tensor d = out == DType::F32 ? Tensor::from_vector(std::vector<float>(rows * n, 0.25f), {rows, n},
                                                         MemCategory::Workspace, Device::cpu())
                                   : Tensor::from_vector(std::vector<bf16>(rows * n, bf16(0.5f)), {rows, n},
                                                         MemCategory::Workspace, Device::cpu());
      d = d.to(c.device);
      ops::scaled_gemm_grouped(c, a, b, offs, d, never);
      const Tensor h = d.to(Device::cpu());
      if (out == DType::F32) return h.to_vector<float>();
      std::vector<float> f;
      for (bf16 v : h.to_vector<bf16>()) f.push_back(static_cast<float>(v));
      return f;
    };
    const std::vector<float> want = product(ExecCtx::cpu(), host(xq).rowwise_only(), host(wq), offsets);
    EXPECT_TRUE(same_bits_f32(product(ctx, xq, wq, offsets.to(gpu)), want, n));
  }
  {
    // Over K: each expert's token range of dyᵀ and xᵀ (1x128 along the tokens) into its own [n2, k] gradient,
    // accumulated into it.
    SCOPED_TRACE("grouped over K");
    const int64_t n2 = 128;
    const Tensor dy = bf16_matrix(random_matrix(rows, n2, seed + 7), rows, n2, gpu);
    const auto dyq = ops::quantize(ctx, dy, spec(quant::Granularity::tile_1x128()), ops::QuantizeOutputs::Both,
                                   quant::ScaleLayout::GemmNative);
    const quant::QTensor a = dyq.transposed(), b = xq.transposed();  // [n2, rows], [k, rows]
    const std::vector<float> init = random_matrix(experts * n2, k, seed + 8);
    auto product = [&](const ExecCtx& c, const quant::QTensor& qa, const quant::QTensor& qb, const Tensor& offs) {
      Tensor d = Tensor::from_vector(init, {experts, n2, k}, MemCategory::Workspace, Device::cpu()).to(c.device);
      ops::scaled_gemm_grouped_k(c, qa, qb, offs, d, never_acc);
      return d.to(Device::cpu()).to_vector<float>();
    };
    const std::vector<float> want = product(ExecCtx::cpu(), host(a).rowwise_only(), host(b).rowwise_only(), offsets);
    EXPECT_TRUE(same_bits_f32(product(ctx, a, b, offsets.to(gpu)), want, k));
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
