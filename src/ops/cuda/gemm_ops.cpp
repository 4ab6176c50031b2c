// CUDA launchers of the plain GEMMs (ops/gemm.h), on cuBLASLt with FP32 compute (CUBLAS_COMPUTE_32F, never
// TF32: F32 products are FP32-accurate):
//   gemm          every transpose, any row strides, alpha/beta; a, b, c each F32 or BF16:
//                 BF16 × BF16 -> F32 or BF16 c        cuBLASLt directly (a BF16 c with beta != 0 read as BF16)
//                 F32 × F32 -> F32 c                  cuBLASLt directly
//                 mixed F32/BF16 inputs               the BF16 operand widened (exactly) into F32 scratch
//                 F32 inputs -> BF16 c                computed into F32 scratch (beta·c widened into it), rounded once
//                 round_inputs_bf16                   both inputs rounded to BF16 scratch, then BF16 × BF16
//                 an operand or c whose pointer or row stride is not 16-byte aligned is first copied into a dense
//                 16-byte-pitched scratch (and c copied back), so every cuBLASLt call sees aligned matrices
//                 k = 0: c = beta·c (zeros for beta 0, c not read); m or n = 0: nothing
//                 f64: not implemented on cuda (the gradient-check models are CPU only)
//   gemm_grouped  by default the offsets read to the host (a stream synchronization per call) and one cuBLASLt
//                 gemm() per expert; with FP8TRAIN_GROUPED_GEMM=own or set_grouped_gemm_backend(Own)
//                 fp8train's grouped kernels (gemm_grouped.cu), which read the expert offsets on the device (no
//                 host synchronization): BF16 × BF16 on tensor cores (mma.sync), any F32 operand on FP32 SIMT.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/gemm_launch.h"
#include "ops/cuda/kernels.h"
#include "ops/gemm.h"
#include "tensor/cuda/cuda_check.h"

namespace fp8train::ops::cuda {
namespace kernels {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void check_launch(cudaError_t err, const char* op, const char* kernel) {
  FP8T_CHECK(err == cudaSuccess, "{}: launching {} failed: {}", op, kernel, cudaGetErrorString(err));
}

// A row-major matrix view on the device: rows × cols elements of `dtype`, row stride ld (elements).
struct Mat {
  const void* ptr = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, ld = 0;
};

// What every cuBLASLt call here gets: a 16-byte aligned pointer and a row pitch of a multiple of 16 bytes.
bool aligned16(const void* ptr, int64_t ld, DType dtype) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (ld * static_cast<int64_t>(dtype_size(dtype))) % 16 == 0;
}

// dst (rows × cols of dst_dtype, row stride ld_dst) = src converted: a 2-D copy for equal dtypes, else the
// exact BF16 -> F32 widening or the nearest-even F32 -> BF16 rounding.
void copy_convert(const Mat& src, void* dst, DType dst_dtype, int64_t ld_dst, cudaStream_t stream, const char* op) {
  if (src.rows == 0 || src.cols == 0) return;
  if (src.dtype == dst_dtype) {
    const size_t es = dtype_size(dst_dtype);
    FP8T_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(ld_dst) * es, src.ptr, static_cast<size_t>(src.ld) * es,
                                      static_cast<size_t>(src.cols) * es, static_cast<size_t>(src.rows),
                                      cudaMemcpyDeviceToDevice, stream));
  } else if (dst_dtype == DType::F32) {
    check_launch(detail::launch_gemm_widen_bf16(static_cast<const uint16_t*>(src.ptr), src.ld, src.rows, src.cols,
                                                static_cast<float*>(dst), ld_dst, stream),
                 op, "widen_bf16_kernel");
  } else {
    check_launch(detail::launch_gemm_round_bf16(static_cast<const float*>(src.ptr), src.ld, src.rows, src.cols,
                                                static_cast<uint16_t*>(dst), ld_dst, stream),
                 op, "round_bf16_kernel");
  }
}

// A dense copy of m in `dtype` with a 16-byte row pitch, from the caching allocator (kept alive in `keep` until
// the kernels reading it are enqueued: the allocator is stream-ordered).
Mat staged(const ExecCtx& ctx, const Mat& m, DType dtype, std::vector<Tensor>& keep, bool fill, const char* op) {
  const int64_t ld = round_up(m.cols, 16 / static_cast<int64_t>(dtype_size(dtype)));
  keep.push_back(ctx.scratch({m.rows, ld}, dtype));
  void* p = keep.back().raw();
  if (fill) copy_convert(m, p, dtype, ld, stream_of(ctx), op);
  return {p, dtype, m.rows, m.cols, ld};
}

