// CPU DeepSeekMoE router and sequence-wise balance loss (formulas in ops/router.h).
// Selection per token: score s_e = sigmoid(logit_e); selection key s_e + b_e (bias for selection only);
// with n_group > 1 the experts form n_group equal groups, a group's key is the sum of its two largest keys,
// the topk_group best groups are kept and the top_k experts are chosen inside them. Ties go to the lower index,
// and the selected experts are listed by descending key. Gates g = s_sel / Σ s_sel × routed_scaling_factor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/router.h"

namespace fp8train::ops::cpu {
namespace {

// Indices of the `count` largest keys among `candidates` (ties: lower index first), in descending key order.
template <class T>
void top_indices(const T* key, std::vector<int32_t>& candidates, int64_t count) {
  std::partial_sort(candidates.begin(), candidates.begin() + count, candidates.end(), [key](int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
  });
  candidates.resize(static_cast<size_t>(count));
}

template <class T>
void forward_impl(const RouterProblem& p, const T* logits, const float* bias, T* scores, int32_t* selected, T* gates) {
  const int64_t E = p.n_experts, K = p.top_k;
  const int64_t group_size = E / p.n_group;
#pragma omp parallel if (p.tokens * E > 16384)
  {
    std::vector<T> key(static_cast<size_t>(E)), group_key(static_cast<size_t>(p.n_group));
    std::vector<int32_t> cand, groups;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < p.tokens; ++t) {
      const T* lt = logits + t * E;
      T* st = scores + t * E;
      for (int64_t e = 0; e < E; ++e) {
        st[e] = T(1) / (T(1) + std::exp(-lt[e]));  // s_{i,t} = sigmoid(u_t · e_i)
        key[e] = st[e] + static_cast<T>(bias[e]);    // the bias b_i steers selection only
      }
      cand.clear();
      if (p.n_group > 1) {
        // group-limited routing: group key = sum of its top-2 keys; keep the topk_group best groups
        for (int64_t g = 0; g < p.n_group; ++g) {
          T best = -std::numeric_limits<T>::infinity(), second = -std::numeric_limits<T>::infinity();
          for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) {
            if (key[e] > best) {
              second = best;
              best = key[e];
            } else if (key[e] > second) {
              second = key[e];
            }
          }
          group_key[g] = group_size >= 2 ? best + second : best;
        }
        groups.resize(static_cast<size_t>(p.n_group));
        std::iota(groups.begin(), groups.end(), 0);
        top_indices(group_key.data(), groups, p.topk_group);
        for (int32_t g : groups)
          for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) cand.push_back(static_cast<int32_t>(e));
      } else {
        cand.resize(static_cast<size_t>(E));
        std::iota(cand.begin(), cand.end(), 0);
      }
      top_indices(key.data(), cand, K);
      T sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += st[cand[k]];
      const T factor = static_cast<T>(p.routed_scaling_factor) / sum;
      for (int64_t k = 0; k < K; ++k) {
        selected[t * K + k] = cand[k];
        gates[t * K + k] = st[cand[k]] * factor;  // g_i = s_i / Σ_selected s_j × routed_scaling_factor
      }
    }
  }
}

// g_k = r·s_k/S with S = Σ_sel s_j:  ∂L/∂s_j = r/S·(dg_j − Σ_k dg_k·s_k/S) for selected j;
// then ∂L/∂logit = ∂L/∂s · s(1 − s).
template <class T>
void backward_impl(const RouterProblem& p, const T* scores, const int32_t* selected, const T* dgates,
                   const T* dscores_extra, T* dlogits) {
  const int64_t E = p.n_experts, K = p.top_k;
  const T r = static_cast<T>(p.routed_scaling_factor);
#pragma omp parallel for schedule(static) if (p.tokens * E > 16384)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const T* st = scores + t * E;
    T* dl = dlogits + t * E;
    for (int64_t e = 0; e < E; ++e) dl[e] = dscores_extra ? dscores_extra[t * E + e] : T(0);
    T sum = 0, weighted = 0;
    for (int64_t k = 0; k < K; ++k) {
      const T s = st[selected[t * K + k]];
      sum += s;
      weighted += dgates[t * K + k] * s;
    }
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = selected[t * K + k];
      dl[e] += r / sum * (dgates[t * K + k] - weighted / sum);
    }
    for (int64_t e = 0; e < E; ++e) dl[e] *= st[e] * (T(1) - st[e]);
  }
}

