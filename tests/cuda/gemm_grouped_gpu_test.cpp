// gemm_grouped on CUDA at MoE-sized shapes: fp8train's device-offset kernels (gemm_grouped.cu) against the
// per-expert cuBLASLt path (set_grouped_gemm_backend(CublasLt)), the same bits run to run, and both timed
// (TFLOP/s printed, not asserted). Ragged expert sizes (align 1, the BF16 recipe) with an empty expert, and
// 128-aligned ones; Fprop (M kind, trans_b), Dgrad (M kind) and Wgrad (K kind into F32, beta 1).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "numerics/metrics.h"
#include "ops/cuda/kernels.h"
#include "ops/gemm.h"
#include "tensor/exec_ctx.h"

namespace fp8train::gputest {
namespace {

using ops::GroupedGemmKind;
using ops::cuda::GroupedGemmBackend;

Tensor random_on(int64_t rows, int64_t cols, uint64_t seed, DType dtype, Device d) {
  const std::vector<float> v = random_matrix(rows, cols, seed, 1.0f);
  const Tensor t = Tensor::from_vector(v, {rows, cols}, MemCategory::Workspace, Device::cpu());
  if (dtype == DType::F32) return t.to(d);
  std::vector<bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
  return Tensor::from_vector(b, {rows, cols}, MemCategory::Workspace, Device::cpu()).to(d);
}

std::vector<float> host_floats(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  if (h.dtype() == DType::F32) return h.to_vector<float>();
  std::vector<float> f;
  for (bf16 x : h.to_vector<bf16>()) f.push_back(static_cast<float>(x));
  return f;
}

// Expert row counts summing to `rows`: random (one expert empty) or multiples of 128.
std::vector<int32_t> make_offsets(int64_t experts, int64_t rows, bool aligned, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<double> w(static_cast<size_t>(experts));
  for (auto& x : w) x = std::uniform_real_distribution<double>(0.2, 1.8)(gen);
  w[1] = 0.0;  // an empty expert
  double sum = 0;
  for (double x : w) sum += x;
  std::vector<int32_t> off{0};
  for (int64_t e = 0; e < experts; ++e) {
    int64_t r = static_cast<int64_t>(static_cast<double>(rows) * w[static_cast<size_t>(e)] / sum);
    if (aligned) r = r / 128 * 128;
    off.push_back(static_cast<int32_t>(e + 1 == experts && !aligned ? rows : off.back() + r));
  }
  return off;
}

struct Case {
  GroupedGemmKind kind;
  bool trans_b;
  int64_t experts, rows, m, n, k;  // M kind: n, k; K kind: m, n
  DType in, out;
  double beta;
  bool aligned;
};

TEST(GemmGroupedGpu, OwnKernelsMatchPerExpertCublasLtAndRepeatBitForBit) {
  const Device gpu = Device::cuda(0);
  const ExecCtx ctx = ExecCtx::on(gpu);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const GroupedGemmBackend saved = ops::cuda::grouped_gemm_backend();
  const std::vector<Case> cases = {
      {GroupedGemmKind::M, true, 8, 8192, 0, 2048, 1024, DType::BF16, DType::BF16, 0.0, false},   // Fprop
      {GroupedGemmKind::M, false, 8, 8192, 0, 1024, 2048, DType::BF16, DType::BF16, 0.0, false},  // Dgrad
      {GroupedGemmKind::K, false, 8, 8192, 2048, 1024, 0, DType::BF16, DType::F32, 1.0, false},   // Wgrad
      {GroupedGemmKind::M, true, 8, 8192, 0, 2048, 1024, DType::BF16, DType::BF16, 0.0, true},
      {GroupedGemmKind::K, false, 8, 8192, 2048, 1024, 0, DType::BF16, DType::F32, 1.0, true},
      {GroupedGemmKind::M, true, 4, 1000, 0, 300, 200, DType::F32, DType::F32, 1.0, false},  // the SIMT kernel
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const bool mk = c.kind == GroupedGemmKind::M;
    const std::string what = std::string(mk ? "M" : "K") + (c.trans_b ? " trans_b" : "") + " experts " +
                             std::to_string(c.experts) + " rows " + std::to_string(c.rows) +
                             (c.aligned ? " aligned" : " ragged") + (c.in == DType::F32 ? " f32" : " bf16");
    SCOPED_TRACE(what);
    const uint64_t s = seed + 100 * i;
    const std::vector<int32_t> off_h = make_offsets(c.experts, c.rows, c.aligned, s);
    const Tensor off = Tensor::from_vector(off_h, {c.experts + 1}, MemCategory::Workspace, Device::cpu()).to(gpu);
    const Tensor a = random_on(c.rows, mk ? c.k : c.m, s + 1, c.in, gpu);
    const Tensor b = mk ? random_on(c.experts * (c.trans_b ? c.n : c.k), c.trans_b ? c.k : c.n, s + 2, c.in, gpu)
                        : random_on(c.rows, c.n, s + 2, c.in, gpu);
    const int64_t cr = mk ? c.rows : c.experts * c.m;
    const Tensor c0 = random_on(cr, c.n, s + 3, c.out, gpu);
    ops::GemmOptions o;
    o.beta = c.beta;
    auto run = [&](GroupedGemmBackend backend, int reps, double* seconds) {
      ops::cuda::set_grouped_gemm_backend(backend);
      Tensor out = c0.clone();
      ops::gemm_grouped(ctx, c.kind, a, b, c.trans_b, out, off, o);
      if (seconds != nullptr) {
        // timed on fresh copies of c (beta 1 accumulates); the clone's copy is outside the events
        cudaEvent_t e0, e1;
        FP8T_CUDA_CHECK(cudaEventCreate(&e0));
        FP8T_CUDA_CHECK(cudaEventCreate(&e1));
        Tensor scratch = c0.clone();
        ctx.synchronize();
        const auto stream = static_cast<cudaStream_t>(ctx.stream);
        FP8T_CUDA_CHECK(cudaEventRecord(e0, stream));
        for (int r = 0; r < reps; ++r) ops::gemm_grouped(ctx, c.kind, a, b, c.trans_b, scratch, off, o);
        FP8T_CUDA_CHECK(cudaEventRecord(e1, stream));
        FP8T_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        FP8T_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        *seconds = ms / 1e3 / reps;
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
      return host_floats(out);
    };
    double t_own = 0, t_lt = 0;
    const std::vector<float> own = run(GroupedGemmBackend::Own, 10, &t_own);
    const std::vector<float> again = run(GroupedGemmBackend::Own, 0, nullptr);
    const std::vector<float> lt = run(GroupedGemmBackend::CublasLt, 10, &t_lt);
    EXPECT_EQ(count_float_mismatches(own, again), 0) << "not deterministic";
    const double diff = num::calc_diff(std::span<const float>(own), std::span<const float>(lt));
    EXPECT_LT(diff, c.out == DType::BF16 ? 1e-5 : 1e-9);
    const double flops = 2.0 * static_cast<double>(off_h.back()) * static_cast<double>(mk ? c.n * c.k : c.m * c.n);
    std::printf("gemm_grouped %-40s own %7.1f TFLOP/s  per-expert cuBLASLt %7.1f TFLOP/s  diff %.2e\n", what.c_str(),
                flops / t_own / 1e12, flops / t_lt / 1e12, diff);
  }
  ops::cuda::set_grouped_gemm_backend(saved);
}

}  // namespace
}  // namespace fp8train::gputest