void refuse_f64(const char* op, DType c, DType a, DType b) {
  if (c == DType::F64 || a == DType::F64 || b == DType::F64) throw_not_implemented(op, "f64");
}

}  // namespace

void gemm(const ExecCtx& ctx, const GemmProblem& p, const void* a, const void* b, void* c) {
  const char* op = "gemm";
  refuse_f64(op, p.dtype, p.a_dtype, p.b_dtype);
  if (p.m == 0 || p.n == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
  if (p.k == 0) {  // an empty sum: c = beta·c, as BLAS does
    check_launch(detail::launch_gemm_scale(c, p.dtype == DType::BF16, p.ldc, p.m, p.n, beta, stream), op,
                 "scale_kernel");
    return;
  }
  std::vector<Tensor> keep;
  Mat ma{a, p.a_dtype, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda};
  Mat mb{b, p.b_dtype, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb};
  // BF16 × BF16 when both are BF16 or rounding is asked for; else F32 × F32 (a BF16 operand widened, exactly:
  // an F32 input is never rounded unless round_inputs_bf16).
  const bool bf16_inputs = p.round_inputs_bf16 || (p.a_dtype == DType::BF16 && p.b_dtype == DType::BF16);
  const DType in = bf16_inputs ? DType::BF16 : DType::F32;
  for (Mat* x : {&ma, &mb})
    if (x->dtype != in || !aligned16(x->ptr, x->ld, x->dtype)) *x = staged(ctx, *x, in, keep, true, op);
  // cuBLASLt writes c directly when it can; F32 inputs into a BF16 c go through an F32 scratch (cuBLASLt's FP32
  // GEMM writes F32 only), and so does an unaligned c.
  const DType out = bf16_inputs ? p.dtype : DType::F32;
  const Mat mc{c, p.dtype, p.m, p.n, p.ldc};
  Mat target = mc;
  const bool via_scratch = out != p.dtype || !aligned16(c, p.ldc, p.dtype);
  if (via_scratch) target = staged(ctx, mc, out, keep, p.beta != 0.0, op);

  CublasLtPlainProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.trans_a = p.trans_a;
  q.trans_b = p.trans_b;
  q.f32_inputs = !bf16_inputs;
  q.out = out == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16;
  q.lda = ma.ld;
  q.ldb = mb.ld;
  q.ldc = target.ld;
  q.alpha = alpha;
  q.beta = beta;
  cublaslt_gemm(ctx.device.index).run_plain(q, ma.ptr, mb.ptr, const_cast<void*>(target.ptr), stream);
  if (via_scratch) copy_convert(target, c, p.dtype, p.ldc, stream, op);
}

namespace {

// The fallback: the offsets to the host (one small copy and a synchronization of the stream), then one gemm()
// per expert on its views, as the CPU kernel does.
void gemm_grouped_host_offsets(const ExecCtx& ctx, const GroupedGemmProblem& p, const int32_t* offsets, const void* a,
                               const void* b, void* c) {
  const char* op = "gemm_grouped";
  const cudaStream_t stream = stream_of(ctx);
  const std::vector<int32_t> off = expert_offsets_on_host(ctx, offsets, p.groups, p.rows, 1, op);

  const auto a_es = static_cast<int64_t>(dtype_size(p.a_dtype)), b_es = static_cast<int64_t>(dtype_size(p.b_dtype));
  const auto c_es = static_cast<int64_t>(dtype_size(p.dtype));
  auto at = [](const void* base, int64_t elements, int64_t es) {
    return static_cast<const void*>(static_cast<const char*>(base) + elements * es);
  };
  auto at_c = [&](int64_t elements) { return static_cast<char*>(c) + elements * c_es; };
  const bool c_bf16 = p.dtype == DType::BF16;
  GemmProblem q;
  q.dtype = p.dtype;
  q.a_dtype = p.a_dtype;
  q.b_dtype = p.b_dtype;
  q.alpha = p.alpha;
  q.beta = p.beta;
  q.lda = p.lda;
  q.ldb = p.ldb;
  q.ldc = p.ldc;
  if (p.kind == GroupedGemmKind::M) {
    const int64_t b_rows = p.trans_b ? p.n : p.k;  // rows of each expert's block of b
    q.n = p.n;
    q.k = p.k;
    q.trans_b = p.trans_b;
    for (int64_t e = 0; e < p.groups; ++e) {
      const int64_t r0 = off[e], r = off[e + 1] - r0;
      if (r == 0) continue;
      q.m = r;
      gemm(ctx, q, at(a, r0 * p.lda, a_es), at(b, e * b_rows * p.ldb, b_es), at_c(r0 * p.ldc));
    }
    // The rows past the last expert: zeros (beta 0 writes without reading).
    if (off[p.groups] < p.rows)
      check_launch(detail::launch_gemm_scale(at_c(off[p.groups] * p.ldc), c_bf16, p.ldc, p.rows - off[p.groups], p.n,
                                             0.0f, stream),
                   op, "scale_kernel");
    return;
  }
  q.m = p.m;
  q.n = p.n;
  q.trans_a = true;
  for (int64_t e = 0; e < p.groups; ++e) {
    const int64_t r0 = off[e], r = off[e + 1] - r0;
    void* ce = at_c(e * p.m * p.ldc);
    q.k = r;  // k = 0: c_e = beta·c_e (gemm's empty sum; beta 1 leaves c_e alone)
    if (r == 0 && p.beta == 1.0) continue;
    gemm(ctx, q, at(a, r0 * p.lda, a_es), at(b, r0 * p.ldb, b_es), ce);
  }
}

// The backend of gemm_grouped: per-expert cuBLASLt (the default: 3x the own kernels' speed at the benchmark's
// MoE shapes, bench/RESULTS.md, at the price of one stream synchronization per call), or fp8train's kernels that
// read the offsets on the device (FP8TRAIN_GROUPED_GEMM=own / set_grouped_gemm_backend).
std::atomic<GroupedGemmBackend>& grouped_backend() {
  static std::atomic<GroupedGemmBackend> backend{[] {
    const char* v = std::getenv("FP8TRAIN_GROUPED_GEMM");
    return v != nullptr && std::string(v) == "own" ? GroupedGemmBackend::Own : GroupedGemmBackend::CublasLt;
  }()};
  return backend;
}

}  // namespace

void gemm_grouped(const ExecCtx& ctx, const GroupedGemmProblem& p, const int32_t* offsets, const void* a, const void* b,
                  void* c) {
  const char* op = "gemm_grouped";
  refuse_f64(op, p.dtype, p.a_dtype, p.b_dtype);
  if (grouped_backend().load() == GroupedGemmBackend::CublasLt)
    return gemm_grouped_host_offsets(ctx, p, offsets, a, b, c);
  detail::GroupedGemmArgs g;
  g.kind = p.kind == GroupedGemmKind::M ? 0 : 1;
  g.a = a;
  g.b = b;
  g.c = c;
  g.a_bf16 = p.a_dtype == DType::BF16;
  g.b_bf16 = p.b_dtype == DType::BF16;
  g.c_bf16 = p.dtype == DType::BF16;
  g.trans_b = p.trans_b;
  g.offsets = offsets;
  g.groups = p.groups;
  g.rows = p.rows;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.lda = p.lda;
  g.ldb = p.ldb;
  g.ldc = p.ldc;
  g.alpha = static_cast<float>(p.alpha);
  g.beta = static_cast<float>(p.beta);
  FP8T_CHECK(p.kind == GroupedGemmKind::M || p.groups <= 65535, "{}: {} experts exceed the grid's 65535", op, p.groups);
  check_launch(detail::launch_gemm_grouped(g, stream_of(ctx)), op, "grouped_gemm_kernel");
}

}  // namespace kernels

std::vector<int32_t> expert_offsets_on_host(const ExecCtx& ctx, const int32_t* offsets, int64_t groups, int64_t total,
                                            int64_t multiple, const char* op) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
  std::vector<int32_t> off(static_cast<size_t>(groups + 1));
  FP8T_CUDA_CHECK(cudaMemcpyAsync(off.data(), offsets, off.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream));
  FP8T_CHECK(off[0] >= 0 && off[0] % multiple == 0, "{}: offsets[0] = {} (must be a non-negative multiple of {})", op,
             off[0], multiple);
  for (int64_t e = 0; e < groups; ++e)
    FP8T_CHECK(off[e + 1] >= off[e] && off[e + 1] % multiple == 0,
               "{}: offsets[{}] = {} after {} (offsets are non-decreasing multiples of {})", op, e + 1, off[e + 1],
               off[e], multiple);
  FP8T_CHECK(off[groups] <= total, "{}: offsets end at {}, beyond {}", op, off[groups], total);
  return off;
}

void set_grouped_gemm_backend(GroupedGemmBackend b) { kernels::grouped_backend().store(b); }
GroupedGemmBackend grouped_gemm_backend() { return kernels::grouped_backend().load(); }
}  // namespace fp8train::ops::cuda
