// CPU cross-entropy fused with the head's softmax: per row, loss = logsumexp(z) − z[target] (returned per row
// in double) and, when asked, z ← grad_scale·(softmax(z) − onehot(target)) in place, so the logits
// buffer becomes the logits gradient without a second pass or a second [rows, vocab] buffer.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "ops/cpu/kernels.h"
#include "ops/cross_entropy.h"

namespace fp8train::ops::cpu {
namespace {

template <class T>
void ce_impl(const CrossEntropyProblem& p, T* logits, const int32_t* targets, double* row_loss) {
  const T gscale = static_cast<T>(p.grad_scale);
#pragma omp parallel for schedule(static) if (p.rows * p.vocab > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    T* z = logits + r * p.ld;
    const int32_t target = targets[r];
    if (target < 0) {
      row_loss[r] = 0.0;
      if (p.compute_grad) std::fill_n(z, p.vocab, T(0));
      continue;
    }
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < p.vocab; ++c) mx = std::max(mx, z[c]);
    T sum = 0;
    for (int64_t c = 0; c < p.vocab; ++c) sum += std::exp(z[c] - mx);
    const T lse = mx + std::log(sum);
    row_loss[r] = static_cast<double>(lse) - static_cast<double>(z[target]);
    if (p.compute_grad) {
      for (int64_t c = 0; c < p.vocab; ++c) z[c] = gscale * std::exp(z[c] - lse);
      z[target] -= gscale;
    }
  }
}

}  // namespace

void cross_entropy(const ExecCtx&, const CrossEntropyProblem& p, void* logits, const int32_t* targets,
                   double* row_loss) {
  for (int64_t r = 0; r < p.rows; ++r)
    FP8T_CHECK(targets[r] >= -1 && targets[r] < p.vocab, "cross_entropy: target {} at row {} is outside [-1, {})",
               targets[r], r, p.vocab);
  dispatch_float(p.dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    ce_impl<T>(p, static_cast<T*>(logits), targets, row_loss);
  });
}

}  // namespace fp8train::ops::cpu
