// CPU per-head broadcast and reduction (ops/heads.h): repeat_heads copies each row of the [rows, dim] matrix into
// every head of the [rows, heads, dim] view (element bits unchanged); sum_heads adds the heads of each row in
// increasing h, starting from head 0's value, in the compute type and rounds once to the storage type. Rows are
// split across OpenMP threads; each element's sum has one fixed order, so results do not depend on threads.
#include <algorithm>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/heads.h"

namespace fp8train::ops::cpu {
namespace {

template <class S>
void repeat_heads_impl(const HeadsProblem& p, const S* src, S* dst) {
#pragma omp parallel for schedule(static) if (p.rows * p.heads * p.dim > 16384)
  for (int64_t t = 0; t < p.rows; ++t) {
    const S* s = src + t * p.ld_mat;
    for (int64_t h = 0; h < p.heads; ++h) std::copy(s, s + p.dim, dst + t * p.ld_heads + h * p.head_stride);
  }
}

template <class S, class T = compute_t<S>>
void sum_heads_impl(const HeadsProblem& p, const S* src, S* dst) {
#pragma omp parallel if (p.rows * p.heads * p.dim > 16384)
  {
    std::vector<T> acc(static_cast<size_t>(p.dim));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < p.rows; ++t) {
      const S* s = src + t * p.ld_heads;
      for (int64_t c = 0; c < p.dim; ++c) acc[c] = load(s[c]);
      for (int64_t h = 1; h < p.heads; ++h) {
        const S* sh = s + h * p.head_stride;
        for (int64_t c = 0; c < p.dim; ++c) acc[c] += load(sh[c]);
      }
      S* d = dst + t * p.ld_mat;
      for (int64_t c = 0; c < p.dim; ++c) d[c] = store<S>(acc[c]);
    }
  }
}

}  // namespace

void repeat_heads(const ExecCtx&, const HeadsProblem& p, const void* src, void* dst) {
  dispatch_storage(p.dtype, "repeat_heads", [&](auto tag) {
    using S = decltype(tag);
    repeat_heads_impl<S>(p, static_cast<const S*>(src), static_cast<S*>(dst));
  });
}

void sum_heads(const ExecCtx&, const HeadsProblem& p, const void* src, void* dst) {
  dispatch_storage(p.dtype, "sum_heads", [&](auto tag) {
    using S = decltype(tag);
    sum_heads_impl<S>(p, static_cast<const S*>(src), static_cast<S*>(dst));
  });
}

}  // namespace fp8train::ops::cpu
