// The quantization ops on CUDA tensors (ops/quantize.h) against the CPU ops of the same name: codes and scales
// equal byte for byte in both scale layouts (column-wise payloads included), outputs on the input's device under
// the requested memory category, and bad tensors refused with a sentence naming the problem. (The backend test
// table covers the formats, granularities and groups; this file the Tensor-level behaviour.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "ops/quantize.h"
#include "ops/swiglu.h"

namespace fp8train::gputest {
namespace {

quant::QuantSpec spec(quant::Format f, quant::Granularity g, bool pow2 = false) {
  quant::QuantSpec s;
  s.format = f;
  s.granularity = g;
  s.scale_mode = pow2 ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  return s;
}

void expect_equal(const quant::QTensor& got, const quant::QTensor& want, const std::string& what) {
  ASSERT_EQ(got.rowwise.defined(), want.rowwise.defined()) << what;
  ASSERT_EQ(got.colwise.defined(), want.colwise.defined()) << what;
  std::string first;
  for (const auto& [g, w, name] : {std::tuple{&got.rowwise, &want.rowwise, "rowwise"},
                                   std::tuple{&got.colwise, &want.colwise, "colwise"}}) {
    if (!w->defined()) continue;
    const Tensor gc = g->codes.to(Device::cpu()), wc = w->codes;
    EXPECT_EQ(count_mismatches(gc.to_vector<uint8_t>(), wc.to_vector<uint8_t>(), &first), 0)
        << what << " " << name << " codes " << first;
    EXPECT_EQ(count_float_mismatches(g->scales.to(Device::cpu()).to_vector<float>(), w->scales.to_vector<float>(),
                                     &first),
              0)
        << what << " " << name << " scales " << first;
  }
}

TEST(QuantizeOpsGpu, MatchTheCpuOpsOnTensors) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 256, cols = 384;
  const std::vector<uint16_t> codes = to_bf16(random_matrix(rows, cols, seed));
  std::vector<bf16> values(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) values[i] = bf16::from_bits(codes[i]);
  const Tensor host = Tensor::from_vector(values, {rows, cols}, MemCategory::Workspace, Device::cpu());
  const Tensor x = host.to(gpu);
  for (quant::ScaleLayout layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative}) {
    const std::string l(quant::scale_layout_name(layout));
    const auto act = ops::quantize(ctx, x, spec(quant::Format::E4M3, quant::Granularity::tile_1x128()),
                                   ops::QuantizeOutputs::Both, layout, 1, MemCategory::ActivationCache);
    EXPECT_EQ(act.device(), gpu);
    EXPECT_EQ(act.rowwise.codes.category(), MemCategory::ActivationCache);
    EXPECT_EQ(act.colwise.scales.category(), MemCategory::ActivationCache);
    expect_equal(act, ops::quantize(ExecCtx::cpu(), host, act.spec, ops::QuantizeOutputs::Both, layout), "1x128 " + l);
    const auto w = ops::quantize(ctx, x, spec(quant::Format::E4M3, quant::Granularity::block_128x128()),
                                 ops::QuantizeOutputs::Both, layout);
    expect_equal(w, ops::quantize(ExecCtx::cpu(), host, w.spec, ops::QuantizeOutputs::Both, layout), "128x128 " + l);
    // with_colwise of a weight: the exact transpose, the same bytes as the fused quantizer's.
    const auto w1 = ops::with_colwise(ctx, ops::quantize(ctx, x, w.spec, ops::QuantizeOutputs::Rowwise, layout));
    expect_equal(w1, w, "with_colwise 128x128 " + l);
  }
  const auto e = ops::quantize(ctx, x, spec(quant::Format::E5M6, quant::Granularity::tile_1x128(), true));
  const auto want_e = ops::quantize(ExecCtx::cpu(), host, e.spec);
  expect_equal(e, want_e, "e5m6");
  std::string first;
  EXPECT_EQ(count_float_mismatches(ops::dequantize(ctx, e, DType::F32).to(Device::cpu()).to_vector<float>(),
                                   ops::dequantize(ExecCtx::cpu(), want_e, DType::F32).to_vector<float>(), &first),
            0)
      << first;
}

