// Backend test table rows (backend_ops_table.h) of axpby (copy / cast / add / axpy / scale), fill, embedding,
// RMSNorm, RoPE and SwiGLU, forward and backward, F32 and BF16, ragged dims (100, 130, 7168), strided views
// (ld > cols) and the accumulate / aliasing forms; F64 is CPU only (a refusal row).
// Strided outputs are views of a padded parent whose padding holds a finite marker (-768) and whose view starts
// poisoned (NaN): the whole parent is read back, so a missed element or a write past a row shows. References are
// host evaluations in FP64 (or, for the exactly specified ops, the same F32 operations in the same order).
// BF16 outputs of reducing or transcendental ops are widened to F32 and compared by normalized error; exact ops
// compare BF16 bytes.
#pragma once
#include <algorithm>
#include <vector>

#include "backend_ops_table.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace fp8train::backend_test {
namespace ew_rows {

constexpr float kPad = -768.0f;  // exact in BF16
inline float nan_f() { return std::numeric_limits<float>::quiet_NaN(); }
inline std::string dt(DType t) { return std::string(dtype_name(t)); }

inline void round_to(std::vector<float>& v, DType t) {
  if (t == DType::BF16)
    for (float& x : v) x = static_cast<float>(bf16(x));
}

// [rows, ld] host values: v (rows × cols, row-major) in the first cols columns, `pad` after.
inline std::vector<float> padded(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld, float pad) {
  std::vector<float> out(static_cast<size_t>(rows * ld), pad);
  for (int64_t r = 0; r < rows; ++r) std::copy(v.begin() + r * cols, v.begin() + (r + 1) * cols, out.begin() + r * ld);
  return out;
}

// A tensor of `shape` on ctx's device holding host values (rounded to BF16 when dtype is BF16).
inline Tensor device_tensor(const ExecCtx& ctx, const std::vector<float>& host, Shape shape, DType dtype) {
  if (dtype == DType::BF16) {
    std::vector<bf16> b(host.size());
    for (size_t i = 0; i < host.size(); ++i) b[i] = bf16(host[i]);
    return Tensor::from_vector(b, std::move(shape), MemCategory::Workspace, Device::cpu()).to(ctx.device);
  }
  if (dtype == DType::F64) {
    const std::vector<double> d(host.begin(), host.end());
    return Tensor::from_vector(d, std::move(shape), MemCategory::Workspace, Device::cpu()).to(ctx.device);
  }
  return Tensor::from_vector(host, std::move(shape), MemCategory::Workspace, Device::cpu()).to(ctx.device);
}

// A [rows, cols] view (row stride ld) of a padded parent: values in the view, kPad after.
struct View {
  Tensor parent, view;
};
inline View matrix_on(const ExecCtx& ctx, const std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld,
                      DType dtype) {
  View m;
  m.parent = device_tensor(ctx, padded(v, rows, cols, ld, kPad), {rows, ld}, dtype);
  m.view = ld == cols ? m.parent : m.parent.cols(0, cols);
  return m;
}
// An output view: poisoned with NaN, padding kPad.
inline View output_on(const ExecCtx& ctx, int64_t rows, int64_t cols, int64_t ld, DType dtype) {
  return matrix_on(ctx, std::vector<float>(static_cast<size_t>(rows * cols), nan_f()), rows, cols, ld, dtype);
}

// A tensor read back: F32 as floats; BF16 as its bytes, or widened to floats (`widen`, for bounded compares).
inline OpResult result(const std::string& name, const Tensor& t, bool widen) {
  if (t.dtype() == DType::BF16 && !widen) return bytes_of(name, t);
  if (t.dtype() == DType::F32) return floats_of(name, t);
  const OpResult b = bytes_of(name, t);
  OpResult r{name, {}, {}};
  if (t.dtype() == DType::BF16) {
    for (size_t i = 0; i + 1 < b.bytes.size(); i += 2)
      r.floats.push_back(
          static_cast<float>(bf16::from_bits(static_cast<uint16_t>(b.bytes[i] | (b.bytes[i + 1] << 8)))));
  } else {  // F64
    for (size_t i = 0; i + 7 < b.bytes.size(); i += 8) {
      double d;
      std::memcpy(&d, b.bytes.data() + i, 8);
      r.floats.push_back(static_cast<float>(d));
    }
  }
  return r;
}
// The reference's form of the same output: host values (already what the op's dtype holds, padding included).
inline OpResult host_result(const std::string& name, const std::vector<float>& v, DType dtype, bool widen) {
  if (dtype == DType::BF16 && !widen) {
    OpResult r{name, {}, {}};
    for (float x : v) {
      const uint16_t bits = bf16(x).bits;
      r.bytes.push_back(static_cast<uint8_t>(bits & 0xFF));
      r.bytes.push_back(static_cast<uint8_t>(bits >> 8));
    }
    return r;
  }
  std::vector<float> f = v;
  round_to(f, dtype);
  return {name, {}, f};
}

inline Compare bound_for(DType t, double f32_bound, double bf16_bound) {
  return Compare::normalized(t == DType::BF16 ? bf16_bound : f32_bound);
}

// ---- axpby / copy / fill ----------------------------------------------------------------------------------------
enum class AxpbyForm { Axpby, Copy, Axpy, Scale };

inline std::string form_name(AxpbyForm f) {
  switch (f) {
    case AxpbyForm::Axpby:
      return "axpby";
    case AxpbyForm::Copy:
      return "copy";
    case AxpbyForm::Axpy:
      return "axpy (out == b)";
    case AxpbyForm::Scale:
      return "scale (out == a)";
  }
  return "?";
}

// out = alpha·a + beta·b with a, b, out of the given dtypes and row strides; the in-place forms alias out.
inline void add_axpby_case(std::vector<BackendOpCase>& out, AxpbyForm form, DType ta, DType tb, DType to, int64_t rows,
                           int64_t cols, int64_t ld_a, int64_t ld_b, int64_t ld_o, double alpha, double beta,
                           bool on_cuda = true) {
  BackendOpCase c;
  c.op = "axpby";
  c.name =
      fmt::format("{} {}{} -> {} [{}x{}] ld {}/{}/{} alpha {} beta {}", form_name(form), dt(ta),
                  form == AxpbyForm::Axpby ? " + " + dt(tb) : "", dt(to), rows, cols, ld_a, ld_b, ld_o, alpha, beta);
  c.on_cuda = on_cuda;
  // The effective arguments: copy is alpha = 1 without b, scale has no b, axpy is b = out.
  const bool has_b = form == AxpbyForm::Axpby || form == AxpbyForm::Axpy;
  const double al = form == AxpbyForm::Copy ? 1.0 : alpha;
  const double be = form == AxpbyForm::Axpy ? 1.0 : (has_b ? beta : 0.0);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    std::vector<float> a = random_values(rows, cols, seed), b = random_values(rows, cols, seed + 1);
    const View va = matrix_on(ctx, a, rows, cols, ld_a, ta);
    if (form == AxpbyForm::Scale) {
      ops::scale(ctx, va.view, al);
      return std::vector<OpResult>{result("out", va.parent, false)};
    }
    if (form == AxpbyForm::Axpy) {
      const View vb = matrix_on(ctx, b, rows, cols, ld_b, tb);
      ops::axpy(ctx, al, va.view, vb.view);
      return std::vector<OpResult>{result("out", vb.parent, false)};
    }
    const View vo = output_on(ctx, rows, cols, ld_o, to);
    if (form == AxpbyForm::Copy) {
      ops::copy(ctx, va.view, vo.view);
    } else {
      const View vb = matrix_on(ctx, b, rows, cols, ld_b, tb);
      ops::axpby(ctx, al, va.view, be, vb.view, vo.view);
    }
    return std::vector<OpResult>{result("out", vo.parent, false)};
  };
  // The same F32 operations in the same order (each product and the sum rounded), rounded once into out.
  c.reference = [=](uint64_t seed) {
    std::vector<float> a = random_values(rows, cols, seed), b = random_values(rows, cols, seed + 1);
    round_to(a, ta);
    round_to(b, tb);
    const DType out_t = form == AxpbyForm::Scale ? ta : (form == AxpbyForm::Axpy ? tb : to);
    const int64_t ld = form == AxpbyForm::Scale ? ld_a : (form == AxpbyForm::Axpy ? ld_b : ld_o);
    std::vector<float> o(a.size());
    if (ta == DType::F64) {  // all f64: the same operations in double
      for (size_t i = 0; i < o.size(); ++i) {
        volatile double pa = al * static_cast<double>(a[i]);
        volatile double pb = be * static_cast<double>(b[i]);
        o[i] = static_cast<float>(!has_b ? (al == 1.0 ? static_cast<double>(a[i]) : pa) : pa + pb);
      }
      return std::vector<OpResult>{host_result("out", padded(o, rows, cols, ld, kPad), out_t, false)};
    }
    const float fa = static_cast<float>(al), fb = static_cast<float>(be);
    for (size_t i = 0; i < o.size(); ++i) {
      volatile float pa = fa * a[i];  // volatile: no FMA contraction in the reference
      volatile float pb = fb * b[i];
      o[i] = !has_b ? (al == 1.0 ? a[i] : pa) : pa + pb;
    }
    return std::vector<OpResult>{host_result("out", padded(o, rows, cols, ld, kPad), out_t, false)};
  };
  out.push_back(std::move(c));
}

