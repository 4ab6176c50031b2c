// The quantization ops on CUDA tensors (ops/quantize.h) against the CPU ops of the same name: codes and scales
// equal byte for byte in both scale layouts (column-wise payloads included), outputs on the input's device under
// the requested memory category, and bad tensors refused with a sentence naming the problem. (The backend test
// table covers the formats, granularities and groups; this file the Tensor-level behaviour.)
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "ops/quantize.h"

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
