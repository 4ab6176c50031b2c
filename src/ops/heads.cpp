// Per-head broadcast and reduction entry points (see heads.h).
#include "ops/heads.h"

#include "ops/checks.h"

namespace fp8train::ops {
namespace {

// The problem of a matrix `mat` and a per-head view `per_head` (its checks name `op` and the arguments).
HeadsProblem heads_problem(const char* op, const ExecCtx& ctx, const Tensor& mat, const char* mat_name,
                           const Tensor& per_head, const char* per_head_name) {
  check::storage_dtype(op, mat_name, mat);
  check::storage_dtype(op, per_head_name, per_head);
  check::same_dtype(op, {&mat, &per_head});
  check::on_device(op, ctx, {&mat, &per_head});
  check::matrix(op, mat_name, mat);
  FP8T_CHECK(per_head.dim() == 3, "{}: {} must be [rows, heads, dim], got {}", op, per_head_name, per_head.str());
  FP8T_CHECK(per_head.size(2) <= 1 || per_head.stride(2) == 1, "{}: {} must have a unit last stride, got {}", op,
             per_head_name, per_head.str());
  FP8T_CHECK(per_head.size(0) == mat.size(0) && per_head.size(2) == mat.size(1),
             "{}: {} {} and {} {} disagree on rows or dim", op, per_head_name, per_head.str(), mat_name, mat.str());
  HeadsProblem p;
  p.dtype = mat.dtype();
  p.rows = mat.size(0);
  p.heads = per_head.size(1);
  p.dim = mat.size(1);
  p.ld_mat = mat.stride(0);
  p.ld_heads = per_head.stride(0);
  p.head_stride = per_head.stride(1);
  return p;
}

}  // namespace

void repeat_heads(const ExecCtx& ctx, const Tensor& src, const Tensor& dst) {
  const char* op = "repeat_heads";
  const HeadsProblem p = heads_problem(op, ctx, src, "src", dst, "dst");
  // Every element of dst is written once: heads within a row, and rows, must not overlap.
  FP8T_CHECK(p.heads <= 1 || p.head_stride >= p.dim, "{}: dst has overlapping heads ({})", op, dst.str());
  FP8T_CHECK(p.rows <= 1 || p.heads == 0 || p.ld_heads >= (p.heads - 1) * p.head_stride + p.dim,
             "{}: dst has overlapping rows ({})", op, dst.str());
  launcher(ctx, &OpTable::repeat_heads, op)(ctx, p, src.raw(), dst.raw());
}

void sum_heads(const ExecCtx& ctx, const Tensor& src, const Tensor& dst) {
  const char* op = "sum_heads";
  const HeadsProblem p = heads_problem(op, ctx, dst, "dst", src, "src");
  FP8T_CHECK(p.heads >= 1, "{}: src must have at least one head, got {}", op, src.str());
  launcher(ctx, &OpTable::sum_heads, op)(ctx, p, src.raw(), dst.raw());
}

}  // namespace fp8train::ops
