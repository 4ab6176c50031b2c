// CPU causal softmax attention, flash-style: per (sequence, head) the queries are processed in blocks of
// kQueryBlock rows; a block's scores against the keys it may see ([rows, key_end], key_end = last query + 1)
// live only in a per-thread workspace. The forward keeps o and the row log-sum-exp lse; the backward recomputes
// P = exp(scale·q·kᵀ − lse) block by block:
//   dP = dO·Vᵀ;  D_i = Σ_d dO_id·O_id;  dS = P∘(dP − D);  dQ = scale·dS·K;  dK += scale·dSᵀ·Q;  dV += Pᵀ·dO.
// (b, h) pairs run in parallel; each pair's blocks run in order, so results do not depend on the thread count.
// The small block GEMMs call single-threaded OpenBLAS (cpu/blas.h). BF16 q, k, v, o, dO are widened per (sequence,
// head) into FP32 rows, the arithmetic runs in FP32 (lse is FP32), and the outputs are rounded once.
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

// One (sequence, head) of the arithmetic, on compute-type rows: q, k [T_, qk_dim], v, o [T_, v_dim] with the
// given row strides, lse [T_]. s: kQueryBlock·T_ scratch.
template <class T>
void forward_head(const AttentionProblem& p, const T* qh, int64_t q_rs, const T* kh, int64_t k_rs, const T* vh,
                  int64_t v_rs, T* oh, int64_t o_rs, T* lse_h, T* s) {
  const int64_t T_ = p.seq;
  const T scale = static_cast<T>(p.scale);
  for (int64_t q0 = 0; q0 < T_; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, T_ - q0), kend = q0 + rows;
    // s = scale·q_blk·k[0:kend]ᵀ, row stride kend
    blas_gemm(false, true, rows, kend, p.qk_dim, scale, qh + q0 * q_rs, q_rs, kh, k_rs, T(0), s, kend);
    for (int64_t i = 0; i < rows; ++i) {
      T* si = s + i * kend;
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
    blas_gemm(false, false, rows, p.v_dim, kend, T(1), s, kend, vh, v_rs, T(0), oh + q0 * o_rs, o_rs);
  }
}

template <class T>
struct BackwardScratch {
  std::vector<T> prob, dprob, delta;
  explicit BackwardScratch(int64_t seq)
      : prob(static_cast<size_t>(kQueryBlock * seq)), dprob(prob.size()), delta(static_cast<size_t>(kQueryBlock)) {}
};

// One (sequence, head) of the backward on compute-type rows (strides as in forward_head); dk and dv are
// overwritten.
template <class T>
void backward_head(const AttentionProblem& p, const T* qh, int64_t q_rs, const T* kh, int64_t k_rs, const T* vh,
                   int64_t v_rs, const T* oh, int64_t o_rs, const T* lse_h, const T* doh, int64_t do_rs, T* dqh,
                   int64_t dq_rs, T* dkh, int64_t dk_rs, T* dvh, int64_t dv_rs, BackwardScratch<T>& w) {
  const int64_t T_ = p.seq;
  const T scale = static_cast<T>(p.scale);
  for (int64_t t = 0; t < T_; ++t) {
    std::fill_n(dkh + t * dk_rs, p.qk_dim, T(0));
    std::fill_n(dvh + t * dv_rs, p.v_dim, T(0));
  }
  for (int64_t q0 = 0; q0 < T_; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, T_ - q0), kend = q0 + rows;
    const T* qb = qh + q0 * q_rs;
    const T* dob = doh + q0 * do_rs;
    blas_gemm(false, true, rows, kend, p.qk_dim, scale, qb, q_rs, kh, k_rs, T(0), w.prob.data(), kend);
    blas_gemm(false, true, rows, kend, p.v_dim, T(1), dob, do_rs, vh, v_rs, T(0), w.dprob.data(), kend);
    for (int64_t i = 0; i < rows; ++i) {
      const T* oi = oh + (q0 + i) * o_rs;
      const T* doi = dob + i * do_rs;
      T d = 0;
      for (int64_t c = 0; c < p.v_dim; ++c) d += doi[c] * oi[c];
      w.delta[i] = d;
    }
    for (int64_t i = 0; i < rows; ++i) {
      T* pi = w.prob.data() + i * kend;
      T* dpi = w.dprob.data() + i * kend;
      const int64_t valid = q0 + i + 1;
      const T l = lse_h[q0 + i];
      for (int64_t j = 0; j < valid; ++j) {
        pi[j] = std::exp(pi[j] - l);
        dpi[j] = pi[j] * (dpi[j] - w.delta[i]);  // dS (without the scale, applied in the GEMMs below)
      }
      for (int64_t j = valid; j < kend; ++j) pi[j] = dpi[j] = 0;
    }
    blas_gemm(false, false, rows, p.qk_dim, kend, scale, w.dprob.data(), kend, kh, k_rs, T(0), dqh + q0 * dq_rs, dq_rs);
    blas_gemm(true, false, kend, p.qk_dim, rows, scale, w.dprob.data(), kend, qb, q_rs, T(1), dkh, dk_rs);
    blas_gemm(true, false, kend, p.v_dim, rows, T(1), w.prob.data(), kend, dob, do_rs, T(1), dvh, dv_rs);
  }
}

