// Reference block-scaled GEMM (ref_gemm.h): argument validation, the exact path (FP64 per K-group through
// OpenBLAS DGEMM where that is exact, else an ordered FP64 loop), the INT8 path (exact integer groups),
// the fp32 path, the scalar Hopper-model path (the specification of the SIMD kernel in ref_gemm_simd.cpp),
// and the epilogue (per-tensor scales, accumulate-into-C, BF16 rounding).
//   a: [M, K] codes, b: [N, K] codes, c / d: [M, N] row-major.
#include "quant/ref_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/error.h"
#include "quant/ref_gemm_detail.h"

namespace fp8train::quant {

std::string_view accum_mode_name(AccumMode m) {
  switch (m) {
    case AccumMode::Exact: return "exact";
    case AccumMode::Hopper: return "hopper";
    case AccumMode::Fp32: return "fp32";
  }
  return "unknown";
}

AccumMode parse_accum_mode(std::string_view name) {
  for (AccumMode m : {AccumMode::Exact, AccumMode::Hopper, AccumMode::Fp32})
    if (name == accum_mode_name(m)) return m;
  FP8T_FAIL("unknown accumulation mode '{}' (expected exact, hopper or fp32)", name);
}

// ---- the FP22 adder ------------------------------------------------------------------------------------------
namespace {
int float_exponent(float x) {  // floor(log2|x|) of a finite non-zero float (subnormals too)
  int e;
  std::frexp(x, &e);
  return e - 1;
}

// |v| (finite, non-zero) in units of 2^(E - 13), truncated toward zero, with v's sign.
int64_t fp22_term(float v, int e_max) {
  if (v == 0.0f) return 0;
  const int e = float_exponent(v);
  const auto m = static_cast<int64_t>(std::ldexp(std::fabs(static_cast<double>(v)), 23 - e));  // 24-bit integer
  const int right = e_max - e + 10;  // >= 10
  const int64_t t = right >= 63 ? 0 : (m >> right);
  return v < 0.0f ? -t : t;
}
}  // namespace

float fp22_add(float x, float y) {
  if (!std::isfinite(x) || !std::isfinite(y) || (x == 0.0f && y == 0.0f)) return x + y;
  int e_max;
  if (x == 0.0f) {
    e_max = float_exponent(y);
  } else if (y == 0.0f) {
    e_max = float_exponent(x);
  } else {
    e_max = std::max(float_exponent(x), float_exponent(y));
  }
  const int64_t sum = fp22_term(x, e_max) + fp22_term(y, e_max);
  if (sum == 0) return 0.0f;
  int64_t mag = std::llabs(sum);
  const int msb = 63 - __builtin_clzll(static_cast<unsigned long long>(mag));
  if (msb > num::kFp22FractionBits) {
    const int drop = msb - num::kFp22FractionBits;
    mag = (mag >> drop) << drop;
  }
  const double v = std::ldexp(static_cast<double>(mag), e_max - num::kFp22FractionBits);
  return static_cast<float>(sum < 0 ? -v : v);
}

namespace detail {

float hopper_element(const HopperProblem& p, int64_t i, int64_t j) {
  const uint8_t* ar = p.a + i * p.k;
  const uint8_t* br = p.b + j * p.k;
  const int64_t P = p.promote, G = p.group_k, K = p.k;
  float acc = 0.0f, chain = 0.0f, pending = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += num::kHopperBlockK) {
    const int n = static_cast<int>(std::min<int64_t>(num::kHopperBlockK, K - k0));
    chain = num::hopper_block(ar + k0, p.fa, br + k0, p.fb, n, chain);
    const int64_t end = k0 + n;
    if (p.per_tensor) {
      if (P != num::kNeverPromote && (end % P == 0 || end == K)) {
        acc = acc + chain;
        chain = 0.0f;
      }
    } else if (P != num::kNeverPromote && P <= G) {
      if (end % P == 0 || end == K) {
        const int64_t g = k0 / G;
        acc = std::fma(p.sa.at(i, g) * p.sb.at(j, g), chain, acc);
        chain = 0.0f;
      }
    } else if (end % G == 0 || end == K) {  // P > G or never: the pending FP22 accumulator model
      const int64_t g = k0 / G;
      pending = fp22_add(pending, (p.sa.at(i, g) * p.sb.at(j, g)) * chain);
      chain = 0.0f;
      if ((P != num::kNeverPromote && end % P == 0) || end == K) {
        acc = acc + pending;
        pending = 0.0f;
      }
    }
  }
  if (p.per_tensor && P == num::kNeverPromote) return chain;
  return acc;
}

}  // namespace detail