inline void add_fill_case(std::vector<BackendOpCase>& out, DType t, int64_t rows, int64_t cols, int64_t ld,
                          double value, bool on_cuda = true) {
  BackendOpCase c;
  c.op = "fill";
  c.name = fmt::format("{} [{}x{}] ld {} value {}", dt(t), rows, cols, ld, value);
  c.on_cuda = on_cuda;
  c.run = [=](const ExecCtx& ctx, uint64_t) {
    const View v = output_on(ctx, rows, cols, ld, t);
    ops::fill(ctx, v.view, value);
    return std::vector<OpResult>{result("x", v.parent, false)};
  };
  c.reference = [=](uint64_t) {
    const std::vector<float> v(static_cast<size_t>(rows * cols), static_cast<float>(value));
    return std::vector<OpResult>{host_result("x", padded(v, rows, cols, ld, kPad), t, false)};
  };
  out.push_back(std::move(c));
}

// ---- embedding ---------------------------------------------------------------------------------------------------
// Ids in [0, vocab) with many repeats (tokens > vocab), from the seed; `skewed`: most tokens take id 0, a run
// longer than a CTA's window (as the space is in a byte-level corpus).
inline std::vector<int32_t> random_ids(int64_t tokens, int64_t vocab, uint64_t seed, bool skewed = false) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& i : ids) i = d(gen);
  if (skewed)
    for (size_t k = 0; k < ids.size(); ++k)
      if (k % 5 != 0) ids[k] = 0;
  return ids;
}

