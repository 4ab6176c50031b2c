// CPU GEMM: OpenBLAS sgemm/dgemm (pinned to one thread), split into chunks along M (or N when N is the larger
// side) that OpenMP threads share; never along K. The chunks depend on the shape only, so the result is the same
// bits whatever the thread count. round_inputs_bf16
// first rounds copies of A and B to BF16 (numerics/formats.h), so the product is exactly that of BF16 inputs
// with FP32 accumulation. BF16 operands are widened (exactly) and multiplied the same way; a BF16 output is the
// FP32 result (plus beta·C widened) rounded once.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "ops/cpu/kernels.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace fp8train::ops::cpu {
namespace {

void blas(const GemmProblem& p, int64_t m, int64_t n, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(p.k), static_cast<float>(p.alpha), a,
              static_cast<int>(std::max<int64_t>(p.lda, 1)), b, static_cast<int>(std::max<int64_t>(p.ldb, 1)),
              static_cast<float>(p.beta), c, static_cast<int>(std::max<int64_t>(p.ldc, 1)));
}
void blas(const GemmProblem& p, int64_t m, int64_t n, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(p.k), p.alpha, a,
              static_cast<int>(std::max<int64_t>(p.lda, 1)), b, static_cast<int>(std::max<int64_t>(p.ldb, 1)), p.beta,
              c, static_cast<int>(std::max<int64_t>(p.ldc, 1)));
}

// A rounded copy of a stored rows×cols matrix (row stride ld), packed with row stride cols.
std::vector<float> bf16_copy(const float* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = num::bf16_round(src[r * ld + c]);
  return out;
}

// A widened (exact) FP32 copy of a stored bf16 rows×cols matrix, packed with row stride cols.
std::vector<float> widened_copy(const bf16* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(src[r * ld + c]);
  return out;
}

// The split depends on the shape only — never on the thread count — so one thread and many run the very same
// sequence of OpenBLAS sub-GEMMs and give the same bits (OpenBLAS picks different micro-kernels, with different
// summation orders, for different sub-matrix sizes). Threads take whole chunks.
template <class T>
void gemm_split(const GemmProblem& p, const T* a, const T* b, T* c) {
  if (p.m == 0 || p.n == 0) return;
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  // Below ~0.5 MFLOP a split costs more than it saves.
  if (flops < 5e5) {
    blas(p, p.m, p.n, a, b, c);
    return;
  }
  const bool split_rows = p.m >= p.n;
  const int64_t extent = split_rows ? p.m : p.n;
  // up to kChunks chunks of at least kMinChunk, on multiples of 16 (whole micro-kernel tiles)
  constexpr int64_t kAlign = 16, kChunks = 8, kMinChunk = 64;
  const int64_t units = (extent + kAlign - 1) / kAlign;
  const int64_t chunk = std::max(kMinChunk, (units + kChunks - 1) / kChunks * kAlign);
  const int64_t chunks = (extent + chunk - 1) / chunk;
  auto run_chunk = [&](int64_t ch) {
    const int64_t begin = ch * chunk, end = std::min(extent, begin + chunk);
    if (split_rows) {
      const T* a0 = p.trans_a ? a + begin : a + begin * p.lda;
      blas(p, end - begin, p.n, a0, b, c + begin * p.ldc);
    } else {
      const T* b0 = p.trans_b ? b + begin * p.ldb : b + begin;
      blas(p, p.m, end - begin, a, b0, c + begin);
    }
  };
  if (chunks == 1 || omp_in_parallel() || omp_get_max_threads() == 1) {
    for (int64_t ch = 0; ch < chunks; ++ch) run_chunk(ch);  // the same chunks, in order
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) run_chunk(ch);
}

}  // namespace

