// CPU causal softmax attention, flash-style: per (sequence, head) the queries are processed in blocks of
// kQueryBlock rows; a block's scores against the keys it may see ([rows, key_end], key_end = last query + 1)
// live only in a per-thread workspace. The forward keeps o and the row log-sum-exp lse; the backward recomputes
// P = exp(scale·q·kᵀ − lse) block by block:
//   dP = dO·Vᵀ;  D_i = Σ_d dO_id·O_id;  dS = P∘(dP − D);  dQ = scale·dS·K;  dK += scale·dSᵀ·Q;  dV += Pᵀ·dO.
// (b, h) pairs run in parallel; each pair's blocks run in order, so results do not depend on the thread count.
// The small block GEMMs call single-threaded OpenBLAS (cpu/blas.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attention.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/kernels.h"

namespace fp8train::ops::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;

// Base pointer of (sequence b, head h) for a tensor laid out as HeadsLayout l.
template <class T>
T* head_ptr(T* base, const HeadsLayout& l, int64_t b, int64_t seq, int64_t h) {
  return base + b * seq * l.row_stride + h * l.head_stride;
}

template <class T>
void forward_impl(const AttentionProblem& p, const T* q, const T* k, const T* v, T* o, T* lse) {
  const int64_t tasks = p.batch * p.heads, T_ = p.seq;
  const T scale = static_cast<T>(p.scale);
  // below ~1 MFLOP the thread fork costs more than it saves (and small problems are what gradient checks run)
  const bool parallel = tasks > 1 && tasks * T_ * T_ * (p.qk_dim + p.v_dim) > 1000000;
#pragma omp parallel if (parallel)
  {
    std::vector<T> s(static_cast<size_t>(kQueryBlock * T_));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads, h = task % p.heads;
      const T* qh = head_ptr(q, p.q, b, T_, h);
      const T* kh = head_ptr(k, p.k, b, T_, h);
      const T* vh = head_ptr(v, p.v, b, T_, h);
      T* oh = head_ptr(o, p.o, b, T_, h);
      T* lse_h = lse + (b * p.heads + h) * T_;
      for (int64_t q0 = 0; q0 < T_; q0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T_ - q0), kend = q0 + rows;
        // s = scale·q_blk·k[0:kend]ᵀ, row stride kend
        blas_gemm(false, true, rows, kend, p.qk_dim, scale, qh + q0 * p.q.row_stride, p.q.row_stride, kh,
                  p.k.row_stride, T(0), s.data(), kend);
        for (int64_t i = 0; i < rows; ++i) {
          T* si = s.data() + i * kend;
          const int64_t valid = q0 + i + 1;  // keys 0..q0+i are visible
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, si[j]);
          T sum = 0;
          for (int64_t j = 0; j < valid; ++j) {
            si[j] = std::exp(si[j] - mx);
            sum += si[j];
          }
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < valid; ++j) si[j] *= inv;
          for (int64_t j = valid; j < kend; ++j) si[j] = 0;
          lse_h[q0 + i] = mx + std::log(sum);
        }
        // o_blk = p·v[0:kend]
        blas_gemm(false, false, rows, p.v_dim, kend, T(1), s.data(), kend, vh, p.v.row_stride, T(0),
                  oh + q0 * p.o.row_stride, p.o.row_stride);
      }
    }
  }
}