inline void add_embedding_case(std::vector<BackendOpCase>& out, bool backward, DType t, int64_t tokens, int64_t vocab,
                               int64_t dim, int64_t ld, bool skewed = false) {
  BackendOpCase c;
  c.op = backward ? "embedding_backward" : "embedding_forward";
  c.name = fmt::format("{} tokens {} vocab {} dim {} ld {}{}", dt(t), tokens, vocab, dim, ld, skewed ? " skewed" : "");
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const std::vector<int32_t> ids = random_ids(tokens, vocab, seed, skewed);
    const Tensor tids = Tensor::from_vector(ids, {tokens}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    const std::vector<float> table = random_values(vocab, dim, seed + 1);
    const Tensor ttable = device_tensor(ctx, table, {vocab, dim}, DType::F32);
    if (!backward) {
      const View o = output_on(ctx, tokens, dim, ld, t);
      ops::embedding_forward(ctx, tids, ttable, o.view);
      return std::vector<OpResult>{result("out", o.parent, false)};
    }
    const View d = matrix_on(ctx, random_values(tokens, dim, seed + 2), tokens, dim, ld, t);
    ops::embedding_backward(ctx, tids, d.view, ttable);
    return std::vector<OpResult>{result("dtable", ttable, false)};
  };
  // Forward: a copy (rounded once). Backward: each table row plus its tokens' rows in token order, in F32 — the
  // op's specified order, so exact.
  c.reference = [=](uint64_t seed) {
    const std::vector<int32_t> ids = random_ids(tokens, vocab, seed, skewed);
    std::vector<float> table = random_values(vocab, dim, seed + 1);
    if (!backward) {
      std::vector<float> o(static_cast<size_t>(tokens * dim));
      for (int64_t k = 0; k < tokens; ++k)
        std::copy_n(table.begin() + ids[static_cast<size_t>(k)] * dim, dim, o.begin() + k * dim);
      return std::vector<OpResult>{host_result("out", padded(o, tokens, dim, ld, kPad), t, false)};
    }
    std::vector<float> d = random_values(tokens, dim, seed + 2);
    round_to(d, t);
    for (int64_t k = 0; k < tokens; ++k)
      for (int64_t j = 0; j < dim; ++j)
        table[static_cast<size_t>(ids[static_cast<size_t>(k)] * dim + j)] += d[static_cast<size_t>(k * dim + j)];
    return std::vector<OpResult>{host_result("dtable", table, DType::F32, false)};
  };
  out.push_back(std::move(c));
}

