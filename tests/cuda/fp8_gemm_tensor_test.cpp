// The Tensor entry point ops::cuda::scaled_gemm (tensor_ops.h) runs the DeepSeek-V3 block-scaled forms on
// fp8train's own kernels by default (src/ops/cuda/fp8_gemm_tensor.cpp) — bit for bit the CPU hopper model on
// the GPU-quantized operands — and on cuBLASLt when asked (FP8TRAIN_FP8_GEMM / set_fp8_gemm_backend), within
// DeepGEMM's calc_diff < 1e-3 of the same model. Fprop form: x 1x128 · W 128x128 -> BF16; Wgrad form:
// dyᵀ 1x128 · xᵀ 1x128 -> FP32 accumulated into the output. (test_cuda only: needs the tensor layer.)
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "fp8_gemm_test_util.h"
#include "numerics/metrics.h"
#include "ops/cuda/tensor_ops.h"
#include "tensor/cuda/cuda_backend.h"

namespace fp8train::gputest {
namespace {

using ops::cuda::Fp8GemmBackend;

Tensor bf16_matrix(const std::vector<float>& x, int64_t rows, int64_t cols, Device d) {
  const std::vector<uint16_t> codes = to_bf16(x);
  Tensor t = Tensor::empty({rows, cols}, DType::BF16, MemCategory::Workspace, d);
  backend(d).copy(t.raw(), d, codes.data(), Device::cpu(), codes.size() * 2);
  return t;
}

TEST(Fp8GemmTensor, ScaledGemmUsesOwnKernelsByDefaultAndCublasLtOnRequest) {
  const Device gpu = cuda::init_cuda_backend(0);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 192, n = 272, k = 384;
  const Tensor x = bf16_matrix(random_matrix(m, k, seed), m, k, gpu);
  const Tensor w = bf16_matrix(random_matrix(n, k, seed + 1), n, k, gpu);
  const Tensor g = bf16_matrix(random_matrix(n, k, seed + 2), n, k, gpu);  // a second 1x128 operand (Wgrad form)
  for (quant::ScaleLayout order : {quant::ScaleLayout::RowMajor, quant::ScaleLayout::GemmNative}) {
    const auto xq = ops::cuda::quantize_activation(x, ops::cuda::QuantOptions{}, false, order);
    const auto wq = ops::cuda::quantize_weight(w, ops::cuda::QuantOptions{}, false, order);
    const auto gq = ops::cuda::quantize_activation(g, ops::cuda::QuantOptions{}, false, order);
    // The operands on the host, with row-major scales: what the CPU reference GEMM reads.
    const auto host = [](const quant::QTensor& q) { return q.to(Device::cpu()).group(0); };
    std::vector<uint16_t> want_bf16(static_cast<size_t>(m * n));
    quant::GemmConfig fprop = hopper_config();  // the heuristic's split-K ranges, if it splits (M <= 256)
    fprop.k_splits = ops::cuda::fp8_gemm_dense_heuristic(m, n, k, ops::cuda::fp8_gemm_num_sms()).k_splits;
    quant::ref_gemm_bf16(host(xq), host(wq), fprop, want_bf16.data());
    const std::vector<float> c0 = random_matrix(m, n, seed + 3);
    std::vector<float> want_f32(c0.size());
    quant::ref_gemm(host(xq), host(gq), hopper_config(true), want_f32.data(), c0.data());

    for (Fp8GemmBackend be : {Fp8GemmBackend::Auto, Fp8GemmBackend::CublasLt}) {
      SCOPED_TRACE(std::string(ops::cuda::fp8_gemm_backend_name(be)) +
                   (order == quant::ScaleLayout::RowMajor ? " row-major scales" : " native scales"));
      ops::cuda::set_fp8_gemm_backend(be);
      Tensor y = Tensor::empty({m, n}, DType::BF16, MemCategory::Workspace, gpu);
      ops::cuda::scaled_gemm(xq, wq, y);
      std::vector<uint16_t> got(static_cast<size_t>(m * n));  // BF16 tensors are read as raw codes
      cudaDeviceSynchronize();
      backend(gpu).copy(got.data(), Device::cpu(), y.raw(), gpu, got.size() * 2);
      Tensor acc = Tensor::empty({m, n}, DType::F32, MemCategory::Workspace, gpu);
      backend(gpu).copy(acc.raw(), gpu, c0.data(), Device::cpu(), c0.size() * 4);
      ops::cuda::scaled_gemm(xq, gq, acc, /*accumulate=*/true);
      const std::vector<float> got32 = acc.to_vector<float>();
      if (be == Fp8GemmBackend::Auto) {  // sm_90: our kernels
        EXPECT_TRUE(same_bits_bf16(got, want_bf16, n));
        EXPECT_TRUE(same_bits_f32(got32, want_f32, n));
      } else {
        const std::vector<float> got_f = from_bf16(got), want_f = from_bf16(want_bf16);
        EXPECT_LT(num::calc_diff(std::span<const float>(got_f), std::span<const float>(want_f)), 1e-3);
        EXPECT_LT(num::calc_diff(std::span<const float>(got32), std::span<const float>(want_f32)), 1e-3);
      }
    }
  }
  ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::Auto);
}

}  // namespace
}  // namespace fp8train::gputest
