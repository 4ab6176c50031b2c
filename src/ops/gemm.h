// GEMM entry points: c = alpha·op(a)·op(b) + beta·c on matrix views (2-D, unit column stride, any row stride),
// all on ctx's device. Dtypes: a, b and c each f32 or bf16 (any mix; FP32 accumulation, a bf16 c rounded once),
// or all f64. op(x) = xᵀ when the matching trans flag is set. `round_inputs_bf16` gives the
// exact BF16-input product (inputs rounded to nearest-even BF16, FP32 accumulation) — the BF16 baseline.
//   a: [m,k] or [k,m] (trans_a);  b: [k,n] or [n,k] (trans_b);  c: [m,n]
#pragma once
#include <optional>

#include "ops/op_table.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

// C[m,n] = alpha·op(A)·op(B) + beta·C. op(A) is [m,k] (A stored [m,k], or [k,m] when trans_a); op(B) is [k,n]
// (B stored [k,n], or [n,k] when trans_b). round_inputs_bf16 rounds every A and B element to BF16 (nearest even)
// before multiplying — the exact BF16-input product with FP32 accumulation (F32 only).
struct GemmProblem {
  DType dtype = DType::F32;  // of c
  DType a_dtype = DType::F32, b_dtype = DType::F32;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  double alpha = 1.0, beta = 0.0;
  bool round_inputs_bf16 = false;
};

struct GemmOptions {
  double alpha = 1.0;
  double beta = 0.0;
  bool round_inputs_bf16 = false;
};

void gemm(const ExecCtx& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
          const GemmOptions& options = {});

// Grouped GEMMs over the experts of a MoE layer. The rows of all E experts form one expert-ordered matrix
// (ops/moe_dispatch.h): expert e owns rows [offsets[e], offsets[e+1]) — offsets an i32 [E+1] tensor on ctx's
// device, non-decreasing, offsets[E] <= rows; the kernel reads it (no host synchronization on a GPU).
//   GroupedGemmKind::M  c[rows_e] = alpha·a[rows_e]·op(b_e) + beta·c[rows_e]       a [R, K], c [R, N]
//                       b_e = the e-th of E equal row blocks of b: [N, K] (trans_b: op = ᵀ) or [K, N]
//                       (Fprop y = x·W_eᵀ with b = W [E·out, in], trans_b; Dgrad dx = dy·W_e, not trans_b)
//   GroupedGemmKind::K  c_e = alpha·a[rows_e]ᵀ·b[rows_e] + beta·c_e                 a [R, M], b [R, N],
//                       c_e the e-th of E equal row blocks of c [E·M, N]             (Wgrad dW_e = dy_eᵀ·x_e)
// Rows outside every expert's range are not read (M) or not touched (K). An expert with no rows gets nothing
// (M) or c_e = beta·c_e (K; beta = 0 writes zeros without reading c, as BLAS does). Dtypes as gemm(); each
// expert's product is exactly gemm() on its views.
enum class GroupedGemmKind : uint8_t { M, K };
struct GroupedGemmProblem {
  GroupedGemmKind kind = GroupedGemmKind::M;
  DType dtype = DType::F32;  // of c
  DType a_dtype = DType::F32, b_dtype = DType::F32;
  int64_t groups = 0, rows = 0;  // E, and the expert-ordered rows R
  int64_t m = 0, n = 0, k = 0;   // per expert: M: op(b_e) is [k, n]; K: c_e is [m, n]
  bool trans_b = false;          // M only
  int64_t lda = 0, ldb = 0, ldc = 0;
  double alpha = 1.0, beta = 0.0;
};

void gemm_grouped(const ExecCtx& ctx, GroupedGemmKind kind, const Tensor& a, const Tensor& b, bool trans_b,
                  const Tensor& c, const Tensor& offsets, const GemmOptions& options = {});

// A new [m,n] tensor op(a)·op(b) on ctx's device, of dtype `out` (default: a's dtype).
Tensor matmul(const ExecCtx& ctx, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
              MemCategory category = MemCategory::Workspace, const GemmOptions& options = {},
              std::optional<DType> out = std::nullopt);

}  // namespace fp8train::ops
