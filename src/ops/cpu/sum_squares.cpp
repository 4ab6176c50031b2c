// CPU segmented sum of squares (order in ops/sum_squares.h): every (segment, chunk) partial is summed on its own,
// in parallel, into a slot of a partials array; each segment then adds its partials in chunk order. The partition
// into chunks depends only on the bounds, so the bits do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/sum_squares.h"

namespace fp8train::ops::cpu {
namespace {

template <class T>
void sum_squares_impl(const SumSquaresProblem& p, const T* x, const int64_t* bounds, double* out) {
  // first[s]: index of segment s's first chunk in the partials array
  std::vector<int64_t> first(static_cast<size_t>(p.segments) + 1, 0);
  for (int64_t s = 0; s < p.segments; ++s) {
    const int64_t len = bounds[2 * s + 1] - bounds[2 * s];
    first[static_cast<size_t>(s) + 1] = first[static_cast<size_t>(s)] + (len + p.chunk - 1) / p.chunk;
  }
  const int64_t chunks = first.back();
  std::vector<int64_t> segment_of(static_cast<size_t>(chunks));
  for (int64_t s = 0; s < p.segments; ++s)
    std::fill(segment_of.begin() + first[static_cast<size_t>(s)],
              segment_of.begin() + first[static_cast<size_t>(s) + 1], s);
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t s = segment_of[static_cast<size_t>(c)];
    const int64_t b = bounds[2 * s] + (c - first[static_cast<size_t>(s)]) * p.chunk;
    const int64_t e = std::min(bounds[2 * s + 1], b + p.chunk);
    double acc = 0.0;
    for (int64_t i = b; i < e; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[static_cast<size_t>(c)] = acc;
  }
  for (int64_t s = 0; s < p.segments; ++s) {
    double total = 0.0;
    for (int64_t c = first[static_cast<size_t>(s)]; c < first[static_cast<size_t>(s) + 1]; ++c)
      total += partial[static_cast<size_t>(c)];
    out[s] = total;
  }
}

}  // namespace

void sum_squares(const ExecCtx&, const SumSquaresProblem& p, const void* x, const int64_t* bounds, double* out) {
  dispatch_float(p.dtype, "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_squares_impl<T>(p, static_cast<const T*>(x), bounds, out);
  });
}

}  // namespace fp8train::ops::cpu