// A head's [seq, dim] rows of a storage-type tensor widened into a contiguous compute-type buffer, and back.
template <class S, class T>
void widen(const S* src, int64_t rs, int64_t seq, int64_t dim, std::vector<T>& dst) {
  dst.resize(static_cast<size_t>(seq * dim));
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t c = 0; c < dim; ++c) dst[t * dim + c] = load(src[t * rs + c]);
}
template <class S, class T>
void narrow_into(const std::vector<T>& src, int64_t seq, int64_t dim, S* dst, int64_t rs) {
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t c = 0; c < dim; ++c) dst[t * rs + c] = store<S>(src[t * dim + c]);
}

template <class S, class T = compute_t<S>>
void forward_impl(const AttentionProblem& p, const S* q, const S* k, const S* v, S* o, T* lse) {
  const int64_t tasks = p.batch * p.heads, T_ = p.seq;
  // below ~1 MFLOP the thread fork costs more than it saves (and small problems are what gradient checks run)
  const bool parallel = tasks > 1 && tasks * T_ * T_ * (p.qk_dim + p.v_dim) > 1000000;
#pragma omp parallel if (parallel)
  {
    std::vector<T> s(static_cast<size_t>(kQueryBlock * T_));
    std::vector<T> qw, kw, vw, ow;  // widened rows of one head (storage types narrower than the compute type)
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads, h = task % p.heads;
      const S* qh = head_ptr(q, p.q, b, T_, h);
      const S* kh = head_ptr(k, p.k, b, T_, h);
      const S* vh = head_ptr(v, p.v, b, T_, h);
      S* oh = head_ptr(o, p.o, b, T_, h);
      T* lse_h = lse + (b * p.heads + h) * T_;
      if constexpr (std::is_same_v<S, T>) {
        forward_head<T>(p, qh, p.q.row_stride, kh, p.k.row_stride, vh, p.v.row_stride, oh, p.o.row_stride, lse_h,
                        s.data());
      } else {
        widen(qh, p.q.row_stride, T_, p.qk_dim, qw);
        widen(kh, p.k.row_stride, T_, p.qk_dim, kw);
        widen(vh, p.v.row_stride, T_, p.v_dim, vw);
        ow.resize(static_cast<size_t>(T_ * p.v_dim));
        forward_head<T>(p, qw.data(), p.qk_dim, kw.data(), p.qk_dim, vw.data(), p.v_dim, ow.data(), p.v_dim, lse_h,
                        s.data());
        narrow_into(ow, T_, p.v_dim, oh, p.o.row_stride);
      }
    }
  }
}

