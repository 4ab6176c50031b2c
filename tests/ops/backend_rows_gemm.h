// Backend test table rows (backend_ops_table.h) of the plain GEMMs (ops/gemm.h): gemm over every transpose,
// F32 / BF16 / mixed operands, alpha and beta, strided rows, ragged shapes, k = 0, round_inputs_bf16; and
// gemm_grouped (M and K kinds) with an empty expert, ragged and 128-aligned offsets, rows past the last expert.
// Operands are stored with row strides (ld = cols + pad); the padding of c is returned as bytes (it must be
// left as it was), the product region as floats (BF16 widened) compared by normalized error against an FP64
// evaluation of the same (rounded) inputs, and CUDA against the CPU op.
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend_ops_table.h"
#include "ops/gemm.h"

namespace fp8train::backend_test {
namespace gemm_rows {

inline const char* dn(DType t) { return t == DType::F32 ? "f32" : "bf16"; }

// An operand's values as the op stores them: rows × ld random values (the first `cols` of each row are the
// matrix), rounded in place when BF16; the tensor is the [rows, cols] view.
struct Stored {
  std::vector<float> v;
  int64_t rows = 0, cols = 0, ld = 0;
  float at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * ld + c)]; }
};
inline Stored stored_values(int64_t rows, int64_t cols, int64_t pad, uint64_t seed, DType dtype) {
  Stored s{random_values(rows, cols + pad, seed), rows, cols, cols + pad};
  if (dtype == DType::BF16)
    for (float& x : s.v) x = static_cast<float>(bf16(x));
  return s;
}
inline Tensor stored_tensor(const ExecCtx& ctx, Stored s, DType dtype) {  // s: a copy (input_on rounds in place)
  return input_on(ctx, s.v, s.rows, s.ld, dtype).cols(0, s.cols);
}

// c's results: the [rows, cols] region as floats, the padding (columns cols..ld) as stored bytes.
inline std::vector<OpResult> split_c(const std::vector<float>& full, int64_t rows, int64_t cols, int64_t ld,
                                     DType dtype) {
  OpResult region{"c", {}, {}}, pad{"c padding", {}, {}};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      const float x = full[static_cast<size_t>(r * ld + c)];
      if (c < cols) {
        region.floats.push_back(x);
        continue;
      }
      uint8_t b[4];
      size_t n = 4;
      if (dtype == DType::BF16) {
        const uint16_t bits = bf16(x).bits;
        std::memcpy(b, &bits, 2);
        n = 2;
      } else {
        std::memcpy(b, &x, 4);
      }
      pad.bytes.insert(pad.bytes.end(), b, b + n);
    }
  return {region, pad};
}
// The whole stored c (base tensor, padding included) back on the host as floats.
inline std::vector<float> host_floats(const Tensor& base) {
  const Tensor h = base.to(Device::cpu());
  if (h.dtype() == DType::F32) return h.to_vector<float>();
  const std::vector<bf16> b = h.to_vector<bf16>();
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = static_cast<float>(b[i]);
  return f;
}
// c's initial values: random (beta != 0) or NaN in the region (beta = 0: c must not be read), random padding.
inline Stored initial_c(int64_t rows, int64_t cols, int64_t pad, uint64_t seed, DType dtype, bool nan_region) {
  Stored s = stored_values(rows, cols, pad, seed, dtype);
  if (nan_region)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        s.v[static_cast<size_t>(r * s.ld + c)] = std::numeric_limits<float>::quiet_NaN();
  return s;
}
inline float store_as(double x, DType dtype) {
  return dtype == DType::BF16 ? static_cast<float>(bf16(static_cast<float>(x))) : static_cast<float>(x);
}

struct GemmRow {
  int64_t m = 64, n = 64, k = 64;
  bool trans_a = false, trans_b = false;
  DType a = DType::F32, b = DType::F32, c = DType::F32;
  double alpha = 1.0, beta = 0.0;
  int64_t pad = 0;  // extra elements per row of a, b and c
  bool round_inputs = false;
  bool on_cuda = true;
};