namespace {

void check_tensor(const QTensor& q, const char* name) {
  FP8T_CHECK(static_cast<uint8_t>(q.format()) <= static_cast<uint8_t>(Format::BF16),
             "ref_gemm: operand {} has an unknown format value {}", name, static_cast<int>(q.format()));
  FP8T_CHECK(q.rows >= 0 && q.cols >= 0 &&
                 (q.granularity().per_tensor || (q.granularity().block_rows >= 1 && q.granularity().block_cols >= 1)),
             "ref_gemm: operand {} has an invalid shape [{}, {}] or granularity {}", name, q.rows, q.cols,
             q.granularity().name());
  FP8T_CHECK(q.rowwise.defined(), "ref_gemm: operand {} has no row-wise payload", name);
  FP8T_CHECK(q.device().is_cpu(), "ref_gemm: operand {} lives on {}; the reference GEMM reads CPU tensors", name,
             q.device().str());
  FP8T_CHECK(q.groups == 1 && q.rowwise.layout == ScaleLayout::RowMajor,
             "ref_gemm: operand {} has {} row groups and {} scales; the reference GEMM reads one group with row-major "
             "scales (see QTensor::group)",
             name, q.groups, scale_layout_name(q.rowwise.layout));
  FP8T_CHECK(q.rowwise.codes.is_contiguous() && q.rowwise.scales.is_contiguous() &&
                 q.rowwise.codes.nbytes() == code_bytes(q.format(), q.rows * q.cols) &&
                 q.rowwise.scales.numel() == q.scale_rows() * q.scale_cols(),
             "ref_gemm: operand {} ([{}, {}] {}) holds {} code bytes and {} scales, which do not match its shape",
             name, q.rows, q.cols, format_name(q.format()), q.rowwise.codes.nbytes(), q.rowwise.scales.numel());
}

bool is_fp8(Format f) { return f == Format::E4M3 || f == Format::E5M2; }
num::Fp8Format fp8_of(Format f) { return f == Format::E4M3 ? num::Fp8Format::E4M3 : num::Fp8Format::E5M2; }

void check_operand(const GemmOperand& q, const char* name) {
  FP8T_CHECK(static_cast<uint8_t>(q.format) <= static_cast<uint8_t>(Format::BF16),
             "ref_gemm: operand {} has an unknown format value {}", name, static_cast<int>(q.format));
  FP8T_CHECK(q.rows >= 0 && q.cols >= 0 &&
                 (q.granularity.per_tensor || (q.granularity.block_rows >= 1 && q.granularity.block_cols >= 1)),
             "ref_gemm: operand {} has an invalid shape [{}, {}] or granularity {}", name, q.rows, q.cols,
             q.granularity.name());
  FP8T_CHECK(q.rows * q.cols == 0 || (q.codes != nullptr && q.scales != nullptr),
             "ref_gemm: operand {} has no codes or scales", name);
}

// The dequantized values [rows, cols] of an operand.
std::vector<float> dequantized(const GemmOperand& q) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize_into(q.codes, q.scales, q.rows, q.cols, q.format, q.granularity, out.data());
  return out;
}

// Everything the three paths share after validation.
struct Plan {
  int64_t m, n, k;
  bool per_tensor;
  int64_t group_k;  // scale group along K (per-tensor: k)
  detail::ScaleView sa, sb;
};