template <class T>
void backward_impl(const AttentionProblem& p, const T* q, const T* k, const T* v, const T* o, const T* lse,
                   const T* dout, T* dq, T* dk, T* dv) {
  const int64_t tasks = p.batch * p.heads, T_ = p.seq;
  const T scale = static_cast<T>(p.scale);
  const bool parallel = tasks > 1 && tasks * T_ * T_ * (p.qk_dim + p.v_dim) > 500000;
#pragma omp parallel if (parallel)
  {
    std::vector<T> prob(static_cast<size_t>(kQueryBlock * T_)), dprob(prob.size());
    std::vector<T> delta(static_cast<size_t>(kQueryBlock));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads, h = task % p.heads;
      const T* qh = head_ptr(q, p.q, b, T_, h);
      const T* kh = head_ptr(k, p.k, b, T_, h);
      const T* vh = head_ptr(v, p.v, b, T_, h);
      const T* oh = head_ptr(o, p.o, b, T_, h);
      const T* doh = head_ptr(dout, p.dout, b, T_, h);
      T* dqh = head_ptr(dq, p.dq, b, T_, h);
      T* dkh = head_ptr(dk, p.dk, b, T_, h);
      T* dvh = head_ptr(dv, p.dv, b, T_, h);
      const T* lse_h = lse + (b * p.heads + h) * T_;
      for (int64_t t = 0; t < T_; ++t) {
        std::fill_n(dkh + t * p.dk.row_stride, p.qk_dim, T(0));
        std::fill_n(dvh + t * p.dv.row_stride, p.v_dim, T(0));
      }
      for (int64_t q0 = 0; q0 < T_; q0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T_ - q0), kend = q0 + rows;
        const T* qb = qh + q0 * p.q.row_stride;
        const T* dob = doh + q0 * p.dout.row_stride;
        blas_gemm(false, true, rows, kend, p.qk_dim, scale, qb, p.q.row_stride, kh, p.k.row_stride, T(0), prob.data(),
                  kend);
        blas_gemm(false, true, rows, kend, p.v_dim, T(1), dob, p.dout.row_stride, vh, p.v.row_stride, T(0),
                  dprob.data(), kend);
        for (int64_t i = 0; i < rows; ++i) {
          const T* oi = oh + (q0 + i) * p.o.row_stride;
          const T* doi = dob + i * p.dout.row_stride;
          T d = 0;
          for (int64_t c = 0; c < p.v_dim; ++c) d += doi[c] * oi[c];
          delta[i] = d;
        }
        for (int64_t i = 0; i < rows; ++i) {
          T* pi = prob.data() + i * kend;
          T* dpi = dprob.data() + i * kend;
          const int64_t valid = q0 + i + 1;
          const T l = lse_h[q0 + i];
          for (int64_t j = 0; j < valid; ++j) {
            pi[j] = std::exp(pi[j] - l);
            dpi[j] = pi[j] * (dpi[j] - delta[i]);  // dS (without the scale, applied in the GEMMs below)
          }
          for (int64_t j = valid; j < kend; ++j) pi[j] = dpi[j] = 0;
        }
        blas_gemm(false, false, rows, p.qk_dim, kend, scale, dprob.data(), kend, kh, p.k.row_stride, T(0),
                  dqh + q0 * p.dq.row_stride, p.dq.row_stride);
        blas_gemm(true, false, kend, p.qk_dim, rows, scale, dprob.data(), kend, qb, p.q.row_stride, T(1), dkh,
                  p.dk.row_stride);
        blas_gemm(true, false, kend, p.v_dim, rows, T(1), prob.data(), kend, dob, p.dout.row_stride, T(1), dvh,
                  p.dv.row_stride);
      }
    }
  }
}

}  // namespace

void attention_forward(const ExecCtx&, const AttentionProblem& p, const void* q, const void* k, const void* v, void* o,
                       void* lse) {
  cpu_op_table();  // OpenBLAS pinned to one thread before the parallel region calls it
  dispatch_float(p.dtype, "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                    static_cast<T*>(o), static_cast<T*>(lse));
  });
}

void attention_backward(const ExecCtx&, const AttentionProblem& p, const void* q, const void* k, const void* v,
                        const void* o, const void* lse, const void* dout, void* dq, void* dk, void* dv) {
  cpu_op_table();
  dispatch_float(p.dtype, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                     static_cast<const T*>(o), static_cast<const T*>(lse), static_cast<const T*>(dout),
                     static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv));
  });
}

}  // namespace fp8train::ops::cpu