inline void add_gemm_row(std::vector<BackendOpCase>& out, const GemmRow& g) {
  BackendOpCase c;
  c.op = "gemm";
  c.name = fmt::format("{} a{} · {} b{} -> {}{} m={} n={} k={} alpha={} beta={}{}", dn(g.a), g.trans_a ? "ᵀ" : "",
                       dn(g.b), g.trans_b ? "ᵀ" : "", dn(g.c), g.round_inputs ? " (inputs rounded to bf16)" : "", g.m,
                       g.n, g.k, g.alpha, g.beta, g.pad ? fmt::format(" ld+{}", g.pad) : "");
  const bool bf16_out = g.c == DType::BF16;
  c.cpu = Compare::normalized(bf16_out ? 1e-5 : 1e-10);   // FP32 accumulation (and a BF16 rounding) vs FP64
  c.cuda = Compare::normalized(bf16_out ? 1e-5 : 1e-10);  // cuBLASLt's accumulation order vs OpenBLAS's
  c.on_cuda = g.on_cuda;
  const int64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
  const int64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
  const bool nan_c = g.beta == 0.0;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Stored a = stored_values(ar, ac, g.pad, seed, g.a), b = stored_values(br, bc, g.pad, seed + 1, g.b);
    Stored c0 = initial_c(g.m, g.n, g.pad, seed + 2, g.c, nan_c);
    const Tensor ta = stored_tensor(ctx, a, g.a), tb = stored_tensor(ctx, b, g.b);
    const Tensor base = input_on(ctx, c0.v, g.m, c0.ld, g.c);
    ops::GemmOptions o;
    o.alpha = g.alpha;
    o.beta = g.beta;
    o.round_inputs_bf16 = g.round_inputs;
    ops::gemm(ctx, ta, g.trans_a, tb, g.trans_b, base.cols(0, g.n), o);
    return split_c(host_floats(base), g.m, g.n, c0.ld, g.c);
  };
  c.reference = [=](uint64_t seed) {
    Stored a = stored_values(ar, ac, g.pad, seed, g.a), b = stored_values(br, bc, g.pad, seed + 1, g.b);
    const Stored c0 = initial_c(g.m, g.n, g.pad, seed + 2, g.c, nan_c);
    if (g.round_inputs) {
      for (float& x : a.v) x = static_cast<float>(bf16(x));
      for (float& x : b.v) x = static_cast<float>(bf16(x));
    }
    std::vector<float> full = c0.v;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < g.k; ++l)
          acc += static_cast<double>(g.trans_a ? a.at(l, i) : a.at(i, l)) * (g.trans_b ? b.at(j, l) : b.at(l, j));
        double r = g.alpha * acc;
        if (g.beta != 0.0) r += g.beta * c0.at(i, j);
        full[static_cast<size_t>(i * c0.ld + j)] = store_as(r, g.c);
      }
    return split_c(full, g.m, g.n, c0.ld, g.c);
  };
  out.push_back(std::move(c));
}

// gemm_grouped rows: E experts over R expert-ordered rows (offsets as given; R may exceed offsets[E]).
//   M: a [R, K], b [E·N, K] (trans_b) or [E·K, N], c [R, N]        K: a [R, M], b [R, N], c [E·M, N]
struct GroupedRow {
  ops::GroupedGemmKind kind = ops::GroupedGemmKind::M;
  std::vector<int32_t> offsets;
  int64_t rows = 0;
  int64_t m = 0, n = 0, k = 0;  // M kind: n, k; K kind: m, n
  bool trans_b = false;
  DType a = DType::BF16, b = DType::BF16, c = DType::BF16;
  double alpha = 1.0, beta = 0.0;
  int64_t pad = 0;
};