Plan validate(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, const float* c) {
  check_operand(a, "A");
  check_operand(b, "B");
  FP8T_CHECK(a.cols == b.cols, "ref_gemm: A is [{}, {}] and B is [{}, {}]; D = A·Bᵀ needs the same K (columns)",
             a.rows, a.cols, b.rows, b.cols);
  const Granularity ga = a.granularity, gb = b.granularity;
  const bool both_tensor = ga.per_tensor && gb.per_tensor;
  const bool both_block = !ga.per_tensor && !gb.per_tensor && ga.block_cols == gb.block_cols;
  FP8T_CHECK(both_tensor || both_block,
             "ref_gemm: unsupported granularity pair A {} × B {} (supported: tensor × tensor, or both tiled with "
             "the same block length G along K: 1×G × G×G, 1×G × 1×G)",
             ga.name(), gb.name());
  FP8T_CHECK((a.format == Format::INT8) == (b.format == Format::INT8),
             "ref_gemm: INT8 operands pair only with INT8 (got A {} and B {})", format_name(a.format),
             format_name(b.format));
  FP8T_CHECK(config.mode == AccumMode::Exact || config.mode == AccumMode::Hopper || config.mode == AccumMode::Fp32,
             "ref_gemm: unknown accumulation mode value {}", static_cast<int>(config.mode));
  const int64_t G = both_tensor ? a.cols : ga.block_cols;
  if (config.mode == AccumMode::Hopper && a.format != Format::INT8) {
    FP8T_CHECK(is_fp8(a.format) && is_fp8(b.format),
               "ref_gemm: hopper accumulation models FP8 (e4m3/e5m2) or int8 operands, not {} × {}",
               format_name(a.format), format_name(b.format));
    const int P = config.promote_interval;
    FP8T_CHECK(P == num::kNeverPromote || (P > 0 && P % num::kHopperBlockK == 0),
               "ref_gemm: promotion interval must be a positive multiple of {} or 0 (never), got {}",
               num::kHopperBlockK, P);
    if (!both_tensor) {
      FP8T_CHECK(G % num::kHopperBlockK == 0, "ref_gemm: hopper mode needs the K block length G = {} to be a "
                 "multiple of {}", G, num::kHopperBlockK);
      FP8T_CHECK(P == num::kNeverPromote || (P <= G ? G % P == 0 : P % G == 0),
                 "ref_gemm: promotion interval {} must divide the scale block {} or be a multiple of it", P, G);
    }
  }
  FP8T_CHECK(!config.accumulate || c != nullptr, "ref_gemm: accumulate-into-C was requested without a C matrix");
  Plan plan{a.rows, b.rows, a.cols, both_tensor, G, {}, {}};
  if (!both_tensor) {
    plan.sa = {a.scales, ga.block_rows, a.scale_cols(), false};
    plan.sb = {b.scales, gb.block_rows, b.scale_cols(), false};
  }
  return plan;
}

// Decoded, unscaled code values of rows [0, rows) and columns [k0, k1) as doubles: out [rows, k1 - k0].
// `threads`: whether to use OpenMP (not around OpenBLAS calls: the two thread pools would spin against
// each other on a small machine).
void decode_panel(const GemmOperand& q, int64_t k0, int64_t k1, double* out, bool threads) {
  const int64_t w = k1 - k0;
  const bool bytes = q.format == Format::E4M3 || q.format == Format::E5M2 || q.format == Format::INT8;
  float lut[256];
  if (bytes)
    for (int c = 0; c < 256; ++c) lut[c] = decode(q.format, static_cast<uint32_t>(c));
#pragma omp parallel for schedule(static) if (threads && q.rows * w > 65536)
  for (int64_t r = 0; r < q.rows; ++r) {
    double* o = out + r * w;
    if (bytes) {
      const uint8_t* src = q.codes + r * q.cols + k0;
      for (int64_t t = 0; t < w; ++t) o[t] = lut[src[t]];
    } else {
      std::vector<uint16_t> row(static_cast<size_t>(q.cols));
      unpack_row_codes(q.codes, q.format, q.cols, r, row.data());
      for (int64_t t = 0; t < w; ++t) o[t] = decode(q.format, row[static_cast<size_t>(k0 + t)]);
    }
  }
}

void promote_row(int64_t n, float sa, const float* sb, const double* partial, float* acc) {
  if (detail::promote_row_simd(n, sa, sb, partial, acc)) return;
  for (int64_t j = 0; j < n; ++j) acc[j] = std::fma(sa * sb[j], static_cast<float>(partial[j]), acc[j]);
}

