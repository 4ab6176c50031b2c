// Internal: the launch functions of the training ops' kernels (train_*.cu), called by train_ops.cpp after the entry
// points validated the arguments. Plain structs and pointers only (the .cu files include no fmt); each returns the
// launch's cudaError_t.
//   cross-entropy  logits F32 or BF16 [rows, vocab], row stride ld (elements); targets i32 [rows] (−1 = ignored);
//                  row_loss f64 [rows]; with compute_grad the logits become grad_scale·(softmax − onehot)
//   AdamW          param, grad F32 [n]; moments F32 or BF16 [n]; the FP32 coefficients of ops::AdamWProblem
//   sum of squares x F32 or F64 [n]; bounds i64 [segments, 2]; first i64 [segments + 1] (each segment's first
//                  chunk in the partials, first[segments] = chunks); partial f64 [chunks]; out f64 [segments]
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::detail {

struct CrossEntropyArgs {
  void* logits;
  bool bf16;  // else F32
  int64_t rows, vocab, ld;
  const int32_t* targets;
  double* row_loss;
  float grad_scale;
  bool compute_grad;
};
cudaError_t launch_cross_entropy(const CrossEntropyArgs& a, cudaStream_t stream);

struct AdamWArgs {
  int64_t n;
  bool bf16_moments;  // else F32
  float beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bias2, eps, decay_factor;
  float* param;
  const float* grad;
  void* exp_avg;
  void* exp_avg_sq;
};
cudaError_t launch_adamw(const AdamWArgs& a, cudaStream_t stream);

struct SumSquaresArgs {
  const void* x;
  bool f64;  // else F32
  const int64_t* bounds;
  const int64_t* first;
  int64_t segments, chunks, chunk;
  double* partial;
  double* out;
};
cudaError_t launch_sum_squares(const SumSquaresArgs& a, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::detail
