// Tier-3 entry points of the CUDA quantizers and GEMMs on Tensors (tensor_ops.h).
#include "ops/cuda/tensor_ops.h"

#include <vector>

#include "common/error.h"
#include "ops/cuda/fp8_gemm.h"
#include "tensor/cuda/cuda_backend.h"

namespace fp8train::ops::cuda {
namespace {


void check_cuda_matrix(const Tensor& t, const char* what, const char* name) {
  FP8T_CHECK(t.defined(), "{}: {} is an undefined tensor", what, name);
  FP8T_CHECK(t.device().type == DeviceType::CUDA, "{}: {} is on {}, but this op runs on a CUDA device", what, name,
             t.device().str());
  FP8T_CHECK(t.dim() == 2, "{}: {} must be a 2-D matrix, got {}", what, name, t.str());
  FP8T_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {}", what, name, t.str());
}

InType input_type(const Tensor& x, const char* what) {
  FP8T_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, "{}: input must be F32 or BF16, got {}", what,
             dtype_name(x.dtype()));
  return x.dtype() == DType::F32 ? InType::F32 : InType::BF16;
}

// Scale strides of a (srows x scols) grid: row-major, or the GEMM's native layout for 1x128 / 128x128 blocks.
ScaleStrides strides_for(ScaleOrder order, const quant::Granularity& g, int64_t srows, int64_t scols) {
  if (order == ScaleOrder::RowMajor || g.per_tensor) return row_major_scales(scols);
  if (g.block_rows == 1) return mn_major_scales(srows);  // 1x128: scales[kb * rows + r]
  return {(scols + 3) / 4 * 4, 1};                        // 128x128: pitch padded to a multiple of 4
}

int64_t extent(ScaleStrides s, int64_t srows, int64_t scols) {
  return srows == 0 || scols == 0 ? 0 : (srows - 1) * s.row + (scols - 1) * s.col + 1;
}

GpuQuantized make_output(Device d, int64_t rows, int64_t cols, quant::Format f, quant::Granularity g,
                         ScaleOrder order, bool pow2, MemCategory category) {
  GpuQuantized q;
  q.rows = rows;
  q.cols = cols;
  q.format = f;
  q.granularity = g;
  q.pow2_scales = pow2;
  const int64_t srows = g.scale_rows(rows), scols = g.scale_cols(cols);
  q.strides = strides_for(order, g, srows, scols);
  if (f == quant::Format::E5M6) q.codes = Tensor::empty({static_cast<int64_t>(quant::code_bytes(f, rows * cols))},
                                                         DType::U8, category, d);
  else q.codes = Tensor::empty({rows, cols}, DType::U8, category, d);
  q.scales = Tensor::zeros({std::max<int64_t>(1, extent(q.strides, srows, scols))}, DType::F32, category, d);
  return q;
}

}  // namespace

quant::Format quant_format(CodeFormat f) {
  switch (f) {
    case CodeFormat::E4M3: return quant::Format::E4M3;
    case CodeFormat::E5M2: return quant::Format::E5M2;
    case CodeFormat::INT8: return quant::Format::INT8;
  }
  return quant::Format::E4M3;
}

namespace {
// The part of quantize_activation / quantize_weight that does not depend on the block shape: the launcher
// arguments (Quant1x128Args or Quant128x128Args) and the outputs, with the transposed copy when asked for.
template <class Args>
Args quantizer_args(const Tensor& x, InType type, const QuantOptions& opt, quant::Granularity g, bool with_transposed,
                    ScaleOrder order, MemCategory category, GpuQuantized& q, GpuQuantized& qt) {
  const int64_t rows = x.size(0), cols = x.size(1);
  q = make_output(x.device(), rows, cols, quant_format(opt.format), g, order, opt.pow2_scales, category);
  Args a;
  a.x = x.raw();
  a.x_type = type;
  a.rows = rows;
  a.cols = cols;
  a.opt = opt;
  a.q = q.codes.data<uint8_t>();
  a.q_scales = q.scales.data<float>();
  a.q_strides = q.strides;
  if (with_transposed) {
    qt = make_output(x.device(), cols, rows, quant_format(opt.format), g, order, opt.pow2_scales, category);
    a.qt = qt.codes.data<uint8_t>();
    a.qt_scales = qt.scales.data<float>();
    a.qt_strides = qt.strides;
  }
  return a;
}
}  // namespace

quant::QuantTensor GpuQuantized::to_host() const {
  FP8T_CHECK(defined(), "GpuQuantized::to_host on an undefined tensor");
  quant::QuantTensor h;
  h.rows = rows;
  h.cols = cols;
  h.format = format;
  h.granularity = granularity;
  h.pow2_scales = pow2_scales;
  h.codes = codes.to_vector<uint8_t>();
  const std::vector<float> s = scales.to_vector<float>();
  const int64_t srows = granularity.scale_rows(rows), scols = granularity.scale_cols(cols);
  h.scales.resize(static_cast<size_t>(srows * scols));
  for (int64_t r = 0; r < srows; ++r)
    for (int64_t c = 0; c < scols; ++c) h.scales[r * scols + c] = s[r * strides.row + c * strides.col];
  return h;
}