// Exact mode (and INT8 in every integer-accumulating mode): FP64 dot product per K-group, FP32 promotion.
void exact_gemm(const GemmOperand& a, const GemmOperand& b, const Plan& p, float* acc) {
  const int64_t m = p.m, n = p.n, k = p.k;
  const int64_t gk = p.per_tensor ? kExactBlockK : p.group_k;
  const bool dgemm_exact = (a.format == Format::E4M3 && b.format == Format::E4M3) ||
                           (a.format == Format::INT8 && b.format == Format::INT8);
  std::fill(acc, acc + m * n, 0.0f);
  std::vector<double> ap, bp, part(static_cast<size_t>(m * n));
  std::vector<float> sbj(static_cast<size_t>(n), 1.0f);
  for (int64_t k0 = 0, g = 0; k0 < k; k0 += gk, ++g) {
    const int64_t k1 = std::min(k, k0 + gk), w = k1 - k0;
    ap.resize(static_cast<size_t>(m * w));
    bp.resize(static_cast<size_t>(n * w));
    decode_panel(a, k0, k1, ap.data(), !dgemm_exact);
    decode_panel(b, k0, k1, bp.data(), !dgemm_exact);
    if (dgemm_exact) {
      // Every partial sum is a multiple of the smallest product with fewer than 53 significant bits, so any
      // summation order OpenBLAS picks gives the exact sum.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(w), 1.0, ap.data(), static_cast<int>(w), bp.data(), static_cast<int>(w), 0.0,
                  part.data(), static_cast<int>(n));
    } else {
#pragma omp parallel for schedule(static) if (m * n * w > 65536)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          const double* x = ap.data() + i * w;
          const double* y = bp.data() + j * w;
          for (int64_t t = 0; t < w; ++t) s += x[t] * y[t];
          part[static_cast<size_t>(i * n + j)] = s;
        }
    }
    for (int64_t j = 0; j < n; ++j) sbj[static_cast<size_t>(j)] = p.sb.at(j, g);
#pragma omp parallel for schedule(static) if (!dgemm_exact && m * n > 65536)
    for (int64_t i = 0; i < m; ++i) promote_row(n, p.sa.at(i, g), sbj.data(), part.data() + i * n, acc + i * n);
  }
}

void fp32_gemm(const GemmOperand& a, const GemmOperand& b, const Plan& p, bool force_scalar, float* acc) {
  const std::vector<float> av = dequantized(a), bv = dequantized(b);
  if (!force_scalar && detail::fp32_gemm_simd(p.m, p.n, p.k, av.data(), bv.data(), acc)) return;
#pragma omp parallel for schedule(static) if (p.m * p.n * p.k > 65536)
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      float s = 0.0f;
      const float* x = av.data() + i * p.k;
      const float* y = bv.data() + j * p.k;
      for (int64_t t = 0; t < p.k; ++t) s = std::fma(x[t], y[t], s);
      acc[i * p.n + j] = s;
    }
}

bool row_has_special(const uint8_t* codes, int64_t k, const bool* special) {
  for (int64_t t = 0; t < k; ++t)
    if (special[codes[t]]) return true;
  return false;
}

void hopper_gemm(const GemmOperand& a, const GemmOperand& b, const Plan& plan, const GemmConfig& config,
                 float* acc) {
  detail::HopperProblem p;
  p.m = plan.m;
  p.n = plan.n;
  p.k = plan.k;
  p.a = a.codes;
  p.b = b.codes;
  p.fa = fp8_of(a.format);
  p.fb = fp8_of(b.format);
  p.sa = plan.sa;
  p.sb = plan.sb;
  p.per_tensor = plan.per_tensor;
  p.group_k = plan.group_k;
  p.promote = config.promote_interval;
  const bool simd = !config.force_scalar && detail::hopper_gemm_simd(p, acc);
  if (!simd) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) acc[i * p.n + j] = detail::hopper_element(p, i, j);
    return;
  }
  // The SIMD kernel treats NaN/Inf codes as zeros; rows holding them are recomputed with the model.
  bool special_a[256], special_b[256];
  for (int c = 0; c < 256; ++c) {
    special_a[c] = num::fp8_parts(p.fa, static_cast<uint8_t>(c)).special;
    special_b[c] = num::fp8_parts(p.fb, static_cast<uint8_t>(c)).special;
  }
  std::vector<char> a_special(static_cast<size_t>(p.m)), b_special(static_cast<size_t>(p.n));
  for (int64_t i = 0; i < p.m; ++i) a_special[static_cast<size_t>(i)] = row_has_special(p.a + i * p.k, p.k, special_a);
  for (int64_t j = 0; j < p.n; ++j) b_special[static_cast<size_t>(j)] = row_has_special(p.b + j * p.k, p.k, special_b);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      if (a_special[static_cast<size_t>(i)] || b_special[static_cast<size_t>(j)])
        acc[i * p.n + j] = detail::hopper_element(p, i, j);
}

