// CUDA launchers of cross-entropy, AdamW and the sum of squares (ops/op_table.h); the kernels are in
// train_cross_entropy.cu, train_adamw.cu and train_sum_squares.cu (train_launch.h).
//   cross_entropy  logits F32 or BF16 (F64 refused: the gradient-check models are CPU only)
//   adamw          F32 or BF16 moments, bit-exact against the CPU
//   sum_squares    x F32 or F64, bit-exact against the CPU. The launcher reads the bounds back to the host (one
//                  small copy and a stream synchronization) to number the chunks and size the partial sums.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "ops/adamw.h"
#include "ops/cross_entropy.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/train_launch.h"
#include "ops/sum_squares.h"

namespace fp8train::ops::cuda {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

void check_cuda(cudaError_t e, const char* op, const char* what) {
  FP8T_CHECK(e == cudaSuccess, "{} on cuda: {} failed: {}", op, what, cudaGetErrorString(e));
}

void cross_entropy(const ExecCtx& ctx, const CrossEntropyProblem& p, void* logits, const int32_t* targets,
                   double* row_loss) {
  if (p.dtype == DType::F64) throw_not_implemented("cross_entropy", "f64");
  FP8T_CHECK(p.dtype == DType::F32 || p.dtype == DType::BF16, "cross_entropy: logits must be f32 or bf16, got {}",
             dtype_name(p.dtype));
  detail::CrossEntropyArgs a;
  a.logits = logits;
  a.bf16 = p.dtype == DType::BF16;
  a.rows = p.rows;
  a.vocab = p.vocab;
  a.ld = p.ld;
  a.targets = targets;
  a.row_loss = row_loss;
  a.grad_scale = static_cast<float>(p.grad_scale);  // the CPU's static_cast<float>(grad_scale)
  a.compute_grad = p.compute_grad;
  check_cuda(detail::launch_cross_entropy(a, stream_of(ctx)), "cross_entropy", "the kernel launch");
}

void adamw(const ExecCtx& ctx, const AdamWProblem& k, float* param, const float* grad, void* exp_avg,
           void* exp_avg_sq) {
  FP8T_CHECK(k.moment_dtype == DType::F32 || k.moment_dtype == DType::BF16,
             "adamw: moments must be f32 or bf16, got {}", dtype_name(k.moment_dtype));
  detail::AdamWArgs a;
  a.n = k.n;
  a.bf16_moments = k.moment_dtype == DType::BF16;
  a.beta1 = k.beta1;
  a.one_minus_beta1 = k.one_minus_beta1;
  a.beta2 = k.beta2;
  a.one_minus_beta2 = k.one_minus_beta2;
  a.step_size = k.step_size;
  a.inv_sqrt_bias2 = k.inv_sqrt_bias2;
  a.eps = k.eps;
  a.decay_factor = k.decay_factor;
  a.param = param;
  a.grad = grad;
  a.exp_avg = exp_avg;
  a.exp_avg_sq = exp_avg_sq;
  check_cuda(detail::launch_adamw(a, stream_of(ctx)), "adamw", "the kernel launch");
}

void sum_squares(const ExecCtx& ctx, const SumSquaresProblem& p, const void* x, const int64_t* bounds, double* out) {
  const char* op = "sum_squares";
  FP8T_CHECK(p.dtype == DType::F32 || p.dtype == DType::F64, "{}: x must be f32 or f64, got {}", op,
             dtype_name(p.dtype));
  const cudaStream_t stream = stream_of(ctx);
  // The chunk numbering needs every segment's length: read the bounds back (and check them, as the entry point
  // does for host bounds).
  std::vector<int64_t> b(static_cast<size_t>(2 * p.segments));
  check_cuda(cudaMemcpyAsync(b.data(), bounds, b.size() * sizeof(int64_t), cudaMemcpyDeviceToHost, stream), op,
             "reading the bounds back");
  check_cuda(cudaStreamSynchronize(stream), op, "reading the bounds back");
  std::vector<int64_t> first(static_cast<size_t>(p.segments) + 1, 0);
  for (int64_t s = 0; s < p.segments; ++s) {
    const int64_t lo = b[static_cast<size_t>(2 * s)], hi = b[static_cast<size_t>(2 * s + 1)];
    FP8T_CHECK(0 <= lo && lo <= hi && hi <= p.n, "{}: segment {} = [{}, {}) is not inside the {} elements of x", op, s,
               lo, hi, p.n);
    first[static_cast<size_t>(s) + 1] = first[static_cast<size_t>(s)] + (hi == lo ? 0 : (hi - lo - 1) / p.chunk + 1);
  }
  const int64_t chunks = first.back();
  const Tensor first_t = ctx.scratch({p.segments + 1}, DType::I64);
  const Tensor partial = ctx.scratch({chunks > 0 ? chunks : 1}, DType::F64);
  // Pageable host memory: the copy has been staged when cudaMemcpyAsync returns, so `first` may go out of scope.
  check_cuda(
      cudaMemcpyAsync(first_t.raw(), first.data(), first.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream), op,
      "copying the chunk numbering");
  detail::SumSquaresArgs a;
  a.x = x;
  a.f64 = p.dtype == DType::F64;
  a.bounds = bounds;
  a.first = static_cast<const int64_t*>(first_t.raw());
  a.segments = p.segments;
  a.chunks = chunks;
  a.chunk = p.chunk;
  a.partial = static_cast<double*>(partial.raw());
  a.out = out;
  check_cuda(detail::launch_sum_squares(a, stream), op, "the kernel launch");
}

}  // namespace

void install_train_ops(OpTable& t) {
  t.cross_entropy = cross_entropy;
  t.adamw = adamw;
  t.sum_squares = sum_squares;
}

}  // namespace fp8train::ops::cuda
