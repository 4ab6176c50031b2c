// Backend test table rows (backend_ops_table.h) of the attention core: attention_forward (outputs o, lse) and
// attention_backward (dq, dk, dv), F32 and BF16, on a ragged shape, DeepSeek-V3's head dims, a strided form (q with
// a head stride above qk_dim, k and v views into one fused k|v buffer, dq / dk / dv likewise), a single-token
// sequence, the tiny preset's dims (qk 8, v 4) and the bench preset's (qk 96, v 64). Inputs: random_values per
// (row, head) scaled to RMS 1, so the scores scale·q·k with scale = 1/√qk_dim are O(1) and the softmax is neither
// flat nor one-hot. The backward rows feed o and lse from an FP64 forward (o rounded to the storage dtype, lse to
// F32), so CPU, CUDA and the reference see the same inputs. Reference: a naive FP64 evaluation with the full softmax
// of each row. BF16 outputs are widened to floats and compared by normalized error.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend_ops_table.h"
#include "ops/attention.h"
#include "ops/attention_cached.h"

namespace fp8train::backend_test {
namespace attn {

struct Shape {
  int64_t batch, seq, heads, qk, v;
  bool strided = false;  // q head stride qk + 16, fused k|v buffer; dq, dk, dv alike
  int64_t rows() const { return batch * seq; }
  int64_t q_width() const { return strided ? qk + 16 : qk; }
};

// [rows, heads, dim] values, each (row, head) scaled to RMS 1; rounded to BF16 when the storage is BF16.
inline std::vector<float> values(const Shape& s, int64_t dim, uint64_t seed, DType dtype) {
  std::vector<float> x = random_values(s.rows() * s.heads, dim, seed);
  for (int64_t r = 0; r < s.rows() * s.heads; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < dim; ++c) sq += static_cast<double>(x[r * dim + c]) * x[r * dim + c];
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(dim)));
    for (int64_t c = 0; c < dim; ++c) x[r * dim + c] *= inv;
  }
  if (dtype == DType::BF16)
    for (float& v : x) v = static_cast<float>(bf16(v));
  return x;
}

// One logical [rows, heads, dim] tensor placed at column `offset` of a buffer row of `width` per head.
struct Part {
  const std::vector<float>* x;  // null: NaN (an output)
  int64_t dim, offset;
};

// A [rows, heads, width] buffer on ctx's device holding the parts (other columns: 0.5, or NaN for outputs).
inline Tensor buffer_on(const ExecCtx& ctx, const Shape& s, int64_t width, const std::vector<Part>& parts,
                        DType dtype) {
  std::vector<float> b(static_cast<size_t>(s.rows() * s.heads * width), 0.5f);
  for (const Part& p : parts)
    for (int64_t r = 0; r < s.rows() * s.heads; ++r)
      for (int64_t c = 0; c < p.dim; ++c)
        b[static_cast<size_t>(r * width + p.offset + c)] =
            p.x ? (*p.x)[static_cast<size_t>(r * p.dim + c)] : std::numeric_limits<float>::quiet_NaN();
  return input_on(ctx, b, s.rows(), s.heads * width, dtype).view({s.rows(), s.heads, width});
}

// The [rows, heads, dim] view at column `offset` of a [rows, heads, width] buffer, read back as floats.
inline OpResult view_floats(const std::string& name, const Tensor& buffer, int64_t offset, int64_t dim) {
  const Tensor h = buffer.device().is_cpu() ? buffer : buffer.to(Device::cpu());
  const int64_t n = h.size(0) * h.size(1), width = h.size(2);
  OpResult r{name, {}, std::vector<float>(static_cast<size_t>(n * dim))};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t j = i * width + offset + c;
      r.floats[static_cast<size_t>(i * dim + c)] = h.dtype() == DType::BF16
                                                       ? static_cast<float>(static_cast<const bf16*>(h.raw())[j])
                                                       : static_cast<const float*>(h.raw())[j];
    }
  return r;
}

