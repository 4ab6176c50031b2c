// Backend choice for block-scaled FP8 GEMMs (src/ops/cuda/fp8_gemm_dispatch.cpp): our kernels by default on
// sm_90, cuBLASLt by set_fp8_gemm_backend() or FP8TRAIN_FP8_GEMM; both backends compute the same GEMM (ours
// bit for bit against the CPU hopper model; cuBLASLt within DeepGEMM's calc_diff < 1e-3 of it, with the
// number of bit-identical outputs printed), for Fprop (BF16 out) and Wgrad (FP32 accumulate).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "fp8_gemm_test_util.h"

namespace fp8train::gputest {
namespace {

using ops::cuda::Fp8GemmBackend;

// Restores the process-wide choice and the environment after a test.
struct BackendGuard {
  ~BackendGuard() {
    ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::Auto);
    unsetenv("FP8TRAIN_FP8_GEMM");
  }
};

// DeepGEMM's calc_diff: 1 - 2 sum(xy) / sum(x^2 + y^2), in double.
double calc_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double xy = 0, xx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += static_cast<double>(x[i]) * y[i];
    xx += static_cast<double>(x[i]) * x[i] + static_cast<double>(y[i]) * y[i];
  }
  return 1.0 - 2.0 * xy / xx;
}

TEST(Fp8GemmDispatch, OwnKernelsByDefaultOnSm90CublasLtByFlagOrEnvironment) {
  BackendGuard guard;
  unsetenv("FP8TRAIN_FP8_GEMM");
  ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::Auto);
  EXPECT_EQ(ops::cuda::fp8_gemm_backend(), Fp8GemmBackend::Own);  // gpu_tests run on sm_90 only
  ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::CublasLt);
  EXPECT_EQ(ops::cuda::fp8_gemm_backend(), Fp8GemmBackend::CublasLt);
  ops::cuda::set_fp8_gemm_backend(Fp8GemmBackend::Auto);
  setenv("FP8TRAIN_FP8_GEMM", "cublaslt", 1);
  EXPECT_EQ(ops::cuda::fp8_gemm_backend(), Fp8GemmBackend::CublasLt);
  setenv("FP8TRAIN_FP8_GEMM", "own", 1);
  EXPECT_EQ(ops::cuda::fp8_gemm_backend(), Fp8GemmBackend::Own);
  setenv("FP8TRAIN_FP8_GEMM", "fastest", 1);
  EXPECT_THROW(ops::cuda::fp8_gemm_backend(), Error);
  EXPECT_STREQ(ops::cuda::fp8_gemm_backend_name(Fp8GemmBackend::CublasLt), "cublaslt");
}

TEST(Fp8GemmDispatch, BothBackendsComputeFpropAndWgrad) {
  BackendGuard guard;
  unsetenv("FP8TRAIN_FP8_GEMM");
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t m = 256, n = 384, k = 640, kb = k / 128;
  const quant::QTensor a = random_e4m3(m, k, quant::Granularity::tile_1x128(), seed);
  const quant::QTensor w = random_e4m3(n, k, quant::Granularity::block_128x128(), seed + 1);
  const quant::QTensor bt = random_e4m3(n, k, quant::Granularity::tile_1x128(), seed + 2);
  std::vector<uint16_t> want_bf16(static_cast<size_t>(m * n));
  quant::GemmConfig fprop = hopper_config();  // the heuristic's split-K ranges, if it splits (M <= 256)
  fprop.k_splits = ops::cuda::fp8_gemm_dense_heuristic(m, n, k, ops::cuda::fp8_gemm_num_sms()).k_splits;
  quant::ref_gemm_bf16(a, w, fprop, want_bf16.data());
  const std::vector<float> c = random_matrix(m, n, seed + 3);
  std::vector<float> want_wgrad(static_cast<size_t>(m * n));
  quant::ref_gemm(a, bt, hopper_config(true), want_wgrad.data(), c.data());

  DeviceArray<uint8_t> da(a.code_vector()), dw(w.code_vector()), dbt(bt.code_vector());
  DeviceArray<float> dsa(a.row_major_scales()), dsw(w.row_major_scales()), dsbt(bt.row_major_scales()), dc(c), dd32(static_cast<size_t>(m * n));
  DeviceArray<uint16_t> dd(static_cast<size_t>(m * n));
  ops::cuda::Fp8GemmDenseProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = da.get();
  p.a_scales = ops::cuda::row_major_scale_view(dsa.get(), kb);
  p.b = dw.get();
  p.b_scales = ops::cuda::row_major_scale_view(dsw.get(), kb);
  p.d = dd.get();
  ops::cuda::Fp8GemmWgradProblem q;
  q.m = m;
  q.n = n;
  q.k = k;
  q.a = da.get();
  q.a_scales = p.a_scales;
  q.b = dbt.get();
  q.b_scales = ops::cuda::row_major_scale_view(dsbt.get(), kb);
  q.c = dc.get();
  q.d = dd32.get();

  for (Fp8GemmBackend backend : {Fp8GemmBackend::Own, Fp8GemmBackend::CublasLt}) {
    SCOPED_TRACE(ops::cuda::fp8_gemm_backend_name(backend));
    ops::cuda::set_fp8_gemm_backend(backend);
    dd.poison();
    dd32.poison();
    ops::cuda::fp8_scaled_gemm(p, nullptr);
    ops::cuda::fp8_scaled_gemm_wgrad(q, nullptr);
    const std::vector<uint16_t> got = dd.download();
    const std::vector<float> got32 = dd32.download();
    if (backend == Fp8GemmBackend::Own) {
      EXPECT_TRUE(same_bits_bf16(got, want_bf16, n));
      EXPECT_TRUE(same_bits_f32(got32, want_wgrad, n));
    } else {
      const double diff = calc_diff(from_bf16(got), from_bf16(want_bf16));
      const double diff32 = calc_diff(got32, want_wgrad);
      EXPECT_LT(diff, 1e-3);
      EXPECT_LT(diff32, 1e-3);
      std::printf("cuBLASLt vs hopper model: Fprop calc_diff %.3g (%s), Wgrad calc_diff %.3g (%s)\n", diff,
                  same_bits_bf16(got, want_bf16, n) ? "bit-exact" : "not bit-exact", diff32,
                  same_bits_f32(got32, want_wgrad, n) ? "bit-exact" : "not bit-exact");
    }
  }
}

}  // namespace
}  // namespace fp8train::gputest