Plan accumulate(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, const float* c,
                std::vector<float>& acc);

// Split-K (config.k_splits > 1): each range accumulated from zero, the ranges added in order.
Plan accumulate_split(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, const float* c,
                      std::vector<float>& acc) {
  const Plan plan = validate(a, b, config, c);
  FP8T_CHECK(!plan.per_tensor && config.mode != AccumMode::Fp32,
             "ref_gemm: k_splits = {} needs block-scaled operands in exact or hopper mode", config.k_splits);
  FP8T_CHECK(plan.k % plan.group_k == 0, "ref_gemm: k_splits needs K = {} to be a multiple of the scale block {}",
             plan.k, plan.group_k);
  const int64_t groups = plan.k / plan.group_k;
  FP8T_CHECK(config.k_splits <= groups, "ref_gemm: k_splits = {} exceeds the {} K groups", config.k_splits, groups);
  GemmConfig one = config;
  one.k_splits = 1;
  acc.assign(static_cast<size_t>(plan.m * plan.n), 0.0f);
  std::vector<float> part;
  for (int s = 0; s < config.k_splits; ++s) {
    const int64_t g0 = num::split_range_begin(groups, config.k_splits, s);
    const int64_t g1 = num::split_range_begin(groups, config.k_splits, s + 1);
    const QTensor as = k_slice(a, g0, g1), bs = k_slice(b, g0, g1);
    accumulate(gemm_operand(as, "A"), gemm_operand(bs, "B"), one, c, part);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = s == 0 ? part[i] : acc[i] + part[i];
  }
  return plan;
}

// The accumulation of every mode, before the epilogue: acc [M, N].
Plan accumulate(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, const float* c,
                std::vector<float>& acc) {
  FP8T_CHECK(config.k_splits >= 1, "ref_gemm: k_splits must be >= 1, got {}", config.k_splits);
  if (config.k_splits > 1) return accumulate_split(a, b, config, c, acc);
  const Plan plan = validate(a, b, config, c);
  acc.assign(static_cast<size_t>(plan.m * plan.n), 0.0f);
  if (plan.m * plan.n == 0 || plan.k == 0) return plan;
  if (config.mode == AccumMode::Fp32) {
    fp32_gemm(a, b, plan, config.force_scalar, acc.data());
  } else if (config.mode == AccumMode::Exact || a.format == Format::INT8) {
    exact_gemm(a, b, plan, acc.data());
  } else {
    hopper_gemm(a, b, plan, config, acc.data());
  }
  return plan;
}

// d = (sa * sb) * acc for per-tensor operands outside fp32 mode, then c + d when accumulating.
float epilogue(float v, float tensor_scale, bool scale, const float* c, int64_t idx) {
  if (scale) v = tensor_scale * v;
  if (c != nullptr) v = c[idx] + v;
  return v;
}

}  // namespace


GemmOperand gemm_operand(const QTensor& q, const char* name) {
  check_tensor(q, name);
  GemmOperand o;
  o.format = q.format();
  o.granularity = q.granularity();
  o.rows = q.rows;
  o.cols = q.cols;
  o.codes = q.code_ptr();
  o.scales = q.scale_ptr();
  return o;
}

QTensor k_slice(const GemmOperand& q, int64_t g0, int64_t g1) {
  check_operand(q, "k_slice");
  FP8T_CHECK(!q.granularity.per_tensor, "k_slice: a per-tensor operand has no K groups");
  const int64_t G = q.granularity.block_cols, c0 = g0 * G, w = std::min(q.cols, g1 * G) - c0;
  FP8T_CHECK(g0 >= 0 && g0 <= g1 && c0 <= q.cols, "k_slice: K groups [{}, {}) of a [{}, {}] operand", g0, g1, q.rows,
             q.cols);
  QuantSpec spec;
  spec.format = q.format;
  spec.granularity = q.granularity;
  QTensor out = QTensor::empty(spec, q.rows, w, 1, true, false, ScaleLayout::RowMajor, Device::cpu());
  const size_t row_bytes = code_bytes(q.format, q.cols), slice_bytes = code_bytes(q.format, w),
               offset = code_bytes(q.format, c0);
  for (int64_t r = 0; r < q.rows; ++r)
    std::copy_n(q.codes + r * row_bytes + offset, slice_bytes, out.code_ptr() + r * slice_bytes);
  const int64_t sr = q.scale_rows(), sc = q.scale_cols(), nc = out.scale_cols();
  for (int64_t r = 0; r < sr; ++r) std::copy_n(q.scales + r * sc + g0, nc, out.scale_ptr() + r * nc);
  return out;
}

