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