// ---- RMSNorm -----------------------------------------------------------------------------------------------------
inline std::vector<float> gains(int64_t dim, uint64_t seed) {
  std::vector<float> w = random_values(1, dim, seed);
  for (float& x : w) x = 0.5f + std::fabs(x) / (1.0f + std::fabs(x));  // (0.5, 1.5): a gain near one
  return w;
}
// FP64 rstd of the (storage-rounded) rows.
inline std::vector<double> rstd_of(const std::vector<float>& x, int64_t rows, int64_t dim, double eps) {
  std::vector<double> r(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(x[i * dim + j]) * x[i * dim + j];
    r[static_cast<size_t>(i)] = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
  }
  return r;
}

inline void add_rmsnorm_forward_case(std::vector<BackendOpCase>& out, DType t, int64_t rows, int64_t dim, int64_t ld,
                                     bool with_rstd) {
  constexpr double eps = 1e-6;
  BackendOpCase c;
  c.op = "rmsnorm_forward";
  c.name = fmt::format("{} [{}x{}] ld {}{}", dt(t), rows, dim, ld, with_rstd ? " rstd" : "");
  c.cpu = bound_for(t, 1e-12, 1e-5);   // F32 sums against FP64; BF16 outputs one rounding apart
  c.cuda = bound_for(t, 1e-12, 1e-5);  // the CTA's reduction order against the CPU's sequential sum
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const View x = matrix_on(ctx, random_values(rows, dim, seed), rows, dim, ld, t);
    const Tensor w = device_tensor(ctx, gains(dim, seed + 1), {dim}, DType::F32);
    const View y = output_on(ctx, rows, dim, ld, t);
    Tensor rstd;
    if (with_rstd)
      rstd = device_tensor(ctx, std::vector<float>(static_cast<size_t>(rows), nan_f()), {rows}, DType::F32);
    ops::rmsnorm_forward(ctx, x.view, w, eps, y.view, rstd);
    std::vector<OpResult> r{result("y", y.parent, true)};
    if (with_rstd) r.push_back(result("rstd", rstd, true));
    return r;
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> x = random_values(rows, dim, seed);
    round_to(x, t);
    const std::vector<float> w = gains(dim, seed + 1);
    const std::vector<double> rs = rstd_of(x, rows, dim, eps);
    std::vector<float> y(x.size()), r(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      r[static_cast<size_t>(i)] = static_cast<float>(rs[static_cast<size_t>(i)]);
      for (int64_t j = 0; j < dim; ++j)
        y[static_cast<size_t>(i * dim + j)] =
            static_cast<float>(x[static_cast<size_t>(i * dim + j)] * rs[static_cast<size_t>(i)] * w[j]);
    }
    std::vector<OpResult> out_r{host_result("y", padded(y, rows, dim, ld, kPad), t, true)};
    if (with_rstd) out_r.push_back(host_result("rstd", r, DType::F32, true));
    return out_r;
  };
  out.push_back(std::move(c));
}