void gemm(const ExecCtx&, const GemmProblem& p, const void* a, const void* b, void* c) {
  cpu_op_table();  // pins OpenBLAS to one thread before the first split call
  if (p.round_inputs_bf16) {
    FP8T_CHECK(p.dtype == DType::F32, "BF16 input rounding is defined for f32 GEMMs only");
    const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
    const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
    const std::vector<float> ra = bf16_copy(static_cast<const float*>(a), a_rows, a_cols, p.lda);
    const std::vector<float> rb = bf16_copy(static_cast<const float*>(b), b_rows, b_cols, p.ldb);
    GemmProblem q = p;
    q.lda = a_cols;
    q.ldb = b_cols;
    gemm_split<float>(q, ra.data(), rb.data(), static_cast<float*>(c));
    return;
  }
  if (p.dtype == DType::F64 || (p.dtype == DType::F32 && p.a_dtype == DType::F32 && p.b_dtype == DType::F32)) {
    dispatch_float(p.dtype, "gemm", [&](auto tag) {
      using T = decltype(tag);
      gemm_split<T>(p, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c));
    });
    return;
  }
  // BF16 operands or output: widen the BF16 operands (exact), multiply in FP32 (SGEMM, FP32 accumulation: the
  // product of BF16 inputs) and round a BF16 output once.
  const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  GemmProblem q = p;
  std::vector<float> wa, wb, wc;
  const float* fa = static_cast<const float*>(a);
  const float* fb = static_cast<const float*>(b);
  if (p.a_dtype == DType::BF16) {
    wa = widened_copy(static_cast<const bf16*>(a), a_rows, a_cols, p.lda);
    fa = wa.data();
    q.lda = a_cols;
  }
  if (p.b_dtype == DType::BF16) {
    wb = widened_copy(static_cast<const bf16*>(b), b_rows, b_cols, p.ldb);
    fb = wb.data();
    q.ldb = b_cols;
  }
  if (p.dtype == DType::F32) {
    gemm_split<float>(q, fa, fb, static_cast<float*>(c));
    return;
  }
  bf16* cb = static_cast<bf16*>(c);
  wc = p.beta != 0.0 ? widened_copy(cb, p.m, p.n, p.ldc) : std::vector<float>(static_cast<size_t>(p.m * p.n));
  q.ldc = p.n;
  gemm_split<float>(q, fa, fb, wc.data());
#pragma omp parallel for schedule(static) if (p.m * p.n > 65536)
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t col = 0; col < p.n; ++col) cb[r * p.ldc + col] = bf16(wc[r * p.n + col]);
}

void gemm_grouped(const ExecCtx& ctx, const GroupedGemmProblem& p, const int32_t* offsets, const void* a, const void* b,
                  void* c) {
  FP8T_CHECK(offsets[0] >= 0, "gemm_grouped: offsets[0] = {} is negative", offsets[0]);
  for (int64_t e = 0; e < p.groups; ++e)
    FP8T_CHECK(offsets[e + 1] >= offsets[e], "gemm_grouped: offsets decrease at expert {} ({} then {})", e, offsets[e],
               offsets[e + 1]);
  FP8T_CHECK(offsets[p.groups] <= p.rows, "gemm_grouped: offsets end at {}, beyond the {} rows", offsets[p.groups],
             p.rows);
  const size_t a_es = dtype_size(p.a_dtype), b_es = dtype_size(p.b_dtype), c_es = dtype_size(p.dtype);
  auto at = [](const void* base, int64_t elements, size_t es) {
    return static_cast<const void*>(static_cast<const char*>(base) + elements * static_cast<int64_t>(es));
  };
  auto run = [&](int64_t e) {
    const int64_t r0 = offsets[e], r = offsets[e + 1] - r0;
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
      if (r == 0) return;
      const int64_t b_rows = p.trans_b ? p.n : p.k;
      q.m = r;
      q.n = p.n;
      q.k = p.k;
      q.trans_b = p.trans_b;
      gemm(ctx, q, at(a, r0 * p.lda, a_es), at(b, e * b_rows * p.ldb, b_es),
           const_cast<void*>(at(c, r0 * p.ldc, c_es)));
    } else {
      void* ce = const_cast<void*>(at(c, e * p.m * p.ldc, c_es));
      if (r == 0) {
        if (p.beta == 1.0) return;
        AxpbyProblem s;  // c_e = beta·c_e
        s.dtype = s.a_dtype = s.b_dtype = p.dtype;
        s.rows = p.m;
        s.cols = p.n;
        s.ld_a = s.ld_out = p.ldc;
        s.alpha = p.beta;
        if (p.beta == 0.0) {
          fill(ctx, s, 0.0, ce);
        } else {
          axpby(ctx, s, ce, nullptr, ce);
        }
        return;
      }
      q.m = p.m;
      q.n = p.n;
      q.k = r;
      q.trans_a = true;
      gemm(ctx, q, at(a, r0 * p.lda, a_es), at(b, r0 * p.ldb, b_es), ce);
    }
  };
  // Experts run concurrently, each expert's GEMM on one thread (largest first): the same arithmetic as one
  // gemm() per expert, whatever the thread count.
  std::vector<int64_t> order(static_cast<size_t>(p.groups));
  for (int64_t e = 0; e < p.groups; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return offsets[x + 1] - offsets[x] > offsets[y + 1] - offsets[y]; });
  const double flops = 2.0 * static_cast<double>(offsets[p.groups] - offsets[0]) *
                       static_cast<double>(p.kind == GroupedGemmKind::M ? p.n * p.k : p.m * p.n);
  if (p.groups <= 1 || flops < 2e6 || omp_in_parallel() || omp_get_max_threads() == 1) {
    for (int64_t e : order) run(e);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < p.groups; ++i) {
    try {
      run(order[i]);
    } catch (...) {
#pragma omp critical(fp8t_grouped_gemm_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fp8train::ops::cpu
