// CPU cross-entropy + top-k distillation fused with the head's softmax (see ops/distill.h): per row, the student's
// logsumexp once, the cross-entropy and the KL to the teacher's top-k distribution, and with gradients the row's
// gradient built in the compute type and stored once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "ops/cpu/kernels.h"
#include "ops/distill.h"

namespace fp8train::ops::cpu {
namespace {

template <class T, class C>
void distill_impl(const DistillProblem& p, T* logits, const int32_t* targets, const int32_t* ids, const float* probs,
                  double* row_ce, double* row_kl) {
  const C gscale = static_cast<C>(p.grad_scale), w = static_cast<C>(p.weight);
#pragma omp parallel for schedule(static) if (p.rows * p.vocab > 16384)
  for (int64_t r = 0; r < p.rows; ++r) {
    T* z = logits + r * p.ld;
    const int32_t target = targets[r];
    if (target < 0) {
      row_ce[r] = 0.0;
      row_kl[r] = 0.0;
      if (p.compute_grad) std::fill_n(z, p.vocab, T(C(0)));
      continue;
    }
    const C lse = row_logsumexp<C>(z, p.vocab);
    row_ce[r] = static_cast<double>(lse) - static_cast<double>(static_cast<C>(z[target]));
    const int32_t* id = ids + r * p.k;
    const float* pr = probs + r * p.k;
    double kl = 0.0;
    C mass = 0;
    for (int64_t j = 0; j < p.k; ++j) {
      if (pr[j] <= 0.0f) continue;
      const double pj = pr[j];
      kl += pj * (std::log(pj) - (static_cast<double>(static_cast<C>(z[id[j]])) - static_cast<double>(lse)));
      mass += static_cast<C>(pr[j]);
    }
    row_kl[r] = kl;
    if (!p.compute_grad) continue;
    std::vector<C> g(static_cast<size_t>(p.vocab));
    const C soft = gscale * (C(1) + w * mass);
    for (int64_t c = 0; c < p.vocab; ++c) g[static_cast<size_t>(c)] = soft * std::exp(static_cast<C>(z[c]) - lse);
    g[static_cast<size_t>(target)] -= gscale;
    for (int64_t j = 0; j < p.k; ++j) g[static_cast<size_t>(id[j])] -= gscale * w * static_cast<C>(pr[j]);
    for (int64_t c = 0; c < p.vocab; ++c) z[c] = T(g[static_cast<size_t>(c)]);
  }
}

}  // namespace

void cross_entropy_distill(const ExecCtx&, const DistillProblem& p, void* logits, const int32_t* targets,
                           const int32_t* ids, const float* probs, double* row_ce, double* row_kl) {
  for (int64_t r = 0; r < p.rows; ++r) {
    FP8T_CHECK(targets[r] >= -1 && targets[r] < p.vocab,
               "cross_entropy_distill: target {} at row {} is outside [-1, {})", targets[r], r, p.vocab);
    for (int64_t j = 0; j < p.k; ++j) {
      const int32_t id = ids[r * p.k + j];
      const float pj = probs[r * p.k + j];
      FP8T_CHECK(id >= 0 && id < p.vocab, "cross_entropy_distill: teacher token {} at row {} is outside [0, {})", id, r,
                 p.vocab);
      FP8T_CHECK(std::isfinite(pj) && pj >= 0.0f,
                 "cross_entropy_distill: teacher probability {} at row {} is not a finite non-negative number", pj, r);
    }
  }
  if (p.dtype == DType::F32) {
    distill_impl<float, float>(p, static_cast<float*>(logits), targets, ids, probs, row_ce, row_kl);
  } else if (p.dtype == DType::F64) {
    distill_impl<double, double>(p, static_cast<double*>(logits), targets, ids, probs, row_ce, row_kl);
  } else if (p.dtype == DType::BF16) {
    distill_impl<bf16, float>(p, static_cast<bf16*>(logits), targets, ids, probs, row_ce, row_kl);
  } else {
    throw_unsupported_dtype(p.dtype, "cross_entropy_distill");
  }
}

}  // namespace fp8train::ops::cpu
