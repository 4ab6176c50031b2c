// QTensor (qtensor.h): allocation, scale-grid geometry, views (transposed, one group), device copies and the
// host element accessors of the row-wise payload.
#include "quant/qtensor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "numerics/formats.h"
#include "quant/quant.h"

namespace fp8train::quant {

std::string_view scale_layout_name(ScaleLayout layout) {
  return layout == ScaleLayout::RowMajor ? "row-major" : "gemm-native";
}

// ---- scale grids ---------------------------------------------------------------------------------------------
namespace {
int64_t round_up4(int64_t v) { return (v + 3) / 4 * 4; }
bool mn_major(const Granularity& g, ScaleLayout layout) {
  return layout == ScaleLayout::GemmNative && !g.per_tensor && g.block_rows == 1;
}
}  // namespace

Shape ScaleGrid::shape() const {
  const int64_t sr = block_rows_per_group(), sc = block_cols();
  if (granularity.per_tensor) return {groups, 1};
  if (layout == ScaleLayout::RowMajor) return {groups * sr, sc};
  if (mn_major(granularity, layout)) return {sc, rows};
  return {groups * sr, round_up4(sc)};
}

int64_t ScaleGrid::numel() const {
  const Shape s = shape();
  return s[0] * s[1];
}

ScaleStrides ScaleGrid::strides() const {
  const int64_t sr = block_rows_per_group(), sc = block_cols();
  if (granularity.per_tensor) return {0, 0, 1};
  if (layout == ScaleLayout::RowMajor) return {sc, 1, sr * sc};
  if (mn_major(granularity, layout)) return {1, rows, group_rows()};
  const int64_t pitch = round_up4(sc);
  return {pitch, 1, sr * pitch};
}

int64_t ScaleGrid::offset_of(int64_t r, int64_t c) const {
  const int64_t rg = group_rows();
  const int64_t g = rg > 0 ? r / rg : 0, rl = rg > 0 ? r % rg : 0;
  const ScaleStrides s = strides();
  if (granularity.per_tensor) return g * s.group;
  return g * s.group + (rl / granularity.block_rows) * s.row + (c / granularity.block_cols) * s.col;
}

// ---- allocation ----------------------------------------------------------------------------------------------
namespace {
Tensor make_codes(Format f, int64_t rows, int64_t cols, Device device, MemCategory category) {
  switch (f) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8: return Tensor::empty({rows, cols}, DType::U8, category, device);
    case Format::BF16: return Tensor::empty({rows, cols}, DType::BF16, category, device);
    case Format::E5M6:
      return Tensor::empty({static_cast<int64_t>(code_bytes(f, rows * cols))}, DType::U8, category, device);
  }
  FP8T_FAIL("QTensor: invalid format value {}", static_cast<int>(f));
}

QPayload make_payload(Format f, const ScaleGrid& grid, Device device, MemCategory category) {
  QPayload p;
  p.codes = make_codes(f, grid.rows, grid.cols, device, category);
  p.scales = Tensor::zeros(grid.shape(), DType::F32, category, device);
  p.layout = grid.layout;
  return p;
}

void check_host(const QTensor& q, const char* what) {
  FP8T_CHECK(q.rowwise.defined(), "QTensor::{}: the tensor has no row-wise payload", what);
  FP8T_CHECK(q.rowwise.codes.device().is_cpu(), "QTensor::{}: the tensor lives on {}; host access needs a CPU tensor",
             what, q.rowwise.codes.device().str());
}

void check_index(const QTensor& q, int64_t r, int64_t c) {
  FP8T_CHECK(r >= 0 && r < q.rows && c >= 0 && c < q.cols, "element ({}, {}) is outside the [{}, {}] tensor", r, c,
             q.rows, q.cols);
}
}  // namespace

QTensor QTensor::empty(const QuantSpec& spec, int64_t rows, int64_t cols, int64_t groups, bool with_rowwise,
                       bool with_colwise, ScaleLayout layout, Device device, MemCategory category) {
  check_spec(spec, "QTensor");
  FP8T_CHECK(rows >= 0 && cols >= 0, "QTensor: shape [{}, {}] has a negative dimension", rows, cols);
  FP8T_CHECK(groups >= 1 && rows % groups == 0, "QTensor: {} rows do not split into {} equal groups", rows, groups);
  QTensor q;
  q.spec = spec;
  q.rows = rows;
  q.cols = cols;
  q.groups = groups;
  q.pow2_scales = spec.scale_mode == ScaleMode::PowerOfTwo || !is_scaled(spec.format);
  if (with_rowwise) q.rowwise = make_payload(spec.format, {spec.granularity, rows, cols, groups, layout}, device, category);
  if (with_colwise)
    q.colwise = make_payload(spec.format, {spec.granularity, groups * cols, rows / groups, groups, layout}, device,
                             category);
  return q;
}

