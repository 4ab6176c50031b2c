// Shared machinery of the SNR study (see snr_internal.h): quantization with the lab's scaling names,
// batched inner products under one accumulation, scoring, and the deterministic parallel task runner.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <span>

#include "common/error.h"
#include "lab/lab_dot.h"
#include "lab/snr_internal.h"
#include "numerics/hopper_accum.h"
#include "numerics/metrics.h"

namespace fp8train::lab::detail {
namespace {

num::Fp8Format fp8_format(quant::Format f) {
  FP8T_CHECK(f == quant::Format::E4M3 || f == quant::Format::E5M2,
             "the Hopper/FP32 dot products take E4M3 or E5M2 operands, got {}", quant::format_name(f));
  return f == quant::Format::E4M3 ? num::Fp8Format::E4M3 : num::Fp8Format::E5M2;
}

}  // namespace

LabOperand lab_operand(const quant::QTensor& q) {
  FP8T_CHECK(q.format() == quant::Format::E4M3 || q.format() == quant::Format::E5M2 || q.format() == quant::Format::INT8,
             "the lab works on one-byte formats (e4m3, e5m2, int8), got {}", quant::format_name(q.format()));
  FP8T_CHECK(q.groups == 1, "the lab works on single-group tensors, got {} groups", q.groups);
  LabOperand op;
  op.format = q.format();
  op.rows = q.rows;
  op.cols = q.cols;
  op.block_rows = q.granularity().per_tensor ? std::max<int64_t>(1, q.rows) : q.granularity().block_rows;
  op.block_cols = q.granularity().per_tensor ? std::max<int64_t>(1, q.cols) : q.granularity().block_cols;
  op.scale_cols = q.scale_cols();
  op.codes = q.code_vector();
  op.scales = q.row_major_scales();
  return op;
}

namespace {

LabOperand from_quant(const quant::QTensor& q) { return lab_operand(q); }

// Scale of every group of `group` elements of row r: ceil(cols / group) values.
std::vector<float> group_scales(const LabOperand& op, int64_t r, int64_t group) {
  const int64_t n = (op.cols + group - 1) / group;
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t g = 0; g < n; ++g) s[g] = op.scale(r, g * group);
  return s;
}

}  // namespace

LabOperand quantize_operand(const std::vector<float>& x, int64_t rows, int64_t cols, quant::Format format,
                            const std::string& scaling, bool per_row_tensor, quant::Rounding rounding,
                            uint64_t seed) {
  FP8T_CHECK(static_cast<int64_t>(x.size()) == rows * cols, "sample matrix holds {} values, expected {} x {}",
             x.size(), rows, cols);
  if (scaling == "none") {
    const quant::QTensor q = quant::quantize_with_scale(x.data(), rows, cols, format, {1.0f, 1.0f}, rounding, seed);
    return from_quant(q);
  }
  if (scaling == "tensor" && per_row_tensor) {
    LabOperand op;
    op.format = format;
    op.rows = rows;
    op.cols = cols;
    op.block_rows = 1;
    op.block_cols = std::max<int64_t>(1, cols);
    op.scale_cols = 1;
    op.codes.resize(static_cast<size_t>(rows * cols));
    op.scales.resize(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      quant::QuantSpec cfg{format, quant::Granularity::tensor(), quant::ScaleMode::Amax, rounding, seed + static_cast<uint64_t>(r)};
      const quant::QTensor q = quant::quantize(x.data() + r * cols, 1, cols, cfg);
      std::copy_n(q.code_ptr(), q.code_byte_count(), op.codes.begin() + r * cols);
      op.scales[r] = q.scale_ptr()[0];
    }
    return op;
  }
  quant::QuantSpec cfg{format, quant::parse_granularity(scaling), quant::ScaleMode::Amax, rounding, seed};
  return from_quant(quant::quantize(x.data(), rows, cols, cfg));
}

LabOperand quantize_slice(const float* x, int64_t rows, int64_t cols, quant::Format format, const std::string& scaling,
                          float tensor_amax) {
  if (scaling == "tensor") {
    const quant::BlockScale bs = quant::block_scale(tensor_amax, format, quant::ScaleMode::Amax);
    return from_quant(quant::quantize_with_scale(x, rows, cols, format, bs));
  }
  quant::QuantSpec cfg{format, quant::parse_granularity(scaling), quant::ScaleMode::Amax, quant::Rounding::Nearest, 0};
  return from_quant(quant::quantize(x, rows, cols, cfg));
}

quant::QTensor as_row_tiles(const LabOperand& op, int64_t tile) {
  FP8T_CHECK(tile >= 1 && op.cols % tile == 0 && (op.block_cols % tile == 0),
             "as_row_tiles: {}-column scale blocks cannot be re-expressed as 1x{} tiles of {} columns", op.block_cols,
             tile, op.cols);
  quant::QuantSpec spec;
  spec.format = op.format;
  spec.granularity = quant::Granularity::row_tile(tile);
  quant::QTensor q = quant::QTensor::empty(spec, op.rows, op.cols, 1, true, false, quant::ScaleLayout::RowMajor,
                                           Device::cpu());
  q.pow2_scales = false;
  std::copy(op.codes.begin(), op.codes.end(), q.code_ptr());
  const int64_t tiles = op.cols / tile;
  float* scales = q.scale_ptr();
  for (int64_t r = 0; r < op.rows; ++r)
    for (int64_t g = 0; g < tiles; ++g) scales[r * tiles + g] = op.scale(r, g * tile);
  return q;
}

