// Backend choice for block-scaled FP8 GEMMs (fp8_gemm.h: fp8_scaled_gemm / fp8_scaled_gemm_wgrad): our
// Hopper kernels by default on sm_90, cuBLASLt (ops/cuda/cublaslt_gemm.h) when asked for by
// set_fp8_gemm_backend() or FP8TRAIN_FP8_GEMM=cublaslt, so both paths stay exercised. The cuBLASLt path maps
// our ScaleViews onto the two scale layouts the wrapper knows (QTensor row-major, or cuBLASLt-native).
// The ops (ops/scaled_gemm.h, their CUDA launchers in scaled_gemm_ops.cpp) make the same choice.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_gemm.h"

namespace fp8train::ops::cuda {
namespace {

std::atomic<int> g_backend{static_cast<int>(Fp8GemmBackend::Auto)};

Fp8GemmBackend from_environment() {
  const char* v = std::getenv("FP8TRAIN_FP8_GEMM");
  if (v == nullptr || *v == '\0') return Fp8GemmBackend::Auto;
  const std::string s(v);
  if (s == "own") return Fp8GemmBackend::Own;
  if (s == "cublaslt") return Fp8GemmBackend::CublasLt;
  FP8T_FAIL("FP8TRAIN_FP8_GEMM must be 'own' or 'cublaslt', got '{}'", s);
}

bool current_device_is_sm90() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
  return major == 9 && minor == 0;
}

// The cuBLASLt wrapper's layout for a 1x128 scale grid over `rows` rows, or throws naming the view.
quant::ScaleLayout tile_layout(const ScaleView& v, int64_t rows, int64_t kb, const char* what) {
  if (v.kblock_stride == 1 && v.row_stride == kb) return quant::ScaleLayout::RowMajor;
  if (v.row_stride == 1 && v.kblock_stride == rows) return quant::ScaleLayout::GemmNative;
  FP8T_FAIL("cuBLASLt FP8 GEMM: {} scales (row stride {}, K-block stride {}) are neither row-major [{}, {}] nor "
            "MN-major [{}, {}]",
            what, v.row_stride, v.kblock_stride, rows, kb, kb, rows);
}

quant::ScaleLayout block_layout(const ScaleView& v, int64_t kb) {
  if (v.kblock_stride == 1 && v.row_stride == kb) return quant::ScaleLayout::RowMajor;
  if (v.kblock_stride == 1 && v.row_stride == (kb + 3) / 4 * 4) return quant::ScaleLayout::GemmNative;
  FP8T_FAIL("cuBLASLt FP8 GEMM: 128x128 B scales (row stride {}, K-block stride {}) must be row-major with a row "
            "stride of K/128 = {} or cuBLASLt's padded {}",
            v.row_stride, v.kblock_stride, kb, (kb + 3) / 4 * 4);
}

}  // namespace

void set_fp8_gemm_backend(Fp8GemmBackend backend) { g_backend.store(static_cast<int>(backend)); }

const char* fp8_gemm_backend_name(Fp8GemmBackend backend) {
  switch (backend) {
    case Fp8GemmBackend::Auto: return "auto";
    case Fp8GemmBackend::Own: return "own";
    case Fp8GemmBackend::CublasLt: return "cublaslt";
  }
  return "?";
}

Fp8GemmBackend fp8_gemm_backend() {
  const auto chosen = static_cast<Fp8GemmBackend>(g_backend.load());
  if (chosen != Fp8GemmBackend::Auto) return chosen;
  const Fp8GemmBackend env = from_environment();
  if (env != Fp8GemmBackend::Auto) return env;
  return current_device_is_sm90() ? Fp8GemmBackend::Own : Fp8GemmBackend::CublasLt;
}

void fp8_scaled_gemm(const Fp8GemmDenseProblem& p, cudaStream_t stream) {
  // cuBLASLt has no block-scaled INT8 GEMM and never leaves block scales unpromoted: those run on fp8train's kernels.
  if (p.int8 || p.never_promote || fp8_gemm_backend() == Fp8GemmBackend::Own)
    return fp8_gemm_dense(p, Fp8GemmConfig{}, stream);
  if (p.m == 0) return;
  const int64_t kb = (p.k + 127) / 128;
  CublasLtProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.a_scaling = OperandScaling::Tile1x128;
  q.b_scaling = OperandScaling::Block128x128;
  q.a_scale_layout = tile_layout(p.a_scales, p.m, kb, "A 1x128");
  q.b_scale_layout = block_layout(p.b_scales, kb);
  q.out = GemmOutput::BF16;
  int device = 0;
  FP8T_CHECK(cudaGetDevice(&device) == cudaSuccess, "cuBLASLt FP8 GEMM: no current CUDA device");
  cublaslt_gemm(device).run(q, p.a, p.a_scales.data, p.b, p.b_scales.data, p.d, stream);
}

void fp8_scaled_gemm_wgrad(const Fp8GemmWgradProblem& p, cudaStream_t stream) {
  const bool grouped = p.num_groups != 1 || p.k_offsets != nullptr;
  if (grouped || p.int8 || p.never_promote || fp8_gemm_backend() == Fp8GemmBackend::Own)
    return fp8_gemm_wgrad(p, Fp8GemmConfig{}, stream);
  if (p.m == 0) return;
  const int64_t kb = (p.k + 127) / 128;
  CublasLtProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.a_scaling = OperandScaling::Tile1x128;
  q.b_scaling = OperandScaling::Tile1x128;
  q.a_scale_layout = tile_layout(p.a_scales, p.m, kb, "A 1x128");
  q.b_scale_layout = tile_layout(p.b_scales, p.n, kb, "B 1x128");
  q.out = GemmOutput::F32;
  q.accumulate = p.c != nullptr;
  if (p.c != nullptr && p.c != p.d) {  // cuBLASLt accumulates in place: start from a copy of c
    const cudaError_t err =
        cudaMemcpyAsync(p.d, p.c, static_cast<size_t>(p.m * p.n) * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    FP8T_CHECK(err == cudaSuccess, "cuBLASLt Wgrad: copying C into D failed: {}", cudaGetErrorString(err));
  }
  int device = 0;
  FP8T_CHECK(cudaGetDevice(&device) == cudaSuccess, "cuBLASLt FP8 GEMM: no current CUDA device");
  cublaslt_gemm(device).run(q, p.a, p.a_scales.data, p.b, p.b_scales.data, p.d, stream);
}

}  // namespace fp8train::ops::cuda