ActivationQuantized quantize_activation(const Tensor& x, const QuantOptions& opt, bool with_transposed,
                                        ScaleOrder order, MemCategory category) {
  const char* what = "quantize_activation";
  check_cuda_matrix(x, what, "x");
  const InType type = input_type(x, what);
  ActivationQuantized out;
  const Quant1x128Args a = quantizer_args<Quant1x128Args>(x, type, opt, quant::Granularity::tile_1x128(),
                                                          with_transposed, order, category, out.q, out.qt);
  quantize_1x128(a, fp8train::cuda::compute_stream(x.device()));
  return out;
}

WeightQuantized quantize_weight(const Tensor& w, const QuantOptions& opt, bool with_transposed, ScaleOrder order,
                                MemCategory category) {
  const char* what = "quantize_weight";
  check_cuda_matrix(w, what, "w");
  const InType type = input_type(w, what);
  WeightQuantized out;
  const Quant128x128Args a = quantizer_args<Quant128x128Args>(w, type, opt, quant::Granularity::block_128x128(),
                                                              with_transposed, order, category, out.q, out.qt);
  quantize_128x128(a, fp8train::cuda::compute_stream(w.device()));
  return out;
}

GpuQuantized quantize_e5m6(const Tensor& x, bool pow2_scales, MemCategory category) {
  const char* what = "quantize_e5m6";
  check_cuda_matrix(x, what, "x");
  const InType type = input_type(x, what);
  const int64_t rows = x.size(0), cols = x.size(1);
  GpuQuantized q = make_output(x.device(), rows, cols, quant::Format::E5M6, quant::Granularity::tile_1x128(),
                               ScaleOrder::RowMajor, pow2_scales, category);
  QuantE5M6Args a;
  a.x = x.raw();
  a.x_type = type;
  a.rows = rows;
  a.cols = cols;
  a.pow2_scales = pow2_scales;
  a.packed = q.codes.data<uint8_t>();
  a.scales = q.scales.data<float>();
  a.strides = q.strides;
  quantize_e5m6_1x128(a, fp8train::cuda::compute_stream(x.device()));
  return q;
}

Tensor dequantize(const GpuQuantized& q, DType out_dtype, MemCategory category) {
  FP8T_CHECK(q.defined(), "dequantize: undefined quantized tensor");
  FP8T_CHECK(out_dtype == DType::F32 || out_dtype == DType::BF16, "dequantize: output must be F32 or BF16, got {}",
             dtype_name(out_dtype));
  FP8T_CHECK(q.codes.device().type == DeviceType::CUDA, "dequantize: codes are on {}, not a CUDA device",
             q.codes.device().str());
  Tensor out = Tensor::empty({q.rows, q.cols}, out_dtype, category, q.codes.device());
  const InType ot = out_dtype == DType::F32 ? InType::F32 : InType::BF16;
  const cudaStream_t stream = fp8train::cuda::compute_stream(out.device());
  if (q.format == quant::Format::E5M6) {
    FP8T_CHECK(q.granularity == quant::Granularity::tile_1x128(), "dequantize: E5M6 is served with 1x128 tiles only");
    dequantize_e5m6_1x128(q.codes.data<uint8_t>(), q.scales.data<float>(), q.strides, q.rows, q.cols, out.raw(), ot,
                          stream);
    return out;
  }
  FP8T_CHECK(q.format == quant::Format::E4M3 || q.format == quant::Format::E5M2 || q.format == quant::Format::INT8,
             "dequantize: format {} is not served on the GPU", quant::format_name(q.format));
  DequantArgs a;
  a.q = q.codes.data<uint8_t>();
  a.format = q.format == quant::Format::E4M3 ? CodeFormat::E4M3
             : q.format == quant::Format::E5M2 ? CodeFormat::E5M2
                                               : CodeFormat::INT8;
  a.rows = q.rows;
  a.cols = q.cols;
  a.block_rows = q.granularity.per_tensor ? 0 : q.granularity.block_rows;
  a.block_cols = q.granularity.per_tensor ? 0 : q.granularity.block_cols;
  a.scales = q.scales.data<float>();
  a.strides = q.strides;
  a.out = out.raw();
  a.out_type = ot;
  ops::cuda::dequantize(a, stream);
  return out;
}

