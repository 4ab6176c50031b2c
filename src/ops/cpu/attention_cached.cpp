// CPU cached multi-query attention (ops/attention_cached.h): the keys and values are widened once per call into
// FP32 (FP64 for f64) rows; then every (new token, head) pair runs in parallel: scores against the keys it may
// see (one BLAS GEMV), a max-subtracted softmax in a fixed order, and o = p·v (one GEMV), rounded once. No pair
// depends on another, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attention_cached.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/kernels.h"

namespace fp8train::ops::cpu {
namespace {

// A [rows, cols] matrix of storage type S (row stride ld) as compute-type rows (contiguous).
template <class S, class T = compute_t<S>>
std::vector<T> widen(const S* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = load(x[r * ld + c]);
  return out;
}

template <class S, class T = compute_t<S>>
void attention_cached_impl(const AttentionCachedProblem& p, const S* q, const S* k, const S* v, S* o) {
  const std::vector<T> kw = widen(k, p.keys, p.qk_dim, p.ld_k), vw = widen(v, p.keys, p.v_dim, p.ld_v);
  const int64_t first = p.keys - p.queries;  // position of the first new token
  const int64_t pairs = p.queries * p.heads;
#pragma omp parallel if (pairs * p.keys * (p.qk_dim + p.v_dim) > 32768)
  {
    std::vector<T> qrow(static_cast<size_t>(p.qk_dim)), s(static_cast<size_t>(p.keys)),
        orow(static_cast<size_t>(p.v_dim));
#pragma omp for schedule(static)
    for (int64_t idx = 0; idx < pairs; ++idx) {
      const int64_t j = idx / p.heads, h = idx % p.heads;
      const int64_t visible = first + j + 1;
      const S* qh = q + j * p.q_row + h * p.q_head;
      for (int64_t c = 0; c < p.qk_dim; ++c) qrow[static_cast<size_t>(c)] = load(qh[c]);
      // s = scale·k[0:visible]·q
      blas_gemm(false, true, visible, 1, p.qk_dim, static_cast<T>(p.scale), kw.data(), p.qk_dim, qrow.data(), p.qk_dim,
                T(0), s.data(), 1);
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t t = 0; t < visible; ++t) mx = std::max(mx, s[static_cast<size_t>(t)]);
      T sum = 0;
      for (int64_t t = 0; t < visible; ++t) sum += s[static_cast<size_t>(t)] = std::exp(s[static_cast<size_t>(t)] - mx);
      const T inv = T(1) / sum;
      for (int64_t t = 0; t < visible; ++t) s[static_cast<size_t>(t)] *= inv;
      // o = pᵀ·v[0:visible]
      blas_gemm(true, false, 1, p.v_dim, visible, T(1), s.data(), 1, vw.data(), p.v_dim, T(0), orow.data(), p.v_dim);
      S* oh = o + j * p.o_row + h * p.o_head;
      for (int64_t c = 0; c < p.v_dim; ++c) oh[c] = store<S>(orow[static_cast<size_t>(c)]);
    }
  }
}

}  // namespace

void attention_cached(const ExecCtx&, const AttentionCachedProblem& p, const void* q, const void* k, const void* v,
                      void* o) {
  dispatch_storage(p.dtype, "attention_cached", [&](auto tag) {
    using S = decltype(tag);
    attention_cached_impl<S>(p, static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v),
                             static_cast<S*>(o));
  });
}

}  // namespace fp8train::ops::cpu
