// Tier-3 entry points on Tensors (ops/cuda/tensor_ops.h): the results equal the CPU reference through
// QTensor::to(cpu), outputs live on the input's device under the requested memory category, and bad
// tensors (wrong device, dtype, rank) are refused with a sentence naming the problem.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "numerics/metrics.h"
#include "ops/cuda/tensor_ops.h"
#include "quant/ref_gemm.h"
#include "tensor/cuda/cuda_backend.h"

namespace fp8train::gputest {
namespace {

using ops::cuda::QuantOptions;

Tensor bf16_tensor(const std::vector<uint16_t>& codes, int64_t rows, int64_t cols, Device d) {
  Tensor t = Tensor::empty({rows, cols}, DType::BF16, MemCategory::Workspace, d);
  backend(d).copy(t.raw(), d, codes.data(), Device::cpu(), codes.size() * 2);
  return t;
}

quant::QuantSpec config(quant::Granularity g, bool pow2 = false) {
  quant::QuantSpec c;
  c.granularity = g;
  c.scale_mode = pow2 ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  return c;
}

void expect_equal(const quant::QTensor& got, const quant::QTensor& want, const std::string& what) {
  std::string first;
  EXPECT_EQ(count_mismatches(got.code_vector(), want.code_vector(), &first), 0) << what << " codes " << first;
  EXPECT_EQ(count_float_mismatches(got.row_major_scales(), want.row_major_scales(), &first), 0)
      << what << " scales " << first;
}

TEST(TensorOpsGpu, QuantizersOnTensorsMatchTheCpuReference) {
  const Device gpu = cuda::init_cuda_backend(0);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 256, cols = 384;
  const auto codes = to_bf16(random_matrix(rows, cols, seed));
  const auto ref = from_bf16(codes);
  const Tensor x = bf16_tensor(codes, rows, cols, gpu);
  for (quant::ScaleLayout layout : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative}) {
    const auto act = ops::cuda::quantize_activation(x, QuantOptions{}, true, layout, MemCategory::ActivationCache);
    EXPECT_EQ(act.device(), gpu);
    EXPECT_EQ(act.rowwise.codes.category(), MemCategory::ActivationCache);
    expect_equal(act, quant::quantize(ref, rows, cols, config(quant::Granularity::tile_1x128())), "1x128");
    expect_equal(act.transposed(),
                 quant::transpose(quant::quantize(ref, rows, cols, config(quant::Granularity::tile_128x1()))),
                 "128x1 transposed");
    const auto w = ops::cuda::quantize_weight(x, QuantOptions{}, true, layout);
    const auto want_w = quant::quantize(ref, rows, cols, config(quant::Granularity::block_128x128()));
    expect_equal(w, want_w, "128x128");
    expect_equal(w.transposed(), quant::transpose(want_w), "128x128 transposed");
  }
  const auto e = ops::cuda::quantize_e5m6(x);
  quant::QuantSpec c = config(quant::Granularity::tile_1x128(), true);
  c.format = quant::Format::E5M6;
  const auto want_e = quant::quantize(ref, rows, cols, c);
  expect_equal(e, want_e, "e5m6");
  const Tensor back = ops::cuda::dequantize(e, DType::F32);
  std::string first;
  EXPECT_EQ(count_float_mismatches(back.to_vector<float>(), quant::dequantize(want_e), &first), 0) << first;
}

TEST(TensorOpsGpu, ScaledGemmOnTensors) {
  const Device gpu = cuda::init_cuda_backend(0);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 128, n = 256, k = 512;
  const Tensor x = bf16_tensor(to_bf16(random_matrix(m, k, seed)), m, k, gpu);
  const Tensor w = bf16_tensor(to_bf16(random_matrix(n, k, seed + 1)), n, k, gpu);
  const auto xq = ops::cuda::quantize_activation(x, QuantOptions{}, false);
  const auto wq = ops::cuda::quantize_weight(w, QuantOptions{}, false);
  Tensor y = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, gpu);
  ops::cuda::scaled_gemm(xq, wq, y);
  const std::vector<double> ref = quant::ref_gemm_fp64(xq.to(Device::cpu()).group(0), wq.to(Device::cpu()).group(0));
  const std::vector<float> got = y.to_vector<float>();
  EXPECT_LT(num::calc_diff(std::span<const float>(got), std::span<const double>(ref)), 1e-3);

  Tensor y16 = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, gpu);
  ops::cuda::gemm_bf16(x, w, y16);
  EXPECT_LT(num::calc_diff(std::span<const float>(y16.to_vector<float>()), std::span<const double>(ref)), 1e-2);
}

TEST(TensorOpsGpu, BadTensorsAreRefused) {
  const Device gpu = cuda::init_cuda_backend(0);
  auto expect_error = [](auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const Tensor host = Tensor::zeros({128, 128}, DType::F32, MemCategory::Workspace, Device::cpu());
  expect_error([&] { ops::cuda::quantize_activation(host, QuantOptions{}, false); }, "CUDA device");
  const Tensor f64 = Tensor::zeros({128, 128}, DType::F64, MemCategory::Workspace, gpu);
  expect_error([&] { ops::cuda::quantize_weight(f64, QuantOptions{}, false); }, "F32 or BF16");
  const Tensor vec = Tensor::zeros({128}, DType::F32, MemCategory::Workspace, gpu);
  expect_error([&] { ops::cuda::quantize_e5m6(vec); }, "2-D");
}

}  // namespace
}  // namespace fp8train::gputest