Device QTensor::device() const {
  if (rowwise.defined()) return rowwise.codes.device();
  FP8T_CHECK(colwise.defined(), "QTensor: an undefined tensor has no device");
  return colwise.codes.device();
}

// ---- views and copies ------------------------------------------------------------------------------------------
QTensor QTensor::transposed() const {
  FP8T_CHECK(colwise.defined(), "QTensor::transposed: the [{}, {}] tensor has no column-wise payload", rows, cols);
  QTensor t = *this;
  std::swap(t.rowwise, t.colwise);
  t.rows = groups * cols;
  t.cols = group_rows();
  return t;
}

QTensor QTensor::rowwise_only() const {
  QTensor t = *this;
  t.colwise = QPayload{};
  return t;
}

QTensor QTensor::group(int64_t g) const {
  check_host(*this, "group");
  FP8T_CHECK(g >= 0 && g < groups, "QTensor::group: group {} of {}", g, groups);
  const int64_t rg = group_rows();
  QTensor t;
  t.spec = spec;
  t.rows = rg;
  t.cols = cols;
  t.groups = 1;
  t.pow2_scales = pow2_scales;
  t.rowwise.layout = ScaleLayout::RowMajor;
  // codes
  if (spec.format != Format::E5M6) {
    t.rowwise.codes = rowwise.codes.rows(g * rg, (g + 1) * rg);
  } else {
    const int64_t first = g * rg * cols, n = rg * cols;
    if (first % 8 == 0 && (n % 8 == 0 || g == groups - 1)) {
      t.rowwise.codes = rowwise.codes.narrow(0, static_cast<int64_t>(code_bytes(Format::E5M6, first)),
                                             static_cast<int64_t>(code_bytes(Format::E5M6, n)));
    } else {  // the group does not start or end on a packing boundary: repack its codes
      std::vector<uint16_t> values(static_cast<size_t>(n));
      const auto* src = static_cast<const uint8_t*>(rowwise.codes.raw());
      for (int64_t r = 0; r < rg; ++r) unpack_row_codes(src, Format::E5M6, cols, g * rg + r, values.data() + r * cols);
      t.rowwise.codes = make_codes(Format::E5M6, rg, cols, Device::cpu(), rowwise.codes.category());
      pack_codes(values.data(), n, Format::E5M6, static_cast<uint8_t*>(t.rowwise.codes.raw()));
    }
  }
  // scales
  const ScaleGrid grid = rowwise_grid();
  const int64_t sr = grid.block_rows_per_group(), sc = grid.block_cols();
  if (spec.granularity.per_tensor) {
    t.rowwise.scales = rowwise.scales.rows(g, g + 1);
  } else if (rowwise.layout == ScaleLayout::RowMajor) {
    t.rowwise.scales = rowwise.scales.rows(g * sr, (g + 1) * sr);
  } else {
    t.rowwise.scales = Tensor::empty({sr, sc}, DType::F32, rowwise.scales.category(), Device::cpu());
    const float* src = rowwise.scales.data<float>();
    float* dst = t.rowwise.scales.data<float>();
    const ScaleStrides s = grid.strides();
    for (int64_t br = 0; br < sr; ++br)
      for (int64_t bc = 0; bc < sc; ++bc) dst[br * sc + bc] = src[g * s.group + br * s.row + bc * s.col];
  }
  return t;
}

namespace {
QPayload payload_to(const QPayload& p, Device device, MemCategory category) {
  if (!p.defined()) return {};
  return {p.codes.to(device, category), p.scales.to(device, category), p.layout};
}
}  // namespace

QTensor QTensor::to(Device device, MemCategory category) const {
  QTensor t = *this;
  t.rowwise = payload_to(rowwise, device, category);
  t.colwise = payload_to(colwise, device, category);
  return t;
}

void QTensor::set_category(MemCategory category) const {
  for (const QPayload* p : {&rowwise, &colwise}) {
    if (!p->defined()) continue;
    p->codes.storage().set_category(category);
    p->scales.storage().set_category(category);
  }
}