inline void add_grouped_row(std::vector<BackendOpCase>& out, const GroupedRow& g) {
  using ops::GroupedGemmKind;
  const bool mk = g.kind == GroupedGemmKind::M;
  const auto groups = static_cast<int64_t>(g.offsets.size()) - 1;
  BackendOpCase c;
  c.op = "gemm_grouped";
  std::string offs;
  for (int32_t o : g.offsets) offs += fmt::format("{}{}", offs.empty() ? "" : ",", o);
  c.name = fmt::format("{} {}×{}{} -> {} rows={} offsets {{{}}} {} alpha={} beta={}{}", mk ? "M" : "K", dn(g.a),
                       dn(g.b), mk && g.trans_b ? "ᵀ" : "", dn(g.c), g.rows, offs,
                       mk ? fmt::format("n={} k={}", g.n, g.k) : fmt::format("m={} n={}", g.m, g.n), g.alpha, g.beta,
                       g.pad ? fmt::format(" ld+{}", g.pad) : "");
  const bool bf16_out = g.c == DType::BF16;
  c.cpu = Compare::normalized(bf16_out ? 1e-5 : 1e-10);
  c.cuda = Compare::normalized(bf16_out ? 1e-5 : 1e-10);
  const int64_t ac = mk ? g.k : g.m;
  const int64_t br = mk ? groups * (g.trans_b ? g.n : g.k) : g.rows, bc = mk ? (g.trans_b ? g.k : g.n) : g.n;
  const int64_t cr = mk ? g.rows : groups * g.m, cc = g.n;
  const bool nan_c = g.beta == 0.0;
  c.run = [=](const ExecCtx& ctx, uint64_t seed) {
    const Stored a = stored_values(g.rows, ac, g.pad, seed, g.a), b = stored_values(br, bc, g.pad, seed + 1, g.b);
    Stored c0 = initial_c(cr, cc, g.pad, seed + 2, g.c, nan_c);
    const Tensor ta = stored_tensor(ctx, a, g.a), tb = stored_tensor(ctx, b, g.b);
    const Tensor base = input_on(ctx, c0.v, cr, c0.ld, g.c);
    const Tensor off =
        Tensor::from_vector(g.offsets, {groups + 1}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
    ops::GemmOptions o;
    o.alpha = g.alpha;
    o.beta = g.beta;
    ops::gemm_grouped(ctx, g.kind, ta, tb, g.trans_b, base.cols(0, cc), off, o);
    return split_c(host_floats(base), cr, cc, c0.ld, g.c);
  };
  c.reference = [=](uint64_t seed) {
    const Stored a = stored_values(g.rows, ac, g.pad, seed, g.a), b = stored_values(br, bc, g.pad, seed + 1, g.b);
    const Stored c0 = initial_c(cr, cc, g.pad, seed + 2, g.c, nan_c);
    std::vector<float> full = c0.v;
    auto set = [&](int64_t i, int64_t j, double acc) {
      double r = g.alpha * acc;
      if (g.beta != 0.0) r += g.beta * c0.at(i, j);
      full[static_cast<size_t>(i * c0.ld + j)] = store_as(r, g.c);
    };
    for (int64_t e = 0; e < groups; ++e) {
      const int64_t r0 = g.offsets[static_cast<size_t>(e)], r1 = g.offsets[static_cast<size_t>(e + 1)];
      if (mk) {
        const int64_t b0 = e * (g.trans_b ? g.n : g.k);  // first row of expert e's block of b
        for (int64_t i = r0; i < r1; ++i)
          for (int64_t j = 0; j < g.n; ++j) {
            double acc = 0.0;
            for (int64_t l = 0; l < g.k; ++l)
              acc += static_cast<double>(a.at(i, l)) * (g.trans_b ? b.at(b0 + j, l) : b.at(b0 + l, j));
            set(i, j, acc);
          }
      } else {
        for (int64_t i = 0; i < g.m; ++i)
          for (int64_t j = 0; j < g.n; ++j) {
            double acc = 0.0;
            for (int64_t l = r0; l < r1; ++l) acc += static_cast<double>(a.at(l, i)) * b.at(l, j);
            set(e * g.m + i, j, acc);
          }
      }
    }
    if (mk)  // rows past the last expert: zeros
      for (int64_t i = g.offsets.back(); i < g.rows; ++i)
        for (int64_t j = 0; j < g.n; ++j) full[static_cast<size_t>(i * c0.ld + j)] = 0.0f;
    return split_c(full, cr, cc, c0.ld, g.c);
  };
  out.push_back(std::move(c));
}

}  // namespace gemm_rows

