// The backend test table (tests/ops/backend_ops_table.h) on CUDA: every row's CUDA op against the CPU op of the
// same name on the same fresh random inputs (seed printed), outputs poisoned, compared as the row says (bits, or
// a normalized-error bound); rows the CUDA backend does not serve must be refused with "not implemented on cuda".
// Both FP8 GEMM backends run the GEMM rows: fp8train's own kernels (bit-exact rows stay bit-exact) and cuBLASLt
// (FP8TRAIN_FP8_GEMM=cublaslt; block-scaled rows then compared by normalized error, 1e-3 as DeepGEMM's calc_diff).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "../ops/backend_ops_table.h"
#include "gpu_test_util.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/kernels.h"
#include "tensor/backend.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_backend.h"

namespace fp8train::backend_test {
namespace {

// Drop the device's cached blocks, then hand back blocks of the requested sizes filled with 0xA5 (CPU: the same
// through the CPU allocator), so the op's next allocations of those sizes are poisoned.
void poison_any(Device device, const std::vector<size_t>& bytes) {
  if (device.is_cpu()) {
    if (auto* cpu = dynamic_cast<CpuAllocator*>(&backend(device).allocator())) cpu->release_cached();
  } else {
    backend(device).synchronize();
    fp8train::cuda::device_allocator(device.index).release_cached();
  }
  std::vector<Tensor> blocks;
  for (size_t n : bytes) {
    const std::vector<uint8_t> fill(n, 0xA5);
    blocks.push_back(Tensor::from_vector(fill, {static_cast<int64_t>(n)}, MemCategory::Workspace, Device::cpu())
                         .to(device));
  }
  backend(device).synchronize();
}

bool is_gemm(const BackendOpCase& c) { return c.op.rfind("scaled_gemm", 0) == 0; }

int run_rows(const std::vector<BackendOpCase>& cases, const ExecCtx& gpu, uint64_t seed, bool cublaslt) {
  int failed = 0, refused = 0, ran = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const BackendOpCase& c = cases[i];
    if (cublaslt && !is_gemm(c)) continue;
    const uint64_t s = seed + 1000 * i;
    const std::string what = c.op + " " + c.name + " (seed " + std::to_string(s) + ")";
    if (!c.on_cuda) {
      try {
        c.run(gpu, s);
        ADD_FAILURE() << what << ": the CUDA backend ran a case it is meant to refuse";
        ++failed;
      } catch (const Error& e) {
        if (std::string(e.what()).find("not implemented on cuda") == std::string::npos) {
          ADD_FAILURE() << what << ": refused with the wrong error: " << e.what();
          ++failed;
        }
        ++refused;
      }
      continue;
    }
    Compare compare = c.cuda;
    // cuBLASLt's block-scaled accumulation is not the CPU model bit for bit (the Wgrad form differs).
    const bool block_scaled_gemm = is_gemm(c) && c.name.find("(tensor") == std::string::npos;
    if (cublaslt && block_scaled_gemm) compare = Compare::normalized(1e-3);
    try {
      const std::string diff = compare_results(c.run(gpu, s), c.run(ExecCtx::cpu(), s), compare);
      ++ran;
      if (!diff.empty()) {
        ++failed;
        ADD_FAILURE() << what << (cublaslt ? " [cuBLASLt]" : "") << ": " << diff;
      }
    } catch (const Error& e) {
      // Forms cuBLASLt does not take are refused with a reason, not served differently: split-K, and block-scaled
      // shapes whose M or N is not a multiple of 4 (the numerics-health F32 row with M = 130).
      const std::string why = e.what();
      const bool lt_refusal = cublaslt && (why.find("split-K through cuBLASLt") != std::string::npos ||
                                           why.find("cuBLASLt needs M and N to be multiples of 4") != std::string::npos);
      if (!lt_refusal) {
        ++failed;
        ADD_FAILURE() << what << (cublaslt ? " [cuBLASLt]" : "") << ": threw " << e.what();
      }
    }
  }
  std::printf("backend ops on cuda%s: %d rows compared, %d refused as planned, %d failed\n",
              cublaslt ? " (cuBLASLt FP8 GEMMs)" : "", ran, refused, failed);
  return failed;
}

TEST(BackendOpsGpu, EveryRowMatchesTheCpuOp) {
  poison_hook() = poison_any;
  const ExecCtx gpu = ExecCtx::on(Device::cuda(0));
  const std::vector<BackendOpCase> cases = backend_cases();
  const uint64_t seed = gputest::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ops::cuda::set_fp8_gemm_backend(ops::cuda::Fp8GemmBackend::Own);
  run_rows(cases, gpu, seed, false);
  ops::cuda::set_fp8_gemm_backend(ops::cuda::Fp8GemmBackend::CublasLt);
  run_rows(cases, gpu, seed, true);
  ops::cuda::set_fp8_gemm_backend(ops::cuda::Fp8GemmBackend::Auto);
  // Both backends of the BF16/F32 grouped GEMM: the per-expert cuBLASLt default ran above; now the own kernels.
  std::vector<BackendOpCase> grouped;
  for (const BackendOpCase& c : cases)
    if (c.op == "gemm_grouped") grouped.push_back(c);
  ASSERT_FALSE(grouped.empty());
  const ops::cuda::GroupedGemmBackend saved = ops::cuda::grouped_gemm_backend();
  ops::cuda::set_grouped_gemm_backend(ops::cuda::GroupedGemmBackend::Own);
  std::printf("gemm_grouped rows on fp8train's grouped kernels:\n");
  run_rows(grouped, gpu, seed, false);
  ops::cuda::set_grouped_gemm_backend(saved);
  poison_hook() = nullptr;
}

}  // namespace
}  // namespace fp8train::backend_test