size_t QTensor::bytes() const {
  size_t b = 0;
  for (const QPayload* p : {&rowwise, &colwise})
    if (p->defined()) b += p->codes.nbytes() + p->scales.nbytes();
  return b;
}

// ---- host access -------------------------------------------------------------------------------------------------
uint8_t* QTensor::code_ptr() const {
  check_host(*this, "code_ptr");
  return static_cast<uint8_t*>(rowwise.codes.raw());
}

float* QTensor::scale_ptr() const {
  check_host(*this, "scale_ptr");
  return rowwise.scales.data<float>();
}

float QTensor::scale_of(int64_t r, int64_t c) const {
  check_host(*this, "scale_of");
  check_index(*this, r, c);
  return rowwise.scales.data<float>()[rowwise_grid().offset_of(r, c)];
}

uint32_t QTensor::code_at(int64_t r, int64_t c) const {
  check_host(*this, "code_at");
  check_index(*this, r, c);
  const auto* codes = static_cast<const uint8_t*>(rowwise.codes.raw());
  const int64_t flat = r * cols + c;
  switch (spec.format) {
    case Format::E4M3:
    case Format::E5M2:
    case Format::INT8: return codes[flat];
    case Format::BF16: return static_cast<uint32_t>(codes[2 * flat]) | (static_cast<uint32_t>(codes[2 * flat + 1]) << 8);
    case Format::E5M6: {
      uint32_t words[3];
      std::memcpy(words, codes + 12 * (flat / 8), 12);
      uint16_t g[8];
      num::e5m6_unpack8(words, g);
      return g[flat % 8];
    }
  }
  FP8T_FAIL("invalid format value {}", static_cast<int>(spec.format));
}

float QTensor::decoded_at(int64_t r, int64_t c) const { return decode(spec.format, code_at(r, c)); }
float QTensor::value_at(int64_t r, int64_t c) const { return decoded_at(r, c) * scale_of(r, c); }

std::vector<float> QTensor::row_major_scales() const {
  FP8T_CHECK(rowwise.defined(), "QTensor::row_major_scales: the tensor has no row-wise payload");
  const std::vector<float> all = rowwise.scales.to_vector<float>();
  const ScaleGrid grid = rowwise_grid();
  const int64_t sr = grid.block_rows_per_group(), sc = grid.block_cols();
  const ScaleStrides s = grid.strides();
  std::vector<float> out(static_cast<size_t>(groups * sr * sc));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t br = 0; br < sr; ++br)
      for (int64_t bc = 0; bc < sc; ++bc)
        out[static_cast<size_t>((g * sr + br) * sc + bc)] = all[static_cast<size_t>(g * s.group + br * s.row + bc * s.col)];
  return out;
}

std::vector<uint8_t> QTensor::code_vector() const {
  FP8T_CHECK(rowwise.defined(), "QTensor::code_vector: the tensor has no row-wise payload");
  const Tensor host = rowwise.codes.device().is_cpu() ? rowwise.codes : rowwise.codes.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(host.raw());
  return std::vector<uint8_t>(p, p + host.nbytes());
}

QPayload relayout_scales(const QPayload& p, const ScaleGrid& from, ScaleLayout to, MemCategory category) {
  FP8T_CHECK(p.defined(), "relayout_scales: undefined payload");
  FP8T_CHECK(p.layout == from.layout, "relayout_scales: the payload's layout ({}) is not the grid's ({})",
             scale_layout_name(p.layout), scale_layout_name(from.layout));
  if (to == from.layout) return p;
  FP8T_CHECK(p.scales.device().is_cpu(), "relayout_scales: scales on {}; only CPU scales are re-laid out here",
             p.scales.device().str());
  ScaleGrid target = from;
  target.layout = to;
  QPayload out;
  out.codes = p.codes;
  out.layout = to;
  out.scales = Tensor::zeros(target.shape(), DType::F32, category, Device::cpu());
  const float* src = p.scales.data<float>();
  float* dst = out.scales.data<float>();
  const ScaleStrides a = from.strides(), b = target.strides();
  const int64_t sr = from.block_rows_per_group(), sc = from.block_cols();
  for (int64_t g = 0; g < from.groups; ++g)
    for (int64_t br = 0; br < sr; ++br)
      for (int64_t bc = 0; bc < sc; ++bc) dst[g * b.group + br * b.row + bc * b.col] = src[g * a.group + br * a.row + bc * a.col];
  return out;
}

}  // namespace fp8train::quant