inline void gemm_op_cases(std::vector<BackendOpCase>& out) {
  using gemm_rows::GemmRow;
  using gemm_rows::GroupedRow;
  constexpr DType F = DType::F32, B = DType::BF16;
  // every transpose combination, BF16 and F32, ragged, beta 0 and 1
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      gemm_rows::add_gemm_row(out, {37, 100, 130, ta, tb, B, B, F, 1.0, 0.0, 0, false, true});
      gemm_rows::add_gemm_row(out, {100, 37, 130, ta, tb, F, F, F, 1.0, 1.0, 0, false, true});
      gemm_rows::add_gemm_row(out, {64, 130, 96, ta, tb, B, B, B, 1.0, 1.0, 0, false, true});
    }
  // the model's forms: Fprop x·Wᵀ, Dgrad dy·W, Wgrad dWᵀ += dyᵀ·x (F32 c), router u(BF16)·gate(F32)ᵀ -> F32
  gemm_rows::add_gemm_row(out, {128, 256, 512, false, true, B, B, B, 1.0, 0.0, 0, false, true});
  gemm_rows::add_gemm_row(out, {128, 512, 256, false, false, B, B, B, 1.0, 0.0, 0, false, true});
  gemm_rows::add_gemm_row(out, {256, 512, 128, true, false, B, B, F, 1.0, 1.0, 0, false, true});
  gemm_rows::add_gemm_row(out, {100, 8, 256, false, true, B, F, F, 1.0, 0.0, 0, false, true});
  // mixed dtypes (F32 c and BF16 c), alpha, strided rows (ld not a multiple of 16 bytes: the staging path)
  gemm_rows::add_gemm_row(out, {37, 45, 130, true, false, F, B, B, 0.5, 1.0, 3, false, true});
  gemm_rows::add_gemm_row(out, {64, 48, 100, false, true, F, F, B, 1.0, 0.0, 0, false, true});
  gemm_rows::add_gemm_row(out, {64, 48, 100, false, false, B, B, F, -2.0, 0.5, 5, false, true});
  gemm_rows::add_gemm_row(out, {96, 64, 128, true, true, F, F, F, 1.0, 1.0, 8, false, true});
  gemm_rows::add_gemm_row(out, {96, 64, 128, false, true, B, B, B, 1.0, 0.0, 8, false, true});
  // round_inputs_bf16 (F32 only), ragged and transposed
  gemm_rows::add_gemm_row(out, {37, 100, 130, false, true, F, F, F, 1.0, 0.0, 0, true, true});
  gemm_rows::add_gemm_row(out, {64, 37, 100, true, false, F, F, F, 1.0, 1.0, 2, true, true});
  // k = 0: c = beta·c
  gemm_rows::add_gemm_row(out, {16, 24, 0, false, true, B, B, F, 1.0, 0.5, 0, false, true});
  gemm_rows::add_gemm_row(out, {16, 24, 0, false, false, F, F, B, 1.0, 0.0, 0, false, true});

  // grouped: ragged offsets with an empty expert (align 1, the BF16 recipe), rows past offsets[E], 128-aligned
  using ops::GroupedGemmKind;
  const std::vector<int32_t> ragged{0, 37, 37, 200}, aligned{0, 128, 128, 384};
  for (bool tb : {true, false})
    for (DType t : {B, F})
      for (double beta : {0.0, 1.0})
        gemm_rows::add_grouped_row(out, {GroupedGemmKind::M, ragged, 210, 0, 130, 100, tb, t, t, t, 1.0, beta, 0});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::M, aligned, 400, 0, 128, 256, true, B, B, B, 1.0, 0.0, 0});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::M, ragged, 200, 0, 64, 96, false, B, B, B, 1.0, 0.0, 3});
  // row strides that allow the grouped kernel's 16-byte loads (ld a multiple of 8), with ragged k or m tails
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::M, ragged, 210, 0, 128, 256, false, B, B, F, 1.0, 1.0, 0});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::M, ragged, 210, 0, 130, 100, true, B, B, B, 1.0, 0.0, 4});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::K, ragged, 210, 100, 60, 0, false, B, B, F, 1.0, 0.0, 4});
  for (DType t : {B, F})
    for (double beta : {0.0, 1.0})
      gemm_rows::add_grouped_row(out, {GroupedGemmKind::K, ragged, 210, 100, 130, 0, false, t, t, F, 1.0, beta, 0});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::K, ragged, 200, 64, 48, 0, false, B, B, B, 1.0, 0.0, 0});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::K, ragged, 200, 64, 48, 0, false, B, B, B, 1.0, 1.0, 0});
  gemm_rows::add_grouped_row(out, {GroupedGemmKind::K, aligned, 400, 128, 64, 0, false, B, B, F, 1.0, 1.0, 0});
}

}  // namespace fp8train::backend_test