// The fused SwiGLU quantizer (one kernel) against the composition it stands for -- dequantize, the SwiGLU kernels
// and quantize, on the same GPU: the same bits, forward and backward, every requested payload, both scale layouts,
// amax and power-of-two caches, a partial last row tile, E4M3 and E5M2 outputs, and moe_bench's expert width
// (F = 1408). The profile shows the fused kernel ran (no dequantize, no SwiGLU op).
TEST(QuantizeOpsGpu, FusedSwigluEqualsTheComposition) {
  const Device gpu = Device::cuda(0);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using quant::Format;
  const auto GN = quant::ScaleLayout::GemmNative, RM = quant::ScaleLayout::RowMajor;
  struct Case {
    int64_t rows, F;
    bool pow2;
    Format out;
    quant::ScaleLayout layout;
    ops::QuantizeOutputs outputs;
  };
  const auto bf16_on_gpu = [&](int64_t rows, int64_t cols, uint64_t s) {
    const std::vector<uint16_t> bits = to_bf16(random_matrix(rows, cols, s));
    std::vector<bf16> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16::from_bits(bits[i]);
    return Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, Device::cpu()).to(gpu);
  };
  int k = 0;
  for (const Case& c : {Case{272, 256, true, Format::E4M3, GN, ops::QuantizeOutputs::Both},
                        Case{384, 1408, false, Format::E4M3, GN, ops::QuantizeOutputs::Both},
                        Case{144, 128, false, Format::E5M2, RM, ops::QuantizeOutputs::Colwise},
                        Case{1024, 1408, true, Format::E4M3, RM, ops::QuantizeOutputs::Rowwise}}) {
    for (bool backward : {false, true}) {
      const std::string what = fmt::format("{} rows {} F {} {} cache, {} {} {}", backward ? "backward" : "forward",
                                           c.rows, c.F, c.pow2 ? "pow2" : "amax", quant::format_name(c.out),
                                           ops::quantize_outputs_name(c.outputs), quant::scale_layout_name(c.layout));
      OpProfile profile;
      ExecCtx ctx = ExecCtx::on(gpu);
      const Tensor g = bf16_on_gpu(c.rows, 2 * c.F, seed + 2 * k), d = bf16_on_gpu(c.rows, c.F, seed + 2 * k + 1);
      ++k;
      const quant::QTensor in = ops::quantize(ctx, g, spec(Format::E4M3, quant::Granularity::tile_1x128(), c.pow2),
                                              ops::QuantizeOutputs::Rowwise, c.layout);
      const quant::QuantSpec out = spec(c.out, quant::Granularity::tile_1x128(), c.pow2);
      ctx.profile = &profile;
      const quant::QTensor fused = backward
                                       ? ops::quantize_swiglu_backward(ctx, in, d, out, c.outputs, c.layout)
                                       : ops::quantize_swiglu_forward(ctx, in, DType::BF16, out, c.outputs, c.layout);
      ctx.profile = nullptr;
      const auto ran = profile.entries();
      EXPECT_EQ(ran.size(), 1u) << what;
      EXPECT_TRUE(ran.count(backward ? "quantize_swiglu_backward" : "quantize_swiglu_forward")) << what;
      const Tensor x = ops::dequantize(ctx, in, DType::BF16);
      const Tensor y = Tensor::empty({c.rows, backward ? 2 * c.F : c.F}, DType::BF16, MemCategory::Workspace, gpu);
      if (backward) {
        ops::swiglu_backward(ctx, x, d, y);
      } else {
        ops::swiglu_forward(ctx, x, y);
      }
      const quant::QTensor composed = ops::quantize(ctx, y, out, c.outputs, c.layout);
      ASSERT_EQ(fused.rowwise.defined(), composed.rowwise.defined()) << what;
      ASSERT_EQ(fused.colwise.defined(), composed.colwise.defined()) << what;
      for (const auto& [f, w, name] : {std::tuple{&fused.rowwise, &composed.rowwise, "rowwise"},
                                       std::tuple{&fused.colwise, &composed.colwise, "colwise"}}) {
        if (!w->defined()) continue;
        std::string first;
        EXPECT_EQ(count_mismatches(f->codes.to(Device::cpu()).to_vector<uint8_t>(),
                                   w->codes.to(Device::cpu()).to_vector<uint8_t>(), &first),
                  0)
            << what << " " << name << " codes " << first;
        EXPECT_EQ(count_float_mismatches(f->scales.to(Device::cpu()).to_vector<float>(),
                                         w->scales.to(Device::cpu()).to_vector<float>(), &first),
                  0)
            << what << " " << name << " scales " << first;
      }
    }
  }
}