std::vector<float> quantized_dots(const LabOperand& a, const LabOperand& b,
                                  const std::vector<std::pair<int64_t, int64_t>>& pairs, const Accumulation& acc) {
  FP8T_CHECK(a.cols == b.cols, "inner products need one K, got {} and {}", a.cols, b.cols);
  const int64_t k = a.cols;
  const int64_t group = std::min(a.block_cols, b.block_cols);
  FP8T_CHECK(std::max(a.block_cols, b.block_cols) % group == 0 || std::max(a.block_cols, b.block_cols) >= k,
             "scale blocks of {} and {} columns do not nest", a.block_cols, b.block_cols);
  const bool int8 = a.format == quant::Format::INT8;
  FP8T_CHECK(int8 == (b.format == quant::Format::INT8), "INT8 pairs only with INT8");
  FP8T_CHECK(!int8 || acc.name == "int32", "INT8 operands accumulate in int32, not '{}'", acc.name);
  FP8T_CHECK(int8 || acc.name == "hopper" || acc.name == "fp32", "unknown FP8 accumulation '{}'", acc.name);
  std::vector<float> out(pairs.size());
  for (size_t p = 0; p < pairs.size(); ++p) {
    const auto [i, j] = pairs[p];
    const std::vector<float> sa = group_scales(a, i, group), sb = group_scales(b, j, group);
    if (int8) {
      const Int8Operand oa{reinterpret_cast<const int8_t*>(a.codes.data() + i * k), sa.data()};
      const Int8Operand ob{reinterpret_cast<const int8_t*>(b.codes.data() + j * k), sb.data()};
      out[p] = int8_dot_grouped(oa, ob, k, group);
      continue;
    }
    const Fp8Operand oa{a.codes.data() + i * k, fp8_format(a.format), sa.data()};
    const Fp8Operand ob{b.codes.data() + j * k, fp8_format(b.format), sb.data()};
    out[p] = acc.name == "hopper" ? hopper_dot_grouped(oa, ob, k, group, acc.promote_interval)
                                  : fp32_dot_grouped(oa, ob, k, group);
  }
  return out;
}

std::vector<double> exact_dots(const std::vector<float>& a, const std::vector<float>& b, int64_t k,
                               const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<double> out(pairs.size());
#pragma omp parallel for schedule(static) if (pairs.size() * static_cast<size_t>(k) > (1u << 22))
  for (size_t p = 0; p < pairs.size(); ++p)
    out[p] = exact_dot(a.data() + pairs[p].first * k, b.data() + pairs[p].second * k, k);
  return out;
}

std::vector<double> dequantized_dots(const LabOperand& a, const LabOperand& b,
                                     const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  FP8T_CHECK(a.cols == b.cols, "inner products need one K, got {} and {}", a.cols, b.cols);
  const int64_t k = a.cols;
  // Decoded code values of each format, by code (the formats here are one byte wide).
  auto table = [](quant::Format f) {
    std::vector<double> t(256);
    for (uint32_t code = 0; code < 256; ++code) t[code] = quant::decode(f, code);
    return t;
  };
  const std::vector<double> ta = table(a.format), tb = table(b.format);
  const int64_t group = std::min(a.block_cols, b.block_cols);
  std::vector<double> out(pairs.size());
  // Each output is independent and summed in a fixed order: the same bits on any number of threads.
#pragma omp parallel for schedule(static) if (pairs.size() * static_cast<size_t>(k) > (1u << 22))
  for (size_t p = 0; p < pairs.size(); ++p) {
    const auto [i, j] = pairs[p];
    const uint8_t* ca = a.codes.data() + i * k;
    const uint8_t* cb = b.codes.data() + j * k;
    double total = 0.0;
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t end = std::min(k, g0 + group);
      double partial = 0.0;  // exact for E4M3 and INT8 (< 53 bits even over K = 16384); E5M2: 2^-53 relative
      for (int64_t t = g0; t < end; ++t) partial += ta[ca[t]] * tb[cb[t]];
      total += static_cast<double>(a.scale(i, g0)) * static_cast<double>(b.scale(j, g0)) * partial;
    }
    out[p] = total;
  }
  return out;
}

void score(SnrRow& row, const std::vector<double>& ref, const std::vector<float>& test,
           const std::vector<double>* ref_quantized) {
  row.snr_db = num::snr_db(std::span<const double>(ref), std::span<const float>(test));
  row.calc_diff = num::calc_diff(std::span<const float>(test), std::span<const double>(ref));
  if (ref_quantized)
    row.accum_snr_db = num::snr_db(std::span<const double>(*ref_quantized), std::span<const float>(test));
}

void score(SnrRow& row, const std::vector<double>& ref, const LabOperand& a, const LabOperand& b,
           const std::vector<std::pair<int64_t, int64_t>>& pairs, const Accumulation& acc) {
  const std::vector<double> ref_quantized = dequantized_dots(a, b, pairs);
  score(row, ref, quantized_dots(a, b, pairs, acc), &ref_quantized);
}

std::vector<SnrRow> run_tasks(int n, const std::function<std::vector<SnrRow>(int)>& task) {
  std::vector<std::vector<SnrRow>> slots(static_cast<size_t>(std::max(0, n)));
  std::vector<std::exception_ptr> errors(slots.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < n; ++i) {
    try {
      slots[i] = task(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<SnrRow> rows;
  for (auto& s : slots) rows.insert(rows.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
  return rows;
}

std::vector<std::pair<int64_t, int64_t>> diagonal_pairs(int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t i = 0; i < n; ++i) p.emplace_back(i, i);
  return p;
}

}  // namespace fp8train::lab::detail