// dw_bits: only dw is compared, and on CUDA bit for bit with the CPU (the same per-chunk sums in the same order).
inline void add_rmsnorm_backward_case(std::vector<BackendOpCase>& out, DType t, int64_t rows, int64_t dim, int64_t ld,
                                      bool accumulate, bool with_dw, bool dw_bits = false) {
  constexpr double eps = 1e-6;
  FP8T_CHECK(with_dw || !dw_bits, "add_rmsnorm_backward_case: dw_bits needs dw");
  BackendOpCase c;
  c.op = "rmsnorm_backward";
  c.name = fmt::format("{} [{}x{}] ld {}{}{}{}", dt(t), rows, dim, ld, accumulate ? " dx +=" : "",
                       with_dw ? " dw +=" : " no dw", dw_bits ? " (dw bits)" : "");
  c.cpu = bound_for(t, 1e-10, 1e-5);
  c.cuda = dw_bits ? Compare::bits() : bound_for(t, 1e-10, 1e-5);  // dx: the row dot's order differs
  const int64_t ld_dx = ld + (ld > dim ? 8 : 0);                   // dx with its own stride
  // rstd: the rows' F32 rstd (an input here).
  auto rstd_f = [=](uint64_t seed) {
    std::vector<float> x = random_values(rows, dim, seed);
    round_to(x, t);
    const std::vector<double> rs = rstd_of(x, rows, dim, eps);
    return std::vector<float>(rs.begin(), rs.end());
  };
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const View x = matrix_on(ctx, random_values(rows, dim, seed), rows, dim, ld, t);
    const Tensor w = device_tensor(ctx, gains(dim, seed + 1), {dim}, DType::F32);
    const Tensor rstd = device_tensor(ctx, rstd_f(seed), {rows}, DType::F32);
    const View dy = matrix_on(ctx, random_values(rows, dim, seed + 2), rows, dim, ld, t);
    const View dx = accumulate ? matrix_on(ctx, random_values(rows, dim, seed + 3), rows, dim, ld_dx, t)
                               : output_on(ctx, rows, dim, ld_dx, t);
    Tensor dw;
    if (with_dw) dw = device_tensor(ctx, random_values(1, dim, seed + 4), {dim}, DType::F32);
    ops::rmsnorm_backward(ctx, x.view, w, rstd, dy.view, dx.view, dw, accumulate);
    if (dw_bits) return std::vector<OpResult>{result("dw", dw, true)};
    std::vector<OpResult> r{result("dx", dx.parent, true)};
    if (with_dw) r.push_back(result("dw", dw, true));
    return r;
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> x = random_values(rows, dim, seed), dy = random_values(rows, dim, seed + 2);
    std::vector<float> dx0 = random_values(rows, dim, seed + 3);
    round_to(x, t);
    round_to(dy, t);
    round_to(dx0, t);
    const std::vector<float> w = gains(dim, seed + 1), rs = rstd_f(seed), dw0 = random_values(1, dim, seed + 4);
    std::vector<float> dx(x.size());
    std::vector<double> dw(dw0.begin(), dw0.end());
    for (int64_t i = 0; i < rows; ++i) {
      const double r = rs[static_cast<size_t>(i)];
      double dot = 0;
      for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(dy[i * dim + j]) * w[j] * x[i * dim + j];
      const double k = r * r * r * dot / static_cast<double>(dim);
      for (int64_t j = 0; j < dim; ++j) {
        const size_t e = static_cast<size_t>(i * dim + j);
        const double d = r * dy[e] * w[j] - x[e] * k;
        dx[e] = static_cast<float>(accumulate ? dx0[e] + d : d);
        dw[static_cast<size_t>(j)] += static_cast<double>(dy[e]) * x[e] * r;
      }
    }
    OpResult dw_r = host_result("dw", std::vector<float>(dw.begin(), dw.end()), DType::F32, true);
    if (dw_bits) return std::vector<OpResult>{dw_r};
    std::vector<OpResult> out_r{host_result("dx", padded(dx, rows, dim, ld_dx, kPad), t, true)};
    if (with_dw) out_r.push_back(std::move(dw_r));
    return out_r;
  };
  out.push_back(std::move(c));
}

