// CPU cross-entropy fused with the head's softmax: per row, loss = logsumexp(z) − z[target] (returned per row
// in double) and, when asked, z ← grad_scale·(softmax(z) − onehot(target)) in place, so the logits
// buffer becomes the logits gradient without a second pass or a second [rows, vocab] buffer. Logits F32, F64 or
// BF16 (computed in FP32, gradients rounded once to BF16).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/error.h"
#include "ops/cpu/kernels.h"
#include "ops/cross_entropy.h"

namespace fp8train::ops::cpu {
namespace {

// T: the logits' storage type, C: the compute type (float for float and bf16, double for double). The F32 and F64
// forms round each gradient twice (grad_scale·softmax, then − grad_scale at the target) as they always have; BF16
// stores each gradient once, rounded from C.
template <class T, class C>
void ce_impl(const CrossEntropyProblem& p, T* logits, const int32_t* targets, double* row_loss) {
  const C gscale = static_cast<C>(p.grad_scale);
#pragma omp parallel for schedule(static) if (p.rows * p.vocab > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    T* z = logits + r * p.ld;
    const int32_t target = targets[r];
    if (target < 0) {
      row_loss[r] = 0.0;
      if (p.compute_grad) std::fill_n(z, p.vocab, T(C(0)));
      continue;
    }
    const C lse = row_logsumexp<C>(z, p.vocab);
    const C zt = static_cast<C>(z[target]);
    row_loss[r] = static_cast<double>(lse) - static_cast<double>(zt);
    if (p.compute_grad) {
      for (int64_t c = 0; c < p.vocab; ++c) z[c] = T(gscale * std::exp(static_cast<C>(z[c]) - lse));
      if constexpr (std::is_same_v<T, C>) {
        z[target] -= gscale;
      } else {
        const C g = gscale * std::exp(zt - lse);
        z[target] = T(g - gscale);
      }
    }
  }
}

}  // namespace

void cross_entropy(const ExecCtx&, const CrossEntropyProblem& p, void* logits, const int32_t* targets,
                   double* row_loss) {
  for (int64_t r = 0; r < p.rows; ++r)
    FP8T_CHECK(targets[r] >= -1 && targets[r] < p.vocab, "cross_entropy: target {} at row {} is outside [-1, {})",
               targets[r], r, p.vocab);
  if (p.dtype == DType::F32) {
    ce_impl<float, float>(p, static_cast<float*>(logits), targets, row_loss);
  } else if (p.dtype == DType::F64) {
    ce_impl<double, double>(p, static_cast<double*>(logits), targets, row_loss);
  } else if (p.dtype == DType::BF16) {
    ce_impl<bf16, float>(p, static_cast<bf16*>(logits), targets, row_loss);
  } else {
    throw_unsupported_dtype(p.dtype, "cross_entropy");
  }
}

}  // namespace fp8train::ops::cpu
