// Embedding entry points (see embedding.h).
#include "ops/embedding.h"

#include "ops/checks.h"

namespace fp8train::ops {

namespace {
EmbeddingProblem problem(const ExecCtx& ctx, const char* op, const Tensor& ids, const Tensor& table,
                         const Tensor& rows) {
  check::vector(op, "ids", ids);
  check::dtype(op, "ids", ids, DType::I32);
  check::matrix(op, "table", table);
  FP8T_CHECK(table.is_contiguous(), "{}: table must be contiguous, got {}", op, table.str());
  check::matrix(op, "token rows", rows, ids.numel(), table.size(1));
  check::storage_dtype(op, "token rows", rows);
  check::compute_dtype_of(op, "table", table, rows.dtype());
  check::on_device(op, ctx, {&ids, &table, &rows});
  EmbeddingProblem p;
  p.dtype = rows.dtype();
  p.tokens = ids.numel();
  p.vocab = table.size(0);
  p.dim = table.size(1);
  p.ld_out = rows.size(0) > 1 ? rows.ld() : p.dim;
  return p;
}
}  // namespace

void embedding_forward(const ExecCtx& ctx, const Tensor& ids, const Tensor& table, const Tensor& out) {
  const EmbeddingProblem p = problem(ctx, "embedding_forward", ids, table, out);
  launcher(ctx, &OpTable::embedding_forward, "embedding_forward")(ctx, p, ids.data<int32_t>(), table.raw(), out.raw());
}

void embedding_backward(const ExecCtx& ctx, const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const EmbeddingProblem p = problem(ctx, "embedding_backward", ids, dtable, dout);
  launcher(ctx, &OpTable::embedding_backward, "embedding_backward")(ctx, p, ids.data<int32_t>(), dout.raw(),
                                                                    dtable.raw());
}

}  // namespace fp8train::ops
