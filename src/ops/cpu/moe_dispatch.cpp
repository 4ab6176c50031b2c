// CPU token ↔ expert-slot movement for DeepSeekMoE. The plan lists the N·K (token, choice) pairs grouped by
// expert and, within an expert, by token (a counting sort, so it is deterministic):
//   expert_offsets[e] .. expert_offsets[e+1]  rows of expert e in the expert-ordered matrix
//   slot_token[j]   token of expert-ordered row j;   choice_slot[t·K + k]  row of (token t, its k-th choice)
// permute:   xp[j] = x[slot_token[j]]          backward: dx[t] (+)= Σ_k dxp[choice_slot[t,k]]
// unpermute: y[t] (+)= Σ_k g[t,k]·yp[choice_slot[t,k]]
//            backward: dyp[choice_slot[t,k]] = g[t,k]·dy[t],  dg[t,k] = <dy[t], yp[choice_slot[t,k]]>
// Every output row is written by one thread and sums over k in order: no atomics, no races.
#include <algorithm>
#include <vector>

#include "common/error.h"
#include "ops/cpu/kernels.h"
#include "ops/moe_dispatch.h"

namespace fp8train::ops::cpu {
namespace {

template <class T>
void permute_impl(const MoePermuteProblem& p, const T* x, const int32_t* slot_token, T* xp) {
  const int64_t n = p.tokens * p.top_k;
#pragma omp parallel for schedule(static) if (n * p.dim > 32768)
  for (int64_t j = 0; j < n; ++j) std::copy_n(x + slot_token[j] * p.ld_x, p.dim, xp + j * p.ld_xp);
}

template <class T>
void permute_backward_impl(const MoePermuteProblem& p, const T* dxp, const int32_t* choice_slot, T* dx) {
#pragma omp parallel for schedule(static) if (p.tokens * p.dim > 32768)
  for (int64_t t = 0; t < p.tokens; ++t) {
    T* d = dx + t * p.ld_x;
    if (!p.accumulate) std::fill_n(d, p.dim, T(0));
    for (int64_t k = 0; k < p.top_k; ++k) {
      const T* s = dxp + choice_slot[t * p.top_k + k] * p.ld_xp;
      for (int64_t c = 0; c < p.dim; ++c) d[c] += s[c];
    }
  }
}

template <class T>
void unpermute_impl(const MoePermuteProblem& p, const T* yp, const int32_t* choice_slot, const T* gates, T* y) {
#pragma omp parallel for schedule(static) if (p.tokens * p.dim > 32768)
  for (int64_t t = 0; t < p.tokens; ++t) {
    T* d = y + t * p.ld_x;
    if (!p.accumulate) std::fill_n(d, p.dim, T(0));
    for (int64_t k = 0; k < p.top_k; ++k) {
      const T g = gates[t * p.top_k + k];
      const T* s = yp + choice_slot[t * p.top_k + k] * p.ld_xp;
      for (int64_t c = 0; c < p.dim; ++c) d[c] += g * s[c];
    }
  }
}

template <class T>
void unpermute_backward_impl(const MoePermuteProblem& p, const T* dy, const T* yp, const int32_t* choice_slot,
                             const T* gates, T* dyp, T* dgates) {
#pragma omp parallel for schedule(static) if (p.tokens * p.dim > 32768)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const T* d = dy + t * p.ld_x;
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int64_t j = choice_slot[t * p.top_k + k];
      const T g = gates[t * p.top_k + k];
      const T* y = yp + j * p.ld_xp;
      T* dst = dyp + j * p.ld_xp;
      T dot = 0;
      for (int64_t c = 0; c < p.dim; ++c) {
        dot += d[c] * y[c];
        dst[c] = g * d[c];
      }
      dgates[t * p.top_k + k] = dot;
    }
  }
}

}  // namespace

void moe_build_plan(const ExecCtx&, const MoePlanProblem& p, const int32_t* selected, int32_t* expert_offsets,
                    int32_t* slot_token, int32_t* choice_slot) {
  const int64_t n = p.tokens * p.top_k;
  std::vector<int32_t> counts(static_cast<size_t>(p.n_experts), 0);
  for (int64_t i = 0; i < n; ++i) {
    FP8T_CHECK(selected[i] >= 0 && selected[i] < p.n_experts, "moe plan: expert index {} outside [0, {})",
               selected[i], p.n_experts);
    ++counts[selected[i]];
  }
  expert_offsets[0] = 0;
  for (int64_t e = 0; e < p.n_experts; ++e) expert_offsets[e + 1] = expert_offsets[e] + counts[e];
  std::vector<int32_t> cursor(expert_offsets, expert_offsets + p.n_experts);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int32_t j = cursor[selected[t * p.top_k + k]]++;
      slot_token[j] = static_cast<int32_t>(t);
      choice_slot[t * p.top_k + k] = j;
    }
}

void moe_permute(const ExecCtx&, const MoePermuteProblem& p, const void* x, const int32_t* slot_token, void* xp) {
  dispatch_float(p.dtype, "moe_permute", [&](auto tag) {
    using T = decltype(tag);
    permute_impl<T>(p, static_cast<const T*>(x), slot_token, static_cast<T*>(xp));
  });
}

void moe_permute_backward(const ExecCtx&, const MoePermuteProblem& p, const void* dxp, const int32_t* choice_slot,
                          void* dx) {
  dispatch_float(p.dtype, "moe_permute_backward", [&](auto tag) {
    using T = decltype(tag);
    permute_backward_impl<T>(p, static_cast<const T*>(dxp), choice_slot, static_cast<T*>(dx));
  });
}

void moe_unpermute(const ExecCtx&, const MoePermuteProblem& p, const void* yp, const int32_t* choice_slot,
                   const void* gates, void* y) {
  dispatch_float(p.dtype, "moe_unpermute", [&](auto tag) {
    using T = decltype(tag);
    unpermute_impl<T>(p, static_cast<const T*>(yp), choice_slot, static_cast<const T*>(gates), static_cast<T*>(y));
  });
}

void moe_unpermute_backward(const ExecCtx&, const MoePermuteProblem& p, const void* dy, const void* yp,
                            const int32_t* choice_slot, const void* gates, void* dyp, void* dgates) {
  dispatch_float(p.dtype, "moe_unpermute_backward", [&](auto tag) {
    using T = decltype(tag);
    unpermute_backward_impl<T>(p, static_cast<const T*>(dy), static_cast<const T*>(yp), choice_slot,
                               static_cast<const T*>(gates), static_cast<T*>(dyp), static_cast<T*>(dgates));
  });
}

}  // namespace fp8train::ops::cpu
