// Scaled GEMMs through cuBLASLt (tier 2: raw device pointers + a problem descriptor).
//
//   D[M, N] = A[M, K] · B[N, K]ᵀ            (row-major, both operands K-contiguous: cuBLASLt's "TN" layout)
//   D[M, N] = D + A[M, K] · B[N, K]ᵀ        (accumulate: Wgrad adds into an FP32 gradient)
//
// Operands: FP8 E4M3/E5M2 codes (1 byte) or BF16 (uint16 codes). Scaling of each FP8 operand:
//   Tensor        one float (SCALAR_32F)                                   fp8-tensorwise recipe
//   Tile1x128     one float per row per 128 of K (VEC128_32F)              activations, gradients
//   Block128x128  one float per 128x128 block (BLK128x128_32F)             weights
// DeepSeek-V3's three GEMMs of a Linear y = x·Wᵀ map to it as
//   Fprop  y[T, O]  = x[T, I] (1x128)  · W[O, I]ᵀ (128x128)
//   Dgrad  dx[T, I] = dy[T, O] (1x128) · Wᵀ[I, O]ᵀ (128x128; the transposed weight, same blocks)
//   Wgrad  dW[O, I] += dyᵀ[O, T] (1x128 along T) · xᵀ[I, T]ᵀ (1x128 along T) — both from the fused 128x1 path
// cuBLASLt's rules (13.x, Hopper) are checked here and reported as fp8train::Error before any launch:
//   FP8: E4M3×E4M3, E4M3×E5M2, E5M2×E4M3 (no E5M2×E5M2); block scaling: not 128x128 on both operands, M and N
//   multiples of 4, no fast accumulation; every pointer and row stride 16-byte aligned; BF16 or FP32 output.
// Scale layouts (quant::ScaleLayout): QTensor's row-major grid, or cuBLASLt's native layout (1x128: "MN-major",
// scales[kb * rows + r]; 128x128: scales[rb * ld + kb] with ld a multiple of 4). Row-major 1x128 scales are
// transposed, and row-major 128x128 scales with ceil(K/128) % 4 != 0 re-pitched, into a scratch buffer from
// the caching allocator (no cudaMalloc in steady state); native layouts are passed through untouched.
// Algorithm selection (cublasLtMatmulAlgoGetHeuristic, best first) is cached per problem and pointer alignment.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "quant/spec.h"

namespace fp8train::ops::cuda {

enum class GemmInput : uint8_t { E4M3, E5M2, BF16 };
enum class GemmOutput : uint8_t { F32, BF16 };
enum class OperandScaling : uint8_t { None, Tensor, Tile1x128, Block128x128 };

struct CublasLtProblem {
  int64_t m = 0, n = 0, k = 0;
  GemmInput a_type = GemmInput::E4M3, b_type = GemmInput::E4M3;
  OperandScaling a_scaling = OperandScaling::Tile1x128, b_scaling = OperandScaling::Block128x128;
  quant::ScaleLayout a_scale_layout = quant::ScaleLayout::GemmNative, b_scale_layout = quant::ScaleLayout::RowMajor;
  GemmOutput out = GemmOutput::BF16;
  bool accumulate = false;  // D += A·Bᵀ
  bool fast_accum = false;  // per-tensor FP8 only: no promotion to FP32 (cuBLASLt FAST_ACCUM)
  int64_t lda = 0, ldb = 0, ldd = 0;  // row strides in elements; 0 means dense (k, k, n)
  std::string describe() const;        // "fp8 e4m3(1x128) x e4m3(128x128) -> bf16, M=.. N=.. K=.."
};

// Bytes of scales each operand expects (for allocation): Tensor 1, Tile1x128 rows*ceil(K/128),
// Block128x128 ceil(rows/128)*ceil(K/128) (row-major) or ceil(rows/128)*round_up(ceil(K/128), 4) (native).
int64_t scale_count(OperandScaling s, quant::ScaleLayout layout, int64_t rows, int64_t k);

// Plain (unscaled) GEMMs, row-major: C[m,n] = alpha·op(A)·op(B) + beta·C with FP32 compute
// (CUBLAS_COMPUTE_32F: FP32-accurate for F32 inputs, never TF32). A is stored [m,k] ([k,m] when trans_a), B is
// stored [k,n] ([n,k] when trans_b), C [m,n]; any row strides >= the stored rows' lengths. Inputs both BF16
// (C F32 or BF16; a BF16 C is read as BF16 when beta != 0 and rounded once) or both F32 (C F32). m, n, k > 0.
// cuBLASLt sees the column-major transpose Cᵀ[n,m] = op(B)ᵀ·op(A)ᵀ: its A is our B, its B is our A.
struct CublasLtPlainProblem {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool f32_inputs = false;  // F32 × F32; else BF16 × BF16
  GemmOutput out = GemmOutput::F32;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row strides in elements (never 0)
  float alpha = 1.0f, beta = 0.0f;
  std::string describe() const;  // "bf16 aᵀ·b -> f32, M=.. N=.. K=.."
};

class CublasLtGemm {
 public:
  explicit CublasLtGemm(size_t workspace_bytes = size_t{32} << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Checks the problem against cuBLASLt's rules (throws fp8train::Error naming the violated one).
  static void validate(const CublasLtProblem& p);
  // a_scales / b_scales: device floats in the problem's layouts (ignored for BF16 operands).
  void run(const CublasLtProblem& p, const void* a, const float* a_scales, const void* b, const float* b_scales,
           void* d, cudaStream_t stream);
  // Plain GEMM (no scales); the plan is cached per shape, strides, transposes, types and pointer alignment, its
  // algorithm per the same with m, n and k rounded up to 64 (checked by cuBLASLt for each exact shape).
  void run_plain(const CublasLtPlainProblem& p, const void* a, const void* b, void* c, cudaStream_t stream);
  // The cached algorithm chosen for p (selecting it if needed) as "algo 66 tile 23 stages 19 ...".
  std::string algorithm(const CublasLtProblem& p, size_t alignment = 256);
  size_t cached_plans() const;
  // cuBLASLt heuristic queries run for plain GEMMs so far (shapes whose 64-rounded bucket was known skip them).
  int64_t plain_heuristic_queries() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One shared instance per device (created on first use; its workspace comes from the caching allocator).
CublasLtGemm& cublaslt_gemm(int device);
// "cuBLASLt 130100" (library version at run time).
std::string cublaslt_version();

}  // namespace fp8train::ops::cuda
