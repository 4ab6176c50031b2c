// Cached multi-query attention entry point (see attention_cached.h).
#include "ops/attention_cached.h"

#include <utility>

#include "ops/checks.h"

namespace fp8train::ops {

void attention_cached(const ExecCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                      double scale) {
  const char* op = "attention_cached";
  check::storage_dtype(op, "q", q);
  check::same_dtype(op, {&q, &k, &v, &o});
  check::on_device(op, ctx, {&q, &k, &v, &o});
  check::matrix(op, "k", k);
  check::matrix(op, "v", v, k.size(0));
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&o, "o"}}) {
    FP8T_CHECK(t->dim() == 3, "{}: {} must be [tokens, heads, dim], got {}", op, name, t->str());
    FP8T_CHECK(t->size(2) <= 1 || t->stride(2) == 1, "{}: {} must have a unit last stride, got {}", op, name, t->str());
  }
  FP8T_CHECK(q.size(2) == k.size(1), "{}: q {} and k {} disagree on the key dimension", op, q.str(), k.str());
  FP8T_CHECK(o.size(0) == q.size(0) && o.size(1) == q.size(1) && o.size(2) == v.size(1),
             "{}: o must be [{}, {}, {}], got {}", op, q.size(0), q.size(1), v.size(1), o.str());
  FP8T_CHECK(q.size(0) <= k.size(0), "{}: {} new tokens but only {} cached keys (the new tokens' own included)", op,
             q.size(0), k.size(0));
  FP8T_CHECK(scale > 0, "{}: scale must be positive, got {}", op, scale);
  AttentionCachedProblem p;
  p.dtype = q.dtype();
  p.queries = q.size(0);
  p.heads = q.size(1);
  p.keys = k.size(0);
  p.qk_dim = k.size(1);
  p.v_dim = v.size(1);
  p.scale = scale;
  p.q_row = q.stride(0);
  p.q_head = q.stride(1);
  p.ld_k = k.stride(0);
  p.ld_v = v.stride(0);
  p.o_row = o.stride(0);
  p.o_head = o.stride(1);
  if (p.queries == 0 || p.heads == 0) return;
  launcher(ctx, &OpTable::attention_cached, op)(ctx, p, q.raw(), k.raw(), v.raw(), o.raw());
}

}  // namespace fp8train::ops