// FP64 forward of the whole problem: o [rows, heads, v], lse [batch, heads, seq].
inline void forward_fp64(const Shape& s, double scale, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, std::vector<double>& o, std::vector<double>& lse) {
  o.assign(static_cast<size_t>(s.rows() * s.heads * s.v), 0.0);
  lse.assign(static_cast<size_t>(s.batch * s.heads * s.seq), 0.0);
  std::vector<double> sc(static_cast<size_t>(s.seq));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.seq; ++t) {
        const int64_t qi = (b * s.seq + t) * s.heads + h;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t ki = (b * s.seq + j) * s.heads + h;
          double d = 0;
          for (int64_t c = 0; c < s.qk; ++c) d += static_cast<double>(q[qi * s.qk + c]) * k[ki * s.qk + c];
          sc[j] = scale * d;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(sc[j] - mx);
        for (int64_t j = 0; j <= t; ++j) {
          const double p = std::exp(sc[j] - mx) / sum;
          const int64_t vi = (b * s.seq + j) * s.heads + h;
          for (int64_t c = 0; c < s.v; ++c) o[qi * s.v + c] += p * v[vi * s.v + c];
        }
        lse[(b * s.heads + h) * s.seq + t] = mx + std::log(sum);
      }
}

struct Inputs {
  std::vector<float> q, k, v, dout, o, lse;  // o rounded to the storage dtype, lse to F32 (backward inputs)
};
inline Inputs inputs(const Shape& s, double scale, uint64_t seed, DType dtype, bool backward) {
  Inputs in;
  in.q = values(s, s.qk, seed, dtype);
  in.k = values(s, s.qk, seed + 1, dtype);
  in.v = values(s, s.v, seed + 2, dtype);
  if (!backward) return in;
  in.dout = values(s, s.v, seed + 3, dtype);
  std::vector<double> o, lse;
  forward_fp64(s, scale, in.q, in.k, in.v, o, lse);
  in.o.resize(o.size());
  for (size_t i = 0; i < o.size(); ++i)
    in.o[i] = dtype == DType::BF16 ? static_cast<float>(bf16(static_cast<float>(o[i]))) : static_cast<float>(o[i]);
  in.lse.assign(lse.begin(), lse.end());
  return in;
}

// FP64 backward from the given o and lse: P = exp(scale·q·k − lse), dP = dO·v, D = Σ dO·o, dS = P(dP − D).
inline void backward_fp64(const Shape& s, double scale, const Inputs& in, std::vector<float>& dq,
                          std::vector<float>& dk, std::vector<float>& dv) {
  std::vector<double> gq(in.q.size(), 0.0), gk(in.k.size(), 0.0), gv(in.v.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.seq; ++t) {
        const int64_t qi = (b * s.seq + t) * s.heads + h;
        double delta = 0;
        for (int64_t c = 0; c < s.v; ++c) delta += static_cast<double>(in.dout[qi * s.v + c]) * in.o[qi * s.v + c];
        const double l = in.lse[(b * s.heads + h) * s.seq + t];
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t ki = (b * s.seq + j) * s.heads + h;
          double d = 0, dp = 0;
          for (int64_t c = 0; c < s.qk; ++c) d += static_cast<double>(in.q[qi * s.qk + c]) * in.k[ki * s.qk + c];
          for (int64_t c = 0; c < s.v; ++c) dp += static_cast<double>(in.dout[qi * s.v + c]) * in.v[ki * s.v + c];
          const double p = std::exp(scale * d - l), ds = p * (dp - delta);
          for (int64_t c = 0; c < s.qk; ++c) {
            gq[qi * s.qk + c] += scale * ds * in.k[ki * s.qk + c];
            gk[ki * s.qk + c] += scale * ds * in.q[qi * s.qk + c];
          }
          for (int64_t c = 0; c < s.v; ++c) gv[ki * s.v + c] += p * in.dout[qi * s.v + c];
        }
      }
  dq.assign(gq.begin(), gq.end());
  dk.assign(gk.begin(), gk.end());
  dv.assign(gv.begin(), gv.end());
}