// ---- RoPE ----------------------------------------------------------------------------------------------------------
// x: the first rope_dim elements of each head of a [rows, heads, head_dim] tensor (row and head strides), in place.
inline void add_rope_case(std::vector<BackendOpCase>& out, DType t, int64_t batch, int64_t seq, int64_t heads,
                          int64_t head_dim, int64_t rope_dim, bool inverse, int64_t pos_offset = 0) {
  constexpr double theta = 10000.0;
  const int64_t rows = batch * seq;
  BackendOpCase c;
  c.op = "rope";
  c.name = fmt::format("{} rows {} (seq {}) heads {} rope {} of {}{}{}", dt(t), rows, seq, heads, rope_dim, head_dim,
                       inverse ? " inverse" : "", pos_offset > 0 ? fmt::format(" from position {}", pos_offset) : "");
  c.cpu = bound_for(t, 1e-12, 1e-5);
  // The cos/sin tables agree but where a device double lands within ~2^-28 of an F32 rounding boundary (one F32
  // ulp then): bound instead of bits, far below what a wrong angle or pair would give.
  c.cuda = bound_for(t, 1e-13, 1e-6);
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Tensor x = device_tensor(ctx, random_values(rows, heads * head_dim, seed), {rows, heads, head_dim}, t);
    ops::rope_(ctx, rope_dim == head_dim ? x : x.narrow(2, 0, rope_dim), seq, theta, inverse, pos_offset);
    return std::vector<OpResult>{result("x", x, true)};
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> x = random_values(rows, heads * head_dim, seed);
    round_to(x, t);
    std::vector<float> o = x;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < rope_dim / 2; ++i) {
          const double angle =
              static_cast<double>(pos_offset + r % seq) * std::pow(theta, -2.0 * i / static_cast<double>(rope_dim));
          const double cs = std::cos(angle), sn = inverse ? -std::sin(angle) : std::sin(angle);
          const size_t e = static_cast<size_t>(r * heads * head_dim + h * head_dim + 2 * i);
          o[e] = static_cast<float>(x[e] * cs - x[e + 1] * sn);
          o[e + 1] = static_cast<float>(x[e] * sn + x[e + 1] * cs);
        }
    return std::vector<OpResult>{host_result("x", o, t, true)};
  };
  out.push_back(std::move(c));
}

// ---- SwiGLU
// ----------------------------------------------------------------------------------------------------------
inline double sigmoid_d(double g) { return 1.0 / (1.0 + std::exp(-g)); }

inline void add_swiglu_case(std::vector<BackendOpCase>& out, bool backward, DType t, int64_t rows, int64_t f,
                            int64_t ld_in, int64_t ld_out) {
  BackendOpCase c;
  c.op = backward ? "swiglu_backward" : "swiglu_forward";
  c.name = fmt::format("{} [{}x2·{}] ld in {} out {}", dt(t), rows, f, ld_in, ld_out);
  c.cpu = bound_for(t, 1e-12, 1e-5);
  c.cuda = bound_for(t, 1e-12, 1e-6);  // the device's expf (≤ 2 ulp) against the CPU's (≤ ~0.5 ulp)
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const View in = matrix_on(ctx, random_values(rows, 2 * f, seed), rows, 2 * f, ld_in, t);
    if (!backward) {
      const View o = output_on(ctx, rows, f, ld_out, t);
      ops::swiglu_forward(ctx, in.view, o.view);
      return std::vector<OpResult>{result("out", o.parent, true)};
    }
    const View d = matrix_on(ctx, random_values(rows, f, seed + 1), rows, f, ld_out, t);
    const View din = output_on(ctx, rows, 2 * f, ld_in, t);
    ops::swiglu_backward(ctx, in.view, d.view, din.view);
    return std::vector<OpResult>{result("din", din.parent, true)};
  };
  c.reference = [=](uint64_t seed) {
    std::vector<float> in = random_values(rows, 2 * f, seed), d = random_values(rows, f, seed + 1);
    round_to(in, t);
    round_to(d, t);
    std::vector<float> o(static_cast<size_t>(rows * (backward ? 2 * f : f)));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < f; ++j) {
        const double g = in[static_cast<size_t>(r * 2 * f + j)], u = in[static_cast<size_t>(r * 2 * f + f + j)];
        const double s = sigmoid_d(g);
        if (!backward) {
          o[static_cast<size_t>(r * f + j)] = static_cast<float>(g * s * u);
        } else {
          const double dd = d[static_cast<size_t>(r * f + j)];
          o[static_cast<size_t>(r * 2 * f + j)] = static_cast<float>(dd * u * s * (1.0 + g * (1.0 - s)));
          o[static_cast<size_t>(r * 2 * f + f + j)] = static_cast<float>(dd * g * s);
        }
      }
    const int64_t cols = backward ? 2 * f : f, ld = backward ? ld_in : ld_out;
    return std::vector<OpResult>{host_result(backward ? "din" : "out", padded(o, rows, cols, ld, kPad), t, true)};
  };
  out.push_back(std::move(c));
}

}  // namespace ew_rows

