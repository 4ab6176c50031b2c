// Backend test table rows (backend_ops_table.h) of the per-head broadcast and reduction (ops/heads.h):
//   repeat_heads  src a [n, d] column view of a wider matrix (MLA's k^R = kva.cols(kv_rank, kv_rank + rope)), dst
//                 the rope part of every head of k [n, H, nope + d] (k.as_strided({n, H, d}, {H·dqk, dqk, 1},
//                 nope)), or both contiguous;
//   sum_heads     src the rope part of every head of dk, dst the column view dkva.cols(kv_rank, kv_rank + d).
// F32 and BF16, H = 1, 3, 11, 128, d = 64 and 16 (16-byte vector path) and d = 13 with odd offsets (the scalar
// path), ragged n = 37; F64 is CPU only (a refusal row). Outputs are whole parents read back as bytes: the
// elements the op writes start as NaN, the rest hold kPad and must keep it. References: the copy, and the sum in
// the compute type (F32 beside BF16) in increasing h from head 0's value, rounded once — the op's exact
// specification — so CPU and CUDA both compare bit for bit.
#pragma once
#include <vector>

#include "backend_ops_table.h"
#include "backend_rows_elementwise.h"
#include "ops/heads.h"

namespace fp8train::backend_test {
namespace heads_rows {

using ew_rows::device_tensor;
using ew_rows::dt;
using ew_rows::kPad;
using ew_rows::nan_f;

// Host values (each representable in t) as t's bytes, the form bytes_of reads back.
inline OpResult encoded(const std::string& name, const std::vector<double>& v, DType t) {
  OpResult r{name, {}, {}};
  const auto append = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    r.bytes.insert(r.bytes.end(), b, b + n);
  };
  for (double x : v) {
    if (t == DType::F64) {
      append(&x, sizeof(x));
    } else if (t == DType::F32) {
      const float f = static_cast<float>(x);
      append(&f, sizeof(f));
    } else {
      const uint16_t bits = bf16(static_cast<float>(x)).bits;
      append(&bits, sizeof(bits));
    }
  }
  return r;
}

// random_values as the op of dtype t sees them (BF16-rounded; F32 values are exact in F64).
inline std::vector<double> seen(std::vector<float> v, DType t) {
  ew_rows::round_to(v, t);
  return std::vector<double>(v.begin(), v.end());
}

inline std::string layout_name(int64_t n, int64_t heads, int64_t d, int64_t nope, int64_t kv_rank) {
  return fmt::format("n {} heads {} d {} (per-head [{}, {}, {}+{}], matrix cols {}..{} of {})", n, heads, d, n, heads,
                     nope, d, kv_rank, kv_rank + d, kv_rank + d);
}

// k [n, H, nope + d] with the rope parts of the heads (all NaN or the given values) as a strided view.
inline Tensor per_head_view(const Tensor& parent, int64_t n, int64_t heads, int64_t d, int64_t nope) {
  const int64_t dqk = nope + d;
  return parent.as_strided({n, heads, d}, {heads * dqk, dqk, 1}, nope);
}
inline Tensor matrix_view(const Tensor& parent, int64_t d, int64_t kv_rank) {
  return kv_rank == 0 ? parent : parent.cols(kv_rank, kv_rank + d);
}

inline void add_repeat_case(std::vector<BackendOpCase>& out, DType t, int64_t n, int64_t heads, int64_t d, int64_t nope,
                            int64_t kv_rank) {
  const int64_t dqk = nope + d, w = kv_rank + d;
  BackendOpCase c;
  c.op = "repeat_heads";
  c.name = dt(t) + " " + layout_name(n, heads, d, nope, kv_rank);
  c.cpu = Compare::bits();
  c.cuda = Compare::bits();
  c.on_cuda = t != DType::F64;
  // k before the op: kPad in the nope parts, NaN where the rope parts go.
  const auto initial_k = [=] {
    std::vector<float> k(static_cast<size_t>(n * heads * dqk), kPad);
    for (int64_t r = 0; r < n * heads; ++r)
      for (int64_t j = 0; j < d; ++j) k[static_cast<size_t>(r * dqk + nope + j)] = nan_f();
    return k;
  };
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Tensor src = device_tensor(ctx, random_values(n, w, seed), {n, w}, t);
    const Tensor k = device_tensor(ctx, initial_k(), {n, heads, dqk}, t);
    ops::repeat_heads(ctx, matrix_view(src, d, kv_rank), per_head_view(k, n, heads, d, nope));
    return std::vector<OpResult>{bytes_of("k", k), bytes_of("src", src)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<double> src = seen(random_values(n, w, seed), t);
    std::vector<double> k(static_cast<size_t>(n * heads * dqk), kPad);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < d; ++j)
          k[static_cast<size_t>((r * heads + h) * dqk + nope + j)] = src[static_cast<size_t>(r * w + kv_rank + j)];
    return std::vector<OpResult>{encoded("k", k, t), encoded("src", src, t)};
  };
  out.push_back(std::move(c));
}