// Per sequence: f_i = N_r/(K_r·T)·Σ_t 1(i selected at t);  P_i = (1/T)·Σ_t s_{i,t}/Σ_j s_{j,t};
// L = α·Σ_i f_i·P_i, averaged over the sequences of the batch.
template <class T>
std::vector<double> frequencies(const BalanceLossProblem& p, const int32_t* selected, int64_t b) {
  std::vector<double> f(static_cast<size_t>(p.n_experts), 0.0);
  for (int64_t t = b * p.seq; t < (b + 1) * p.seq; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) f[selected[t * p.top_k + k]] += 1.0;
  const double norm = static_cast<double>(p.n_experts) / static_cast<double>(p.top_k * p.seq);
  for (double& x : f) x *= norm;
  return f;
}

template <class T>
double balance_forward_impl(const BalanceLossProblem& p, const T* scores, const int32_t* selected) {
  const int64_t E = p.n_experts;
  std::vector<double> per_sequence(static_cast<size_t>(p.batch));
#pragma omp parallel for schedule(static) if (p.batch > 1 && p.batch * p.seq * p.n_experts > 16384)
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::vector<double> f = frequencies<T>(p, selected, b);
    std::vector<double> P(static_cast<size_t>(E), 0.0);
    for (int64_t t = b * p.seq; t < (b + 1) * p.seq; ++t) {
      double total = 0;
      for (int64_t e = 0; e < E; ++e) total += scores[t * E + e];
      for (int64_t e = 0; e < E; ++e) P[e] += scores[t * E + e] / total;
    }
    double l = 0;
    for (int64_t e = 0; e < E; ++e) l += f[e] * P[e] / static_cast<double>(p.seq);
    per_sequence[b] = p.alpha * l;
  }
  double loss = 0;
  for (double l : per_sequence) loss += l;
  return loss / static_cast<double>(p.batch);
}

// ∂L/∂s_{i,t} = dloss·α/(B·T)·(f_i/S_t − Σ_j f_j·s_{j,t}/S_t²), S_t = Σ_j s_{j,t}  (f is a count: no gradient)
template <class T>
void balance_backward_impl(const BalanceLossProblem& p, const T* scores, const int32_t* selected, double dloss,
                           T* dscores) {
  const int64_t E = p.n_experts;
  const double c = dloss * p.alpha / static_cast<double>(p.batch * p.seq);
#pragma omp parallel for schedule(static) if (p.batch > 1 && p.batch * p.seq * p.n_experts > 16384)
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::vector<double> f = frequencies<T>(p, selected, b);
    for (int64_t t = b * p.seq; t < (b + 1) * p.seq; ++t) {
      const T* st = scores + t * E;
      double total = 0, fs = 0;
      for (int64_t e = 0; e < E; ++e) {
        total += st[e];
        fs += f[e] * st[e];
      }
      for (int64_t e = 0; e < E; ++e) dscores[t * E + e] += static_cast<T>(c * (f[e] / total - fs / (total * total)));
    }
  }
}

}  // namespace

void router_forward(const ExecCtx&, const RouterProblem& p, const void* logits, const float* bias, void* scores,
                    int32_t* selected, void* gates, int32_t* expert_counts) {
  dispatch_float(p.dtype, "router_forward", [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(p, static_cast<const T*>(logits), bias, static_cast<T*>(scores), selected, static_cast<T*>(gates));
  });
  if (expert_counts) {
    std::fill_n(expert_counts, p.n_experts, 0);
    for (int64_t i = 0; i < p.tokens * p.top_k; ++i) ++expert_counts[selected[i]];
  }
}

void router_backward(const ExecCtx&, const RouterProblem& p, const void* scores, const int32_t* selected,
                     const void* dgates, const void* dscores_extra, void* dlogits) {
  dispatch_float(p.dtype, "router_backward", [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(p, static_cast<const T*>(scores), selected, static_cast<const T*>(dgates),
                     static_cast<const T*>(dscores_extra), static_cast<T*>(dlogits));
  });
}

double balance_loss_forward(const ExecCtx&, const BalanceLossProblem& p, const void* scores, const int32_t* selected) {
  double loss = 0;
  dispatch_float(p.dtype, "balance_loss_forward", [&](auto tag) {
    using T = decltype(tag);
    loss = balance_forward_impl<T>(p, static_cast<const T*>(scores), selected);
  });
  return loss;
}

void balance_loss_backward(const ExecCtx&, const BalanceLossProblem& p, const void* scores, const int32_t* selected,
                           double dloss, void* dscores) {
  dispatch_float(p.dtype, "balance_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    balance_backward_impl<T>(p, static_cast<const T*>(scores), selected, dloss, static_cast<T*>(dscores));
  });
}

}  // namespace fp8train::ops::cpu
