// CPU embedding lookup and its backward (scatter-add into the table). The backward splits the table's columns
// over threads and walks the tokens in order inside each, so repeated ids add up in a fixed order.
// The table (and its gradient) is in the compute type C; token rows in the storage type S.
#include <algorithm>

#include "common/error.h"
#include "ops/cpu/kernels.h"
#include "ops/embedding.h"

namespace fp8train::ops::cpu {
namespace {

void check_ids(const EmbeddingProblem& p, const int32_t* ids) {
  for (int64_t t = 0; t < p.tokens; ++t)
    FP8T_CHECK(ids[t] >= 0 && ids[t] < p.vocab, "embedding: token id {} at position {} is outside [0, {})", ids[t], t,
               p.vocab);
}

template <class S, class T = compute_t<S>>
void forward_impl(const EmbeddingProblem& p, const int32_t* ids, const T* table, S* out) {
#pragma omp parallel for schedule(static) if (p.tokens * p.dim > 32768)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const T* src = table + ids[t] * p.dim;
    S* dst = out + t * p.ld_out;
    for (int64_t c = 0; c < p.dim; ++c) dst[c] = store<S>(src[c]);
  }
}

template <class S, class T = compute_t<S>>
void backward_impl(const EmbeddingProblem& p, const int32_t* ids, const S* dout, T* dtable) {
  constexpr int64_t kCols = 32;
  const int64_t blocks = (p.dim + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (p.tokens * p.dim > 32768)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kCols, c1 = std::min(p.dim, c0 + kCols);
    for (int64_t t = 0; t < p.tokens; ++t) {
      T* dst = dtable + ids[t] * p.dim;
      const S* src = dout + t * p.ld_out;
      for (int64_t c = c0; c < c1; ++c) dst[c] += load(src[c]);
    }
  }
}

}  // namespace

void embedding_forward(const ExecCtx&, const EmbeddingProblem& p, const int32_t* ids, const void* table, void* out) {
  check_ids(p, ids);
  dispatch_storage(p.dtype, "embedding_forward", [&](auto tag) {
    using S = decltype(tag);
    forward_impl<S>(p, ids, static_cast<const compute_t<S>*>(table), static_cast<S*>(out));
  });
}

void embedding_backward(const ExecCtx&, const EmbeddingProblem& p, const int32_t* ids, const void* dout, void* dtable) {
  check_ids(p, ids);
  dispatch_storage(p.dtype, "embedding_backward", [&](auto tag) {
    using S = decltype(tag);
    backward_impl<S>(p, ids, static_cast<const S*>(dout), static_cast<compute_t<S>*>(dtable));
  });
}

}  // namespace fp8train::ops::cpu
