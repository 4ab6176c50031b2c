// CPU token ↔ expert-slot movement for DeepSeekMoE. The plan lists the N·K (token, choice) pairs grouped by
// expert and, within an expert, by token (a counting sort, so it is deterministic):
//   expert_offsets[e] .. expert_offsets[e+1]  rows of expert e (its tokens, then padding to a multiple of align)
//   slot_token[j]   token of expert-ordered row j (−1: padding);   choice_slot[t·K + k]  row of (token t, choice k)
// permute:   xp[j] = x[slot_token[j]] (zeros for padding)     backward: dx[t] (+)= Σ_k dxp[choice_slot[t,k]]
// unpermute: y[t] (+)= Σ_k g[t,k]·yp[choice_slot[t,k]]
//            backward: dyp[choice_slot[t,k]] = g[t,k]·dy[t],  dg[t,k] = <dy[t], yp[choice_slot[t,k]]>
// Every output row is written by one thread and sums over k in order: no atomics, no races. Rows are in the
// storage type S; gates and their gradients in its compute type.
#include <algorithm>
#include <vector>

#include "common/error.h"
#include "ops/cpu/kernels.h"
#include "ops/moe_dispatch.h"

namespace fp8train::ops::cpu {
namespace {

template <class S>
void permute_impl(const MoePermuteProblem& p, const S* x, const int32_t* slot_token, S* xp) {
#pragma omp parallel for schedule(static) if (p.rows * p.dim > 32768)
  for (int64_t j = 0; j < p.rows; ++j) {
    if (slot_token[j] >= 0) {
      std::copy_n(x + slot_token[j] * p.ld_x, p.dim, xp + j * p.ld_xp);
    } else {
      std::fill_n(xp + j * p.ld_xp, p.dim, S{});  // padding: zero bits in every storage type
    }
  }
}

// Runs body(acc) for token row t with acc a compute-type view of dst's row: dst itself when the storage type
// is the compute type, else a widened copy (or zeros) that is rounded back into dst afterwards. So every
// element is a sum in the compute type, over k in order, rounded once.
template <class S, class T = compute_t<S>, class Body>
void with_row_accumulator(S* dst, int64_t dim, bool accumulate, std::vector<T>& scratch, Body&& body) {
  if constexpr (std::is_same_v<S, T>) {
    if (!accumulate) std::fill_n(dst, dim, T(0));
    body(dst);
  } else {
    scratch.resize(static_cast<size_t>(dim));
    for (int64_t c = 0; c < dim; ++c) scratch[c] = accumulate ? load(dst[c]) : T(0);
    body(scratch.data());
    for (int64_t c = 0; c < dim; ++c) dst[c] = store<S>(scratch[c]);
  }
}

template <class S, class T = compute_t<S>>
void permute_backward_impl(const MoePermuteProblem& p, const S* dxp, const int32_t* choice_slot, S* dx) {
#pragma omp parallel if (p.tokens * p.dim > 32768)
  {
    std::vector<T> scratch;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < p.tokens; ++t) {
      with_row_accumulator(dx + t * p.ld_x, p.dim, p.accumulate, scratch, [&](T* d) {
        for (int64_t k = 0; k < p.top_k; ++k) {
          const S* s = dxp + choice_slot[t * p.top_k + k] * p.ld_xp;
          for (int64_t c = 0; c < p.dim; ++c) d[c] += load(s[c]);
        }
      });
    }
  }
}

template <class S, class T = compute_t<S>>
void unpermute_impl(const MoePermuteProblem& p, const S* yp, const int32_t* choice_slot, const T* gates, S* y) {
#pragma omp parallel if (p.tokens * p.dim > 32768)
  {
    std::vector<T> scratch;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < p.tokens; ++t) {
      with_row_accumulator(y + t * p.ld_x, p.dim, p.accumulate, scratch, [&](T* d) {
        for (int64_t k = 0; k < p.top_k; ++k) {
          const T g = gates[t * p.top_k + k];
          const S* s = yp + choice_slot[t * p.top_k + k] * p.ld_xp;
          for (int64_t c = 0; c < p.dim; ++c) d[c] += g * load(s[c]);
        }
      });
    }
  }
}

template <class S, class T = compute_t<S>>
void unpermute_backward_impl(const MoePermuteProblem& p, const S* dy, const S* yp, const int32_t* choice_slot,
                             const T* gates, S* dyp, T* dgates) {
#pragma omp parallel for schedule(static) if (p.tokens * p.dim > 32768)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const S* d = dy + t * p.ld_x;
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int64_t j = choice_slot[t * p.top_k + k];
      const T g = gates[t * p.top_k + k];
      const S* y = yp + j * p.ld_xp;
      S* dst = dyp + j * p.ld_xp;
      T dot = 0;
      for (int64_t c = 0; c < p.dim; ++c) {
        const T dc = load(d[c]);
        dot += dc * load(y[c]);
        dst[c] = store<S>(g * dc);
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
  for (int64_t e = 0; e < p.n_experts; ++e)
    expert_offsets[e + 1] = expert_offsets[e] + static_cast<int32_t>((counts[e] + p.align - 1) / p.align * p.align);
  std::fill_n(slot_token, p.rows, -1);
  std::vector<int32_t> cursor(expert_offsets, expert_offsets + p.n_experts);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int32_t j = cursor[selected[t * p.top_k + k]]++;
      slot_token[j] = static_cast<int32_t>(t);
      choice_slot[t * p.top_k + k] = j;
    }
}

void moe_permute(const ExecCtx&, const MoePermuteProblem& p, const void* x, const int32_t* slot_token, void* xp) {
  dispatch_storage(p.dtype, "moe_permute", [&](auto tag) {
    using S = decltype(tag);
    permute_impl<S>(p, static_cast<const S*>(x), slot_token, static_cast<S*>(xp));
  });
}

void moe_permute_backward(const ExecCtx&, const MoePermuteProblem& p, const void* dxp, const int32_t* choice_slot,
                          void* dx) {
  dispatch_storage(p.dtype, "moe_permute_backward", [&](auto tag) {
    using S = decltype(tag);
    permute_backward_impl<S>(p, static_cast<const S*>(dxp), choice_slot, static_cast<S*>(dx));
  });
}

void moe_unpermute(const ExecCtx&, const MoePermuteProblem& p, const void* yp, const int32_t* choice_slot,
                   const void* gates, void* y) {
  dispatch_storage(p.dtype, "moe_unpermute", [&](auto tag) {
    using S = decltype(tag);
    using T = compute_t<S>;
    unpermute_impl<S>(p, static_cast<const S*>(yp), choice_slot, static_cast<const T*>(gates), static_cast<S*>(y));
  });
}

void moe_unpermute_backward(const ExecCtx&, const MoePermuteProblem& p, const void* dy, const void* yp,
                            const int32_t* choice_slot, const void* gates, void* dyp, void* dgates) {
  dispatch_storage(p.dtype, "moe_unpermute_backward", [&](auto tag) {
    using S = decltype(tag);
    using T = compute_t<S>;
    unpermute_backward_impl<S>(p, static_cast<const S*>(dy), static_cast<const S*>(yp), choice_slot,
                               static_cast<const T*>(gates), static_cast<S*>(dyp), static_cast<T*>(dgates));
  });
}

}  // namespace fp8train::ops::cpu