inline std::string shape_name(const Shape& s, DType dtype) {
  return fmt::format("batch {} seq {} heads {} qk {} v {}{} {}", s.batch, s.seq, s.heads, s.qk, s.v,
                     s.strided ? " strided (q head stride qk+16, fused k|v)" : "", dtype_name(dtype));
}

// Storage values as the reference sees them (BF16 outputs are compared as widened floats).
inline std::vector<float> as_floats(const std::vector<double>& x) { return {x.begin(), x.end()}; }

inline void add_forward_case(std::vector<BackendOpCase>& out, const Shape& s, DType dtype) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.qk));
  const bool b16 = dtype == DType::BF16;
  BackendOpCase c;
  c.op = "attention_forward";
  c.name = shape_name(s, dtype);
  // F32: FP32 arithmetic against FP64; BF16: o rounded once (~2^-9 relative), P in BF16 on the tensor cores
  c.cpu = Compare::normalized(b16 ? 1e-5 : 1e-10);
  c.cuda = Compare::normalized(b16 ? 1e-5 : 1e-10);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Inputs in = inputs(s, scale, seed, dtype, false);
    const int64_t qw = s.q_width(), kvw = s.strided ? s.qk + s.v : 0;
    Tensor q, k, v;
    if (s.strided) {
      q = buffer_on(ctx, s, qw, {{&in.q, s.qk, 0}}, dtype).narrow(2, 0, s.qk);
      const Tensor kv = buffer_on(ctx, s, kvw, {{&in.k, s.qk, 0}, {&in.v, s.v, s.qk}}, dtype);
      k = kv.narrow(2, 0, s.qk);
      v = kv.narrow(2, s.qk, s.v);
    } else {
      q = buffer_on(ctx, s, s.qk, {{&in.q, s.qk, 0}}, dtype);
      k = buffer_on(ctx, s, s.qk, {{&in.k, s.qk, 0}}, dtype);
      v = buffer_on(ctx, s, s.v, {{&in.v, s.v, 0}}, dtype);
    }
    const Tensor o = buffer_on(ctx, s, s.v, {{nullptr, s.v, 0}}, dtype);
    std::vector<float> nan(static_cast<size_t>(s.batch * s.heads * s.seq), std::numeric_limits<float>::quiet_NaN());
    const Tensor lse = input_on(ctx, nan, s.batch * s.heads, s.seq, DType::F32);
    ops::attention_forward(ctx, q, k, v, o, lse, s.batch, scale);
    return std::vector<OpResult>{view_floats("o", o, 0, s.v), floats_of("lse", lse)};
  };
  c.reference = [=](uint64_t seed) {
    const Inputs in = inputs(s, scale, seed, dtype, false);
    std::vector<double> o, lse;
    forward_fp64(s, scale, in.q, in.k, in.v, o, lse);
    return std::vector<OpResult>{{"o", {}, as_floats(o)}, {"lse", {}, as_floats(lse)}};
  };
  out.push_back(std::move(c));
}

// The backward's outputs. With one token per sequence dq and dk are zero in exact arithmetic (P = 1, dP = D) and
// only rounding noise in floating point, which a normalized error cannot compare: such rows report one byte instead,
// 1 when every dq, dk element is at most 1e-4·max|dv| (and not NaN: the poisoned outputs were written).
inline std::vector<OpResult> results(const Shape& s, OpResult dq, OpResult dk, OpResult dv) {
  if (s.seq > 1) return {std::move(dq), std::move(dk), std::move(dv)};
  double vmax = 0;
  for (float x : dv.floats) vmax = std::max(vmax, std::fabs(static_cast<double>(x)));
  bool zero = true;
  for (const OpResult* r : {&dq, &dk})
    for (float x : r->floats) zero = zero && std::fabs(static_cast<double>(x)) <= 1e-4 * vmax;
  return {OpResult{"dq, dk ~ 0", {static_cast<uint8_t>(zero ? 1 : 0)}, {}}, std::move(dv)};
}

