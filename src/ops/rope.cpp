// RoPE entry point (see rope.h).
#include "ops/rope.h"

#include "ops/checks.h"

namespace fp8train::ops {

void rope_(const ExecCtx& ctx, const Tensor& x, int64_t seq_len, double theta, bool inverse, int64_t pos_offset) {
  const char* op = "rope";
  check::storage_dtype(op, "x", x);
  FP8T_CHECK(x.dim() == 3, "{}: x must be [rows, heads, rope_dim], got {}", op, x.str());
  FP8T_CHECK(x.size(2) <= 1 || x.stride(2) == 1, "{}: x must have a unit last stride, got {}", op, x.str());
  FP8T_CHECK(x.size(2) % 2 == 0, "{}: rope_dim must be even, got {}", op, x.size(2));
  FP8T_CHECK(seq_len > 0 && x.size(0) % seq_len == 0, "{}: {} rows are not whole sequences of {}", op, x.size(0),
             seq_len);
  FP8T_CHECK(theta > 0, "{}: theta must be positive, got {}", op, theta);
  FP8T_CHECK(pos_offset >= 0, "{}: the position offset must be non-negative, got {}", op, pos_offset);
  RopeProblem p;
  p.dtype = x.dtype();
  p.rows = x.size(0);
  p.heads = x.size(1);
  p.rope_dim = x.size(2);
  p.ld = x.stride(0);
  p.head_stride = x.stride(1);
  p.seq_len = seq_len;
  p.theta = theta;
  p.inverse = inverse;
  p.pos_offset = pos_offset;
  launcher(ctx, &OpTable::rope, "rope")(ctx, p, x.raw());
}

}  // namespace fp8train::ops