template <class S, class T = compute_t<S>>
void backward_impl(const AttentionProblem& p, const S* q, const S* k, const S* v, const S* o, const T* lse,
                   const S* dout, S* dq, S* dk, S* dv) {
  const int64_t tasks = p.batch * p.heads, T_ = p.seq;
  const bool parallel = tasks > 1 && tasks * T_ * T_ * (p.qk_dim + p.v_dim) > 500000;
#pragma omp parallel if (parallel)
  {
    BackwardScratch<T> w(T_);
    std::vector<T> qw, kw, vw, ow, dow, dqw, dkw, dvw;
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads, h = task % p.heads;
      const S* qh = head_ptr(q, p.q, b, T_, h);
      const S* kh = head_ptr(k, p.k, b, T_, h);
      const S* vh = head_ptr(v, p.v, b, T_, h);
      const S* oh = head_ptr(o, p.o, b, T_, h);
      const S* doh = head_ptr(dout, p.dout, b, T_, h);
      S* dqh = head_ptr(dq, p.dq, b, T_, h);
      S* dkh = head_ptr(dk, p.dk, b, T_, h);
      S* dvh = head_ptr(dv, p.dv, b, T_, h);
      const T* lse_h = lse + (b * p.heads + h) * T_;
      if constexpr (std::is_same_v<S, T>) {
        backward_head<T>(p, qh, p.q.row_stride, kh, p.k.row_stride, vh, p.v.row_stride, oh, p.o.row_stride, lse_h, doh,
                         p.dout.row_stride, dqh, p.dq.row_stride, dkh, p.dk.row_stride, dvh, p.dv.row_stride, w);
      } else {
        const int64_t dqk = p.qk_dim, dvv = p.v_dim;
        widen(qh, p.q.row_stride, T_, dqk, qw);
        widen(kh, p.k.row_stride, T_, dqk, kw);
        widen(vh, p.v.row_stride, T_, dvv, vw);
        widen(oh, p.o.row_stride, T_, dvv, ow);
        widen(doh, p.dout.row_stride, T_, dvv, dow);
        dqw.resize(static_cast<size_t>(T_ * dqk));
        dkw.resize(static_cast<size_t>(T_ * dqk));
        dvw.resize(static_cast<size_t>(T_ * dvv));
        backward_head<T>(p, qw.data(), dqk, kw.data(), dqk, vw.data(), dvv, ow.data(), dvv, lse_h, dow.data(), dvv,
                         dqw.data(), dqk, dkw.data(), dqk, dvw.data(), dvv, w);
        narrow_into(dqw, T_, dqk, dqh, p.dq.row_stride);
        narrow_into(dkw, T_, dqk, dkh, p.dk.row_stride);
        narrow_into(dvw, T_, dvv, dvh, p.dv.row_stride);
      }
    }
  }
}

}  // namespace

void attention_forward(const ExecCtx&, const AttentionProblem& p, const void* q, const void* k, const void* v, void* o,
                       void* lse) {
  cpu_op_table();  // OpenBLAS pinned to one thread before the parallel region calls it
  dispatch_storage(p.dtype, "attention_forward", [&](auto tag) {
    using S = decltype(tag);
    forward_impl<S>(p, static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v), static_cast<S*>(o),
                    static_cast<compute_t<S>*>(lse));
  });
}

void attention_backward(const ExecCtx&, const AttentionProblem& p, const void* q, const void* k, const void* v,
                        const void* o, const void* lse, const void* dout, void* dq, void* dk, void* dv) {
  cpu_op_table();
  dispatch_storage(p.dtype, "attention_backward", [&](auto tag) {
    using S = decltype(tag);
    backward_impl<S>(p, static_cast<const S*>(q), static_cast<const S*>(k), static_cast<const S*>(v),
                     static_cast<const S*>(o), static_cast<const compute_t<S>*>(lse), static_cast<const S*>(dout),
                     static_cast<S*>(dq), static_cast<S*>(dk), static_cast<S*>(dv));
  });
}

}  // namespace fp8train::ops::cpu