inline void add_backward_case(std::vector<BackendOpCase>& out, const Shape& s, DType dtype) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.qk));
  const bool b16 = dtype == DType::BF16;
  BackendOpCase c;
  c.op = "attention_backward";
  c.name = shape_name(s, dtype);
  // BF16: dq, dk, dv rounded once; the tensor-core kernels also round P and dS to BF16 for their products
  c.cpu = Compare::normalized(b16 ? 1e-5 : 1e-10);
  c.cuda = Compare::normalized(b16 ? 2e-5 : 1e-10);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Inputs in = inputs(s, scale, seed, dtype, true);
    const int64_t qw = s.q_width(), kvw = s.qk + s.v;
    Tensor q, k, v, dq, dk, dv, dqb, dkvb;
    if (s.strided) {
      q = buffer_on(ctx, s, qw, {{&in.q, s.qk, 0}}, dtype).narrow(2, 0, s.qk);
      const Tensor kv = buffer_on(ctx, s, kvw, {{&in.k, s.qk, 0}, {&in.v, s.v, s.qk}}, dtype);
      k = kv.narrow(2, 0, s.qk);
      v = kv.narrow(2, s.qk, s.v);
      dqb = buffer_on(ctx, s, qw, {{nullptr, s.qk, 0}}, dtype);
      dkvb = buffer_on(ctx, s, kvw, {{nullptr, s.qk, 0}, {nullptr, s.v, s.qk}}, dtype);
      dq = dqb.narrow(2, 0, s.qk);
      dk = dkvb.narrow(2, 0, s.qk);
      dv = dkvb.narrow(2, s.qk, s.v);
    } else {
      q = buffer_on(ctx, s, s.qk, {{&in.q, s.qk, 0}}, dtype);
      k = buffer_on(ctx, s, s.qk, {{&in.k, s.qk, 0}}, dtype);
      v = buffer_on(ctx, s, s.v, {{&in.v, s.v, 0}}, dtype);
      dq = dqb = buffer_on(ctx, s, s.qk, {{nullptr, s.qk, 0}}, dtype);
      dk = buffer_on(ctx, s, s.qk, {{nullptr, s.qk, 0}}, dtype);
      dv = buffer_on(ctx, s, s.v, {{nullptr, s.v, 0}}, dtype);
    }
    const Tensor o = buffer_on(ctx, s, s.v, {{&in.o, s.v, 0}}, dtype);
    const Tensor dout = buffer_on(ctx, s, s.v, {{&in.dout, s.v, 0}}, dtype);
    std::vector<float> lse_h = in.lse;
    const Tensor lse = input_on(ctx, lse_h, s.batch * s.heads, s.seq, DType::F32);
    ops::attention_backward(ctx, q, k, v, o, lse, dout, dq, dk, dv, s.batch, scale);
    if (s.strided)
      return results(s, view_floats("dq", dqb, 0, s.qk), view_floats("dk", dkvb, 0, s.qk),
                     view_floats("dv", dkvb, s.qk, s.v));
    return results(s, view_floats("dq", dq, 0, s.qk), view_floats("dk", dk, 0, s.qk), view_floats("dv", dv, 0, s.v));
  };
  c.reference = [=](uint64_t seed) {
    const Inputs in = inputs(s, scale, seed, dtype, true);
    std::vector<float> dq, dk, dv;
    backward_fp64(s, scale, in, dq, dk, dv);
    return results(s, {"dq", {}, dq}, {"dk", {}, dk}, {"dv", {}, dv});
  };
  out.push_back(std::move(c));
}

