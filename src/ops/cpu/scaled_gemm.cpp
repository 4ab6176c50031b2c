// CPU scaled GEMMs (ops/scaled_gemm.h): quant::ref_gemm / ref_gemm_bf16 bit for bit, on views of the operands'
// codes with row-major scales (GemmNative scales are re-laid out first, an exact copy).
//   dense      d = ref_gemm(a, b) (+ d)
//   grouped    expert e: d[offsets[e] .. offsets[e+1]) = ref_gemm(a's rows of e, b's group e) (+ d)
//   grouped_k  expert e: d[e] = ref_gemm(a[:, K_e], b[:, K_e]) (+ d[e]); an empty K_e leaves d[e] (accumulate)
//              or zeroes it
// accumulate: d = d + a·bᵀ is ref_gemm's accumulate-into-C with C = d (one FP32 add; BF16 d is widened first, so
// the sum is rounded to BF16 once).
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "numerics/formats.h"
#include "ops/cpu/kernels.h"
#include "ops/scaled_gemm.h"
#include "quant/ref_gemm.h"

namespace fp8train::ops::cpu {
namespace {

// One group's view of an operand: `rows` rows starting at row `r0` (code rows are contiguous), scales row-major.
struct OperandView {
  quant::GemmOperand op;
  std::vector<float> scales;  // the row-major copy, when the payload's layout is not row-major
};

// Group g of an operand (all of it when groups = 1), rows [r0, r1) of that group.
OperandView view(const ScaledOperand& o, int64_t g, int64_t r0, int64_t r1) {
  const quant::ScaleGrid grid{o.granularity, o.rows, o.cols, o.groups, o.layout};
  const int64_t rg = o.rows / o.groups;
  OperandView v;
  v.op.format = o.format;
  v.op.granularity = o.granularity;
  v.op.rows = r1 - r0;
  v.op.cols = o.cols;
  v.op.codes = static_cast<const uint8_t*>(o.codes) + quant::code_bytes(o.format, (g * rg + r0) * o.cols);
  const quant::ScaleStrides s = grid.strides();
  if (o.granularity.per_tensor) {
    v.op.scales = o.scales + g * s.group;
    return v;
  }
  FP8T_CHECK(r0 % o.granularity.block_rows == 0, "scaled GEMM: row {} does not start a {}-row scale block", r0,
             o.granularity.block_rows);
  const int64_t br0 = r0 / o.granularity.block_rows, sr = o.granularity.scale_rows(r1 - r0), sc = grid.block_cols();
  if (o.layout == quant::ScaleLayout::RowMajor) {
    v.op.scales = o.scales + g * s.group + br0 * s.row;
    return v;
  }
  v.scales.resize(static_cast<size_t>(sr * sc));
  for (int64_t br = 0; br < sr; ++br)
    for (int64_t bc = 0; bc < sc; ++bc)
      v.scales[static_cast<size_t>(br * sc + bc)] = o.scales[g * s.group + (br0 + br) * s.row + bc * s.col];
  v.op.scales = v.scales.data();
  return v;
}

// d [m, n] (row stride ldd, F32 or BF16) = a·bᵀ (+ d).
void gemm_into(const quant::GemmOperand& a, const quant::GemmOperand& b, const quant::GemmConfig& numerics,
               bool accumulate, DType out, void* d, int64_t ldd) {
  const int64_t m = a.rows, n = b.rows;
  quant::GemmConfig cfg = numerics;
  cfg.accumulate = accumulate;
  if (out == DType::F32 && ldd == n) {
    float* df = static_cast<float*>(d);
    quant::ref_gemm(a, b, cfg, df, accumulate ? df : nullptr);  // elementwise epilogue: C may alias D
    return;
  }
  std::vector<float> c;
  if (accumulate) {
    c.resize(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[static_cast<size_t>(i * n + j)] = out == DType::F32 ? static_cast<const float*>(d)[i * ldd + j]
                                                              : static_cast<float>(static_cast<const bf16*>(d)[i * ldd + j]);
  }
  if (out == DType::F32) {
    std::vector<float> r(static_cast<size_t>(m * n));
    quant::ref_gemm(a, b, cfg, r.data(), accumulate ? c.data() : nullptr);
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(static_cast<float*>(d) + i * ldd, r.data() + i * n, static_cast<size_t>(n) * sizeof(float));
  } else {
    std::vector<uint16_t> r(static_cast<size_t>(m * n));
    quant::ref_gemm_bf16(a, b, cfg, r.data(), accumulate ? c.data() : nullptr);
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(static_cast<uint16_t*>(d) + i * ldd, r.data() + i * n, static_cast<size_t>(n) * sizeof(uint16_t));
  }
}

// offsets[0..groups] non-decreasing multiples of `block` from 0, ending at or before `total` (an expert-ordered
// matrix may carry rows past the last expert: the MoE plan's capacity, ops/moe_dispatch.h).
void check_offsets(const char* op, const int32_t* offsets, int groups, int64_t total, int64_t block) {
  FP8T_CHECK(offsets[0] == 0, "{}: offsets[0] must be 0, got {}", op, offsets[0]);
  for (int e = 0; e < groups; ++e) {
    FP8T_CHECK(offsets[e + 1] >= offsets[e], "{}: offsets[{}] = {} is below offsets[{}] = {}", op, e + 1,
               offsets[e + 1], e, offsets[e]);
    FP8T_CHECK(offsets[e + 1] % block == 0, "{}: offsets[{}] = {} is not a multiple of {}", op, e + 1, offsets[e + 1],
               block);
  }
  FP8T_CHECK(offsets[groups] <= total, "{}: offsets[{}] = {} is beyond the {} rows", op, groups, offsets[groups],
             total);
}

}  // namespace

void scaled_gemm(const ExecCtx&, const ScaledGemmProblem& p, void* d) {
  const OperandView a = view(p.a, 0, 0, p.m), b = view(p.b, 0, 0, p.n);
  gemm_into(a.op, b.op, p.numerics, p.accumulate, p.out_dtype, d, p.ldd);
}

void scaled_gemm_grouped(const ExecCtx&, const ScaledGemmProblem& p, const int32_t* offsets, void* d) {
  check_offsets("scaled_gemm_grouped", offsets, p.num_groups, p.m, 128);
  const size_t esize = dtype_size(p.out_dtype);
  for (int e = 0; e < p.num_groups; ++e) {
    const int64_t r0 = offsets[e], r1 = offsets[e + 1];
    if (r1 == r0) continue;
    const OperandView a = view(p.a, 0, r0, r1), b = view(p.b, e, 0, p.n);
    gemm_into(a.op, b.op, p.numerics, p.accumulate, p.out_dtype, static_cast<char*>(d) + r0 * p.ldd * esize, p.ldd);
  }
  // Rows past the last expert: zeros (what the CUDA kernel computes there from the zero rows the plan gives a).
  if (!p.accumulate)
    for (int64_t r = offsets[p.num_groups]; r < p.m; ++r)
      std::memset(static_cast<char*>(d) + r * p.ldd * esize, 0, static_cast<size_t>(p.n) * esize);
}

void scaled_gemm_grouped_k(const ExecCtx&, const ScaledGemmProblem& p, const int32_t* k_offsets, void* d) {
  const bool per_tensor = p.a.granularity.per_tensor;
  // Per-tensor operands: each expert's K range is its own GEMM under the tensors' scales (columns sliced as is).
  const int64_t G = per_tensor ? 1 : p.a.granularity.block_cols;
  check_offsets("scaled_gemm_grouped_k", k_offsets, p.num_groups, p.k, G);
  const OperandView a = view(p.a, 0, 0, p.m), b = view(p.b, 0, 0, p.n);
  auto columns = [](const quant::GemmOperand& o, int64_t k0, int64_t k1, std::vector<uint8_t>& codes) {
    const size_t es = quant::code_bytes(o.format, 1);
    FP8T_CHECK(quant::code_bytes(o.format, o.cols) == es * static_cast<size_t>(o.cols),
               "scaled_gemm_grouped_k: per-tensor {} codes cannot be sliced along K", quant::format_name(o.format));
    codes.resize(static_cast<size_t>(o.rows * (k1 - k0)) * es);
    for (int64_t r = 0; r < o.rows; ++r)
      std::memcpy(codes.data() + r * (k1 - k0) * es, o.codes + (r * o.cols + k0) * es,
                  static_cast<size_t>(k1 - k0) * es);
    quant::GemmOperand s = o;
    s.cols = k1 - k0;
    s.codes = codes.data();
    return s;
  };
  for (int e = 0; e < p.num_groups; ++e) {
    float* de = static_cast<float*>(d) + static_cast<int64_t>(e) * p.m * p.n;
    const int64_t g0 = k_offsets[e] / G, g1 = k_offsets[e + 1] / G;
    if (g1 == g0) {
      if (!p.accumulate) std::fill(de, de + p.m * p.n, 0.0f);
      continue;
    }
    if (per_tensor) {
      std::vector<uint8_t> ca, cb;
      gemm_into(columns(a.op, g0, g1, ca), columns(b.op, g0, g1, cb), p.numerics, p.accumulate, DType::F32, de, p.n);
      continue;
    }
    const quant::QTensor as = quant::k_slice(a.op, g0, g1), bs = quant::k_slice(b.op, g0, g1);
    gemm_into(quant::gemm_operand(as, "a"), quant::gemm_operand(bs, "b"), p.numerics, p.accumulate, DType::F32, de,
              p.n);
  }
}

}  // namespace fp8train::ops::cpu