inline void add_sum_case(std::vector<BackendOpCase>& out, DType t, int64_t n, int64_t heads, int64_t d, int64_t nope,
                         int64_t kv_rank) {
  const int64_t dqk = nope + d, w = kv_rank + d;
  BackendOpCase c;
  c.op = "sum_heads";
  c.name = dt(t) + " " + layout_name(n, heads, d, nope, kv_rank);
  c.cpu = Compare::bits();
  c.cuda = Compare::bits();
  c.on_cuda = t != DType::F64;
  // dkva before the op: kPad in the first kv_rank columns, NaN where the sums go.
  const auto initial_dst = [=] {
    std::vector<float> v(static_cast<size_t>(n * w), kPad);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < d; ++j) v[static_cast<size_t>(r * w + kv_rank + j)] = nan_f();
    return v;
  };
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Tensor dk = device_tensor(ctx, random_values(n, heads * dqk, seed), {n, heads, dqk}, t);
    const Tensor dst = device_tensor(ctx, initial_dst(), {n, w}, t);
    ops::sum_heads(ctx, per_head_view(dk, n, heads, d, nope), matrix_view(dst, d, kv_rank));
    return std::vector<OpResult>{bytes_of("dst", dst), bytes_of("dk", dk)};
  };
  c.reference = [=](uint64_t seed) {
    const std::vector<double> dk = seen(random_values(n, heads * dqk, seed), t);
    std::vector<double> dst(static_cast<size_t>(n * w), kPad);
    const auto x = [&](int64_t r, int64_t h, int64_t j) {
      return dk[static_cast<size_t>((r * heads + h) * dqk + nope + j)];
    };
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < d; ++j) {
        double s = 0;
        if (t == DType::F64) {
          s = x(r, 0, j);
          for (int64_t h = 1; h < heads; ++h) s += x(r, h, j);
        } else {  // the FP32 compute type; BF16 rounds once, in encoded()
          float f = static_cast<float>(x(r, 0, j));
          for (int64_t h = 1; h < heads; ++h) f += static_cast<float>(x(r, h, j));
          s = f;
        }
        dst[static_cast<size_t>(r * w + kv_rank + j)] = s;
      }
    return std::vector<OpResult>{encoded("dst", dst, t), encoded("dk", dk, t)};
  };
  out.push_back(std::move(c));
}

}  // namespace heads_rows

inline void heads_op_cases(std::vector<BackendOpCase>& out) {
  using heads_rows::add_repeat_case;
  using heads_rows::add_sum_case;
  constexpr int64_t n = 37;
  for (DType t : {DType::F32, DType::BF16}) {
    for (int64_t heads : {1, 3, 11, 128}) {
      // MLA's views: DeepSeek-V3's d_nope 128 / rope 64 / kv_rank 512, and a small model's 32 / 16 / 48.
      add_repeat_case(out, t, n, heads, 64, 128, 512);
      add_repeat_case(out, t, n, heads, 16, 32, 48);
      add_sum_case(out, t, n, heads, 64, 128, 512);
      add_sum_case(out, t, n, heads, 16, 32, 48);
    }
    // contiguous matrix and heads
    add_repeat_case(out, t, n, 3, 64, 0, 0);
    add_sum_case(out, t, n, 3, 64, 0, 0);
    // odd dim and offsets: the scalar path
    for (int64_t heads : {3, 128}) {
      add_repeat_case(out, t, n, heads, 13, 3, 5);
      add_sum_case(out, t, n, heads, 13, 3, 5);
    }
  }
  // F64 (the gradient-check models): CPU only
  add_repeat_case(out, DType::F64, n, 3, 16, 32, 48);
  add_sum_case(out, DType::F64, n, 3, 16, 32, 48);
}

}  // namespace fp8train::backend_test