// attention_cached: m new tokens' queries (head stride qk + 8) against `keys` cached rows shared by every head; the
// values are the first v_dim columns of the key buffer (MLA's latent cache: keys [c_KV; k^R], values c_KV).
// Reference: FP64 with the full softmax over the visible keys; CUDA against the CPU (both FP32, other orders).
inline void add_cached_case(std::vector<BackendOpCase>& out, int64_t m, int64_t heads, int64_t keys, int64_t qk,
                            int64_t v, DType dtype) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  const Shape qs{1, m, heads, qk, v}, ks{1, keys, 1, qk, v};
  BackendOpCase c;
  c.op = "attention_cached";
  c.name = fmt::format("{} new of {} keys, heads {} qk {} v {} {}", m, keys, heads, qk, v, dtype_name(dtype));
  c.cpu = Compare::normalized(dtype == DType::BF16 ? 1e-5 : 1e-10);
  c.cuda = c.cpu;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const std::vector<float> q = values(qs, qk, seed, dtype), k = values(ks, qk, seed + 1, dtype);
    const Tensor qb = buffer_on(ctx, qs, qk + 8, {{&q, qk, 0}}, dtype).narrow(2, 0, qk);
    const Tensor kb = buffer_on(ctx, ks, qk, {{&k, qk, 0}}, dtype).view({keys, qk});
    const Tensor o = buffer_on(ctx, {1, m, heads, v, v}, v, {{nullptr, v, 0}}, dtype);
    ops::attention_cached(ctx, qb, kb, kb.cols(0, v), o, scale);
    return std::vector<OpResult>{view_floats("o", o, 0, v)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<float> q = values(qs, qk, seed, dtype), k = values(ks, qk, seed + 1, dtype);
    std::vector<double> o(static_cast<size_t>(m * heads * v), 0.0), sc(static_cast<size_t>(keys));
    for (int64_t j = 0; j < m; ++j)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t visible = keys - m + j + 1;
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t t = 0; t < visible; ++t) {
          double d = 0;
          for (int64_t e = 0; e < qk; ++e) d += static_cast<double>(q[(j * heads + h) * qk + e]) * k[t * qk + e];
          sc[t] = scale * d;
          mx = std::max(mx, sc[t]);
        }
        for (int64_t t = 0; t < visible; ++t) sum += std::exp(sc[t] - mx);
        for (int64_t t = 0; t < visible; ++t)
          for (int64_t e = 0; e < v; ++e) o[(j * heads + h) * v + e] += std::exp(sc[t] - mx) / sum * k[t * qk + e];
      }
    return std::vector<OpResult>{{"o", {}, as_floats(o)}};
  };
  out.push_back(std::move(c));
}

}  // namespace attn

inline void attention_op_cases(std::vector<BackendOpCase>& out) {
  const std::vector<attn::Shape> shapes = {
      {2, 37, 3, 48, 32},                    // ragged sequence (query and key blocks cut short)
      {1, 256, 2, 192, 128},                 // DeepSeek-V3 head dims: qk 128 + 64, v 128
      {2, 70, 2, 64, 64, /*strided=*/true},  // q head stride 80, k | v fused [rows, heads, 128]
      {3, 1, 2, 48, 32},                     // a single token per sequence
      {2, 19, 2, 8, 4},                      // tiny preset dims (qk 4 + 4, v 4): the SIMT path for BF16 too
      {1, 130, 2, 96, 64},                   // bench preset dims (qk 64 + 32, v 64), three blocks of 64, ragged
  };
  for (const attn::Shape& s : shapes)
    for (DType dtype : {DType::F32, DType::BF16}) {
      attn::add_forward_case(out, s, dtype);
      attn::add_backward_case(out, s, dtype);
    }
  for (DType dtype : {DType::F32, DType::BF16}) {
    attn::add_cached_case(out, 1, 4, 37, 48, 32, dtype);  // one token decoded after 36 cached
    attn::add_cached_case(out, 3, 2, 70, 80, 64, dtype);  // a verify pass: 3 new tokens (causal among them)
    attn::add_cached_case(out, 5, 3, 5, 24, 16, dtype);   // a prefill: no tokens cached before
  }
}

}  // namespace fp8train::backend_test