namespace {
OperandScaling scaling_of(const GpuQuantized& q, ScaleLayout* layout, const char* name) {
  const quant::Granularity& g = q.granularity;
  const int64_t srows = g.scale_rows(q.rows), scols = g.scale_cols(q.cols);
  const ScaleStrides row_major = row_major_scales(scols);
  if (g.per_tensor) {
    *layout = ScaleLayout::RowMajor;
    return OperandScaling::Tensor;
  }
  OperandScaling s;
  if (g == quant::Granularity::tile_1x128()) s = OperandScaling::Tile1x128;
  else if (g == quant::Granularity::block_128x128()) s = OperandScaling::Block128x128;
  else FP8T_FAIL("scaled_gemm: operand {} has {} blocks; cuBLASLt serves tensor, 1x128 and 128x128", name, g.name());
  const ScaleStrides native = strides_for(ScaleOrder::GemmNative, g, srows, scols);
  if (q.strides.row == row_major.row && q.strides.col == row_major.col) *layout = ScaleLayout::RowMajor;
  else if (q.strides.row == native.row && q.strides.col == native.col) *layout = ScaleLayout::Native;
  else FP8T_FAIL("scaled_gemm: operand {}'s scales are neither row-major nor cuBLASLt's layout", name);
  return s;
}
GemmInput gemm_input_of(quant::Format f, const char* name) {
  FP8T_CHECK(f == quant::Format::E4M3 || f == quant::Format::E5M2,
             "scaled_gemm: operand {} is {}; cuBLASLt's scaled GEMM takes E4M3 or E5M2", name, quant::format_name(f));
  return f == quant::Format::E4M3 ? GemmInput::E4M3 : GemmInput::E5M2;
}
}  // namespace

void scaled_gemm(const GpuQuantized& a, const GpuQuantized& b, Tensor& out, bool accumulate, bool fast_accum) {
  FP8T_CHECK(a.defined() && b.defined(), "scaled_gemm: undefined operand");
  FP8T_CHECK(a.cols == b.cols, "scaled_gemm: A is [{}, {}] and B is [{}, {}]; out = A·Bᵀ needs the same K", a.rows,
             a.cols, b.rows, b.cols);
  check_cuda_matrix(out, "scaled_gemm", "out");
  FP8T_CHECK(out.size(0) == a.rows && out.size(1) == b.rows, "scaled_gemm: out is {} but A·Bᵀ is [{}, {}]",
             out.str(), a.rows, b.rows);
  FP8T_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::BF16, "scaled_gemm: out must be F32 or BF16, got {}",
             dtype_name(out.dtype()));
  FP8T_CHECK(a.codes.device() == out.device() && b.codes.device() == out.device(),
             "scaled_gemm: operands on {} and {}, output on {}", a.codes.device().str(), b.codes.device().str(),
             out.device().str());
  // fp8train's own Hopper FP8 kernels serve the DeepSeek-V3 block-scaled forms by default on sm_90 (fp8_gemm.h);
  // set_fp8_gemm_backend(CublasLt) or FP8TRAIN_FP8_GEMM=cublaslt keeps cuBLASLt.
  if (fp8_gemm_try_own(a, b, out.raw(), out.dtype() == DType::F32, accumulate, fast_accum,
                       fp8train::cuda::compute_stream(out.device())))
    return;
  ScaledGemmProblem p;
  p.m = a.rows;
  p.n = b.rows;
  p.k = a.cols;
  p.a_type = gemm_input_of(a.format, "A");
  p.b_type = gemm_input_of(b.format, "B");
  p.a_scaling = scaling_of(a, &p.a_scale_layout, "A");
  p.b_scaling = scaling_of(b, &p.b_scale_layout, "B");
  p.out = out.dtype() == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16;
  p.accumulate = accumulate;
  p.fast_accum = fast_accum;
  cublaslt_gemm(out.device().index)
      .run(p, a.codes.raw(), a.scales.data<float>(), b.codes.raw(), b.scales.data<float>(), out.raw(),
           fp8train::cuda::compute_stream(out.device()));
}

void gemm_bf16(const Tensor& a, const Tensor& b, Tensor& out) {
  check_cuda_matrix(a, "gemm_bf16", "a");
  check_cuda_matrix(b, "gemm_bf16", "b");
  check_cuda_matrix(out, "gemm_bf16", "out");
  FP8T_CHECK(a.dtype() == DType::BF16 && b.dtype() == DType::BF16, "gemm_bf16: operands must be BF16, got {} and {}",
             dtype_name(a.dtype()), dtype_name(b.dtype()));
  FP8T_CHECK(a.size(1) == b.size(1) && out.size(0) == a.size(0) && out.size(1) == b.size(0),
             "gemm_bf16: shapes {} · {}ᵀ -> {} do not match", a.str(), b.str(), out.str());
  FP8T_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::BF16, "gemm_bf16: out must be F32 or BF16");
  ScaledGemmProblem p;
  p.m = a.size(0);
  p.n = b.size(0);
  p.k = a.size(1);
  p.a_type = p.b_type = GemmInput::BF16;
  p.a_scaling = p.b_scaling = OperandScaling::None;
  p.out = out.dtype() == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16;
  cublaslt_gemm(out.device().index)
      .run(p, a.raw(), nullptr, b.raw(), nullptr, out.raw(), fp8train::cuda::compute_stream(out.device()));
}

}  // namespace fp8train::ops::cuda