// SwiGLU's forward fused with its row-wise quantizations against quantize(x) for the cache and quantize(swiglu(x))
// for act on the same GPU: the same bits (with and without the cache, a partial row tile, both layouts, amax and
// power-of-two scales, E5M2 act, moe_bench's width), and the fused kernel is what ran.
TEST(QuantizeOpsGpu, FusedSwigluGateUpEqualsTheComposition) {
  const Device gpu = Device::cuda(0);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  using quant::Format;
  struct Case {
    int64_t rows, F;
    bool cache, pow2;
    Format act;
    quant::ScaleLayout layout;
  };
  int k = 0;
  for (const Case& c : {Case{200, 256, true, false, Format::E4M3, quant::ScaleLayout::GemmNative},
                        Case{1024, 1408, true, true, Format::E4M3, quant::ScaleLayout::GemmNative},
                        Case{128, 384, false, true, Format::E5M2, quant::ScaleLayout::RowMajor}}) {
    const std::string what = fmt::format("rows {} F {} cache {} pow2 {} act {} {}", c.rows, c.F, c.cache, c.pow2,
                                         quant::format_name(c.act), quant::scale_layout_name(c.layout));
    const std::vector<uint16_t> bits = to_bf16(random_matrix(c.rows, 2 * c.F, seed + k++));
    std::vector<bf16> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16::from_bits(bits[i]);
    const Tensor x = Tensor::from_vector(v, {c.rows, 2 * c.F}, MemCategory::Workspace, Device::cpu()).to(gpu);
    const quant::QuantSpec cache = spec(Format::E4M3, quant::Granularity::tile_1x128(), c.pow2);
    const quant::QuantSpec act = spec(c.act, quant::Granularity::tile_1x128(), c.pow2);
    OpProfile profile;
    ExecCtx ctx = ExecCtx::on(gpu);
    ctx.profile = &profile;
    const ops::SwigluGateUpQuantized fused = ops::quantize_swiglu_gate_up(ctx, x, c.cache ? &cache : nullptr, c.layout,
                                                                          MemCategory::ActivationCache, act, c.layout);
    ctx.profile = nullptr;
    EXPECT_EQ(profile.entries().size(), 1u) << what;
    EXPECT_TRUE(profile.entries().count("quantize_swiglu_gate_up")) << what;
    ASSERT_EQ(fused.cache.defined(), c.cache) << what;
    const Tensor y = Tensor::empty({c.rows, c.F}, DType::BF16, MemCategory::Workspace, gpu);
    ops::swiglu_forward(ctx, x, y);
    std::vector<std::tuple<const quant::QTensor*, quant::QTensor, std::string>> pairs;
    pairs.emplace_back(&fused.act, ops::quantize(ctx, y, act, ops::QuantizeOutputs::Rowwise, c.layout), "act");
    if (c.cache) {
      EXPECT_EQ(fused.cache.rowwise.codes.category(), MemCategory::ActivationCache) << what;
      pairs.emplace_back(&fused.cache, ops::quantize(ctx, x, cache, ops::QuantizeOutputs::Rowwise, c.layout), "cache");
    }
    for (const auto& [f, w, name] : pairs) {
      std::string first;
      EXPECT_EQ(count_mismatches(f->rowwise.codes.to(Device::cpu()).to_vector<uint8_t>(),
                                 w.rowwise.codes.to(Device::cpu()).to_vector<uint8_t>(), &first),
                0)
          << what << " " << name << " codes " << first;
      EXPECT_EQ(count_float_mismatches(f->rowwise.scales.to(Device::cpu()).to_vector<float>(),
                                       w.rowwise.scales.to(Device::cpu()).to_vector<float>(), &first),
                0)
          << what << " " << name << " scales " << first;
    }
  }
}

TEST(QuantizeOpsGpu, BadTensorsAreRefused) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  auto expect_error = [](auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const quant::QuantSpec s = spec(quant::Format::E4M3, quant::Granularity::tile_1x128());
  const Tensor host = Tensor::zeros({128, 128}, DType::F32, MemCategory::Workspace, Device::cpu());
  expect_error([&] { ops::quantize(ctx, host, s); }, "cpu");
  const Tensor f64 = Tensor::zeros({128, 128}, DType::F64, MemCategory::Workspace, gpu);
  expect_error([&] { ops::quantize(ctx, f64, s); }, "F32 or BF16");
  const Tensor vec = Tensor::zeros({128}, DType::F32, MemCategory::Workspace, gpu);
  expect_error([&] { ops::quantize(ctx, vec, s); }, "x");
  const Tensor x = Tensor::zeros({128, 256}, DType::F32, MemCategory::Workspace, gpu);
  expect_error([&] { ops::quantize(ctx, x, spec(quant::Format::BF16, quant::Granularity::tile_1x128())); },
               "not implemented on cuda");
  expect_error([&] { ops::quantize(ctx, x.cols(0, 128), s); }, "not implemented on cuda");  // a strided view
  const quant::QTensor e = ops::quantize(ctx, x, spec(quant::Format::E5M6, quant::Granularity::tile_1x128(), true));
  expect_error([&] { ops::with_colwise(ctx, e); }, "not implemented on cuda");
}

}  // namespace
}  // namespace fp8train::gputest
