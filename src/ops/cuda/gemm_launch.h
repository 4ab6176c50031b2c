// Internal: the plain launch functions behind the CUDA GEMM launchers (gemm_ops.cpp). The kernels live in
// gemm_convert.cu (no fmt there: nvcc cannot compile it); each returns the launch's cudaError_t.
// Matrices are row-major with a row stride (ld, in elements) and unit column stride.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::detail {

// dst[r, c] = float(src[r, c]) for BF16 src (exact widening); rows × cols.
cudaError_t launch_gemm_widen_bf16(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                                   int64_t ld_dst, cudaStream_t stream);
// dst[r, c] = bf16(src[r, c]) rounded to nearest even (__float2bfloat16_rn); rows × cols.
cudaError_t launch_gemm_round_bf16(const float* src, int64_t ld_src, int64_t rows, int64_t cols, uint16_t* dst,
                                   int64_t ld_dst, cudaStream_t stream);
// c = beta·c over rows × cols of an F32 (bf16_c false) or BF16 matrix; beta == 0 writes zeros without reading c
// (as BLAS does: NaN in c does not survive), a BF16 c is rounded once.
cudaError_t launch_gemm_scale(void* c, bool bf16_c, int64_t ldc, int64_t rows, int64_t cols, float beta,
                              cudaStream_t stream);

}  // namespace fp8train::ops::cuda::detail

namespace fp8train::ops::cuda::detail {

// The grouped GEMMs of ops/gemm.h (gemm_grouped.cu), reading the expert offsets on the device:
//   kind 0 (M): c[rows_e] = alpha·a[rows_e]·op(b_e) + beta·c[rows_e]; a [rows, k], b E blocks of [n, k]
//               (trans_b) or [k, n], c [rows, n]; rows past offsets[E] written with zeros
//   kind 1 (K): c_e = alpha·a[rows_e]ᵀ·b[rows_e] + beta·c_e; a [rows, m], b [rows, n], c E blocks of [m, n]
// Dtypes: a_bf16 / b_bf16 / c_bf16 (else F32). BF16 × BF16 runs on tensor cores (mma.sync m16n8k16, FP32
// accumulation); any F32 operand on a SIMT FP32 kernel. beta = 0 never reads c. Deterministic (no atomics).
struct GroupedGemmArgs {
  int kind = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  bool a_bf16 = true, b_bf16 = true, c_bf16 = true;
  bool trans_b = false;
  const int32_t* offsets = nullptr;  // device, [groups + 1]
  int64_t groups = 0, rows = 0, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
};
cudaError_t launch_gemm_grouped(const GroupedGemmArgs& args, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::detail