QTensor k_slice(const QTensor& q, int64_t g0, int64_t g1) {
  QTensor out = k_slice(gemm_operand(q, "k_slice"), g0, g1);
  out.spec = q.spec;
  out.pow2_scales = q.pow2_scales;
  return out;
}

void ref_gemm(const QTensor& a, const QTensor& b, const GemmConfig& config, float* d, const float* c) {
  ref_gemm(gemm_operand(a, "A"), gemm_operand(b, "B"), config, d, c);
}

void ref_gemm(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, float* d, const float* c) {
  std::vector<float> acc;
  const Plan plan = accumulate(a, b, config, c, acc);
  const bool scale = plan.per_tensor && config.mode != AccumMode::Fp32;
  const float ts = scale ? a.scales[0] * b.scales[0] : 1.0f;
  const float* cc = config.accumulate ? c : nullptr;
  for (int64_t idx = 0; idx < plan.m * plan.n; ++idx)
    d[idx] = epilogue(acc[static_cast<size_t>(idx)], ts, scale, cc, idx);
}

std::vector<float> ref_gemm(const QTensor& a, const QTensor& b, const GemmConfig& config,
                            const std::vector<float>* c) {
  if (config.accumulate)
    FP8T_CHECK(c != nullptr && static_cast<int64_t>(c->size()) == a.rows * b.rows,
               "ref_gemm: C must hold M·N = {} values, got {}", a.rows * b.rows, c ? c->size() : 0);
  std::vector<float> d(static_cast<size_t>(std::max<int64_t>(0, a.rows) * std::max<int64_t>(0, b.rows)));
  ref_gemm(a, b, config, d.data(), c ? c->data() : nullptr);
  return d;
}

void ref_gemm_fp64(const QTensor& a, const QTensor& b, double* d) {
  check_tensor(a, "A");
  check_tensor(b, "B");
  FP8T_CHECK(a.cols == b.cols, "ref_gemm_fp64: A is [{}, {}] and B is [{}, {}]; D = A·Bᵀ needs the same K", a.rows,
             a.cols, b.rows, b.cols);
  const int64_t m = a.rows, n = b.rows, k = a.cols;
  if (m * n == 0) return;
  if (k == 0) {
    std::fill(d, d + m * n, 0.0);
    return;
  }
  const std::vector<float> af = dequantize(a), bf = dequantize(b);
  const std::vector<double> ad(af.begin(), af.end()), bd(bf.begin(), bf.end());
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0, ad.data(), static_cast<int>(k), bd.data(), static_cast<int>(k), 0.0, d, static_cast<int>(n));
}

std::vector<double> ref_gemm_fp64(const QTensor& a, const QTensor& b) {
  std::vector<double> d(static_cast<size_t>(std::max<int64_t>(0, a.rows) * std::max<int64_t>(0, b.rows)));
  ref_gemm_fp64(a, b, d.data());
  return d;
}

void ref_gemm_bf16(const QTensor& a, const QTensor& b, const GemmConfig& config, uint16_t* d_bf16,
                   const float* c) {
  ref_gemm_bf16(gemm_operand(a, "A"), gemm_operand(b, "B"), config, d_bf16, c);
}

void ref_gemm_bf16(const GemmOperand& a, const GemmOperand& b, const GemmConfig& config, uint16_t* d_bf16,
                   const float* c) {
  std::vector<float> acc;
  const Plan plan = accumulate(a, b, config, c, acc);
  const bool scale = plan.per_tensor && config.mode != AccumMode::Fp32;
  const float ts = scale ? a.scales[0] * b.scales[0] : 1.0f;
  const float* cc = config.accumulate ? c : nullptr;
  for (int64_t idx = 0; idx < plan.m * plan.n; ++idx)
    d_bf16[idx] = num::bf16_encode(epilogue(acc[static_cast<size_t>(idx)], ts, scale, cc, idx));
}

}  // namespace fp8train::quant