inline void elementwise_op_cases(std::vector<BackendOpCase>& out) {
  using ew_rows::AxpbyForm;
  const DType F32 = DType::F32, BF16 = DType::BF16;
  // Casts (bit-exact, round to nearest even), contiguous (vector path) and ragged / strided (scalar path).
  ew_rows::add_axpby_case(out, AxpbyForm::Copy, F32, F32, BF16, 64, 256, 256, 256, 256, 1, 0);
  ew_rows::add_axpby_case(out, AxpbyForm::Copy, BF16, BF16, F32, 64, 256, 256, 256, 256, 1, 0);
  ew_rows::add_axpby_case(out, AxpbyForm::Copy, F32, F32, BF16, 37, 130, 136, 130, 144, 1, 0);
  ew_rows::add_axpby_case(out, AxpbyForm::Copy, BF16, BF16, F32, 37, 100, 101, 100, 100, 1, 0);
  ew_rows::add_axpby_case(out, AxpbyForm::Copy, F32, F32, F32, 37, 7168, 7168, 7168, 7168, 1, 0);
  // Mixed dtypes, general alpha / beta, strided (rows 16-byte aligned: vector path with a ragged tail).
  ew_rows::add_axpby_case(out, AxpbyForm::Axpby, F32, BF16, BF16, 37, 130, 136, 136, 144, 0.7, -1.3);
  ew_rows::add_axpby_case(out, AxpbyForm::Axpby, BF16, F32, F32, 64, 256, 256, 256, 256, 1, 1);
  ew_rows::add_axpby_case(out, AxpbyForm::Axpby, BF16, BF16, BF16, 37, 100, 100, 100, 100, -0.25, 3.0);
  // In place: y += alpha·x (out aliases b), x *= alpha (out aliases a).
  ew_rows::add_axpby_case(out, AxpbyForm::Axpy, BF16, F32, F32, 37, 7168, 7168, 7168, 7168, 0.3, 1);
  ew_rows::add_axpby_case(out, AxpbyForm::Axpy, F32, BF16, BF16, 37, 130, 130, 136, 136, -2.0, 1);
  ew_rows::add_axpby_case(out, AxpbyForm::Scale, BF16, BF16, BF16, 37, 130, 131, 131, 131, 0.1, 0);
  ew_rows::add_axpby_case(out, AxpbyForm::Scale, F32, F32, F32, 64, 256, 256, 256, 256, 3.0, 0);
  ew_rows::add_axpby_case(out, AxpbyForm::Axpby, DType::F64, DType::F64, DType::F64, 16, 40, 40, 40, 40, 0.5, 2.0,
                          /*on_cuda=*/false);
  ew_rows::add_fill_case(out, F32, 37, 130, 136, -1.25);
  ew_rows::add_fill_case(out, BF16, 37, 100, 101, 0.3);
  ew_rows::add_fill_case(out, BF16, 64, 256, 256, 3.14159);
  // Embedding: repeated ids (tokens > vocab); the backward accumulates into the F32 table.
  for (bool backward : {false, true}) {
    ew_rows::add_embedding_case(out, backward, F32, 300, 50, 130, 136);
    ew_rows::add_embedding_case(out, backward, BF16, 300, 50, 256, 256);
    ew_rows::add_embedding_case(out, backward, BF16, 37, 11, 100, 101);
  }
  ew_rows::add_embedding_case(out, true, F32, 64, 7, 7168, 7168);
  // A run of 1,600 equal ids (several of the kernel's 256-position windows) over three column chunks, the last
  // partial, and a remainder after the eight-row loads.
  ew_rows::add_embedding_case(out, true, BF16, 2003, 40, 600, 600, /*skewed=*/true);
  // RMSNorm.
  ew_rows::add_rmsnorm_forward_case(out, F32, 37, 130, 136, true);
  ew_rows::add_rmsnorm_forward_case(out, BF16, 37, 7168, 7168, true);
  ew_rows::add_rmsnorm_forward_case(out, BF16, 64, 100, 101, false);
  ew_rows::add_rmsnorm_forward_case(out, F32, 130, 256, 256, false);
  ew_rows::add_rmsnorm_backward_case(out, F32, 37, 130, 136, false, true);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 37, 7168, 7168, true, true);
  ew_rows::add_rmsnorm_backward_case(out, F32, 130, 256, 264, true, false);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 150, 100, 101, false, true);
  // The CUDA kernels' fast paths: the row in registers (dims ≤ 2048), the one-pass backward with dw (150 rows: a
  // partial last chunk and group).
  ew_rows::add_rmsnorm_forward_case(out, BF16, 64, 2048, 2056, true);
  // The forward's register rows over many CTAs (a grid-stride tail past 2^20 warps is not reached here), lanes
  // without columns (dims 1000, 256).
  ew_rows::add_rmsnorm_forward_case(out, BF16, 4500, 2048, 2048, true);
  ew_rows::add_rmsnorm_forward_case(out, BF16, 150, 1000, 1008, true);
  ew_rows::add_rmsnorm_forward_case(out, F32, 2300, 256, 264, false);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 150, 512, 520, true, true);
  ew_rows::add_rmsnorm_backward_case(out, F32, 70, 2048, 2048, false, true);
  // The one-pass backward's software-pipelined row groups (8 BF16 / 4 F32 rows, half that when accumulating):
  // ragged last chunks (203 rows: 11; 200: 8; 133: 5; 5: less than a group) and groups, threads without columns
  // (dim 1000); dw also held bit for bit to the CPU's.
  ew_rows::add_rmsnorm_backward_case(out, BF16, 5, 2048, 2048, false, true, /*dw_bits=*/true);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 203, 2048, 2048, false, true);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 203, 2048, 2048, false, true, /*dw_bits=*/true);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 200, 2048, 2056, true, true);
  ew_rows::add_rmsnorm_backward_case(out, BF16, 200, 2048, 2056, true, true, /*dw_bits=*/true);
  ew_rows::add_rmsnorm_backward_case(out, F32, 133, 1000, 1000, true, true);
  ew_rows::add_rmsnorm_backward_case(out, F32, 133, 1000, 1000, true, true, /*dw_bits=*/true);
  // RoPE: the rope part of wider heads (strided), whole heads, inverse (the backward).
  ew_rows::add_rope_case(out, F32, 2, 19, 3, 96, 64, false);
  ew_rows::add_rope_case(out, F32, 3, 16, 4, 64, 64, true);
  ew_rows::add_rope_case(out, BF16, 2, 19, 3, 96, 64, true);
  ew_rows::add_rope_case(out, BF16, 1, 37, 2, 128, 128, false);
  ew_rows::add_rope_case(out, BF16, 2, 5, 3, 40, 12, false);       // 6 pairs: not whole 4-pair vectors
  ew_rows::add_rope_case(out, F32, 1, 3, 4, 96, 64, false, 1000);  // decoding: new tokens after a cache
  // SwiGLU.
  for (bool backward : {false, true}) {
    ew_rows::add_swiglu_case(out, backward, F32, 37, 100, 208, 104);
    ew_rows::add_swiglu_case(out, backward, BF16, 64, 256, 512, 256);
    ew_rows::add_swiglu_case(out, backward, BF16, 37, 130, 261, 131);
  }
  ew_rows::add_swiglu_case(out, true, F32, 16, 1024, 2048, 1024);
}

}  // namespace fp8train::backend_test
