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

quant::QuantSpec spec_of(const QuantOptions& opt, quant::Granularity g) {
  quant::QuantSpec spec;
  spec.format = opt.format;
  spec.granularity = g;
  spec.scale_mode = opt.pow2_scales ? quant::ScaleMode::PowerOfTwo : quant::ScaleMode::Amax;
  spec.rounding = opt.stochastic ? quant::Rounding::Stochastic : quant::Rounding::Nearest;
  spec.seed = opt.seed;
  return spec;
}

// The kernels' (block row, block column) strides of a payload's scale grid (groups = 1).
ScaleStrides kernel_strides(const quant::ScaleGrid& grid) {
  const quant::ScaleStrides s = grid.strides();
  return {s.row, s.col};
}

}  // namespace

namespace {
// The part of quantize_activation / quantize_weight that does not depend on the block shape: the launcher
// arguments (Quant1x128Args or Quant128x128Args) and the outputs, with the column-wise payload when asked for.
template <class Args>
Args quantizer_args(const Tensor& x, InType type, const QuantOptions& opt, quant::Granularity g, bool with_colwise,
                    quant::ScaleLayout layout, MemCategory category, quant::QTensor& q) {
  const int64_t rows = x.size(0), cols = x.size(1);
  q = quant::QTensor::empty(spec_of(opt, g), rows, cols, 1, true, with_colwise, layout, x.device(), category);
  Args a;
  a.x = x.raw();
  a.x_type = type;
  a.rows = rows;
  a.cols = cols;
  a.opt = opt;
  a.q = static_cast<uint8_t*>(q.rowwise.codes.raw());
  a.q_scales = q.rowwise.scales.data<float>();
  a.q_strides = kernel_strides(q.rowwise_grid());
  if (with_colwise) {
    a.qt = static_cast<uint8_t*>(q.colwise.codes.raw());
    a.qt_scales = q.colwise.scales.data<float>();
    a.qt_strides = kernel_strides(q.colwise_grid());
  }
  return a;
}
}  // namespace

quant::QTensor quantize_activation(const Tensor& x, const QuantOptions& opt, bool with_colwise,
                                   quant::ScaleLayout layout, MemCategory category) {
  const char* what = "quantize_activation";
  check_cuda_matrix(x, what, "x");
  const InType type = input_type(x, what);
  quant::QTensor out;
  const Quant1x128Args a = quantizer_args<Quant1x128Args>(x, type, opt, quant::Granularity::tile_1x128(),
                                                          with_colwise, layout, category, out);
  quantize_1x128(a, fp8train::cuda::compute_stream(x.device()));
  return out;
}

quant::QTensor quantize_weight(const Tensor& w, const QuantOptions& opt, bool with_colwise, quant::ScaleLayout layout,
                               MemCategory category) {
  const char* what = "quantize_weight";
  check_cuda_matrix(w, what, "w");
  const InType type = input_type(w, what);
  quant::QTensor out;
  const Quant128x128Args a = quantizer_args<Quant128x128Args>(w, type, opt, quant::Granularity::block_128x128(),
                                                              with_colwise, layout, category, out);
  quantize_128x128(a, fp8train::cuda::compute_stream(w.device()));
  return out;
}

quant::QTensor quantize_e5m6(const Tensor& x, bool pow2_scales, MemCategory category) {
  const char* what = "quantize_e5m6";
  check_cuda_matrix(x, what, "x");
  const InType type = input_type(x, what);
  const int64_t rows = x.size(0), cols = x.size(1);
  QuantOptions opt;
  opt.format = quant::Format::E5M6;
  opt.pow2_scales = pow2_scales;
  quant::QTensor q = quant::QTensor::empty(spec_of(opt, quant::Granularity::tile_1x128()), rows, cols, 1, true, false,
                                           quant::ScaleLayout::RowMajor, x.device(), category);
  QuantE5M6Args a;
  a.x = x.raw();
  a.x_type = type;
  a.rows = rows;
  a.cols = cols;
  a.pow2_scales = pow2_scales;
  a.packed = q.rowwise.codes.data<uint8_t>();
  a.scales = q.rowwise.scales.data<float>();
  a.strides = kernel_strides(q.rowwise_grid());
  quantize_e5m6_1x128(a, fp8train::cuda::compute_stream(x.device()));
  return q;
}

Tensor dequantize(const quant::QTensor& q, DType out_dtype, MemCategory category) {
  FP8T_CHECK(q.rowwise.defined(), "dequantize: the quantized tensor has no row-wise payload");
  FP8T_CHECK(q.groups == 1, "dequantize: {} row groups are not implemented on cuda here", q.groups);
  FP8T_CHECK(out_dtype == DType::F32 || out_dtype == DType::BF16, "dequantize: output must be F32 or BF16, got {}",
             dtype_name(out_dtype));
  FP8T_CHECK(q.device().type == DeviceType::CUDA, "dequantize: codes are on {}, not a CUDA device", q.device().str());
  Tensor out = Tensor::empty({q.rows, q.cols}, out_dtype, category, q.device());
  const InType ot = out_dtype == DType::F32 ? InType::F32 : InType::BF16;
  const cudaStream_t stream = fp8train::cuda::compute_stream(out.device());
  const ScaleStrides strides = kernel_strides(q.rowwise_grid());
  if (q.format() == quant::Format::E5M6) {
    FP8T_CHECK(q.granularity() == quant::Granularity::tile_1x128(), "dequantize: E5M6 is served with 1x128 tiles only");
    dequantize_e5m6_1x128(q.rowwise.codes.data<uint8_t>(), q.rowwise.scales.data<float>(), strides, q.rows, q.cols,
                          out.raw(), ot, stream);
    return out;
  }
  DequantArgs a;
  a.q = q.rowwise.codes.data<uint8_t>();
  a.format = q.format();
  a.rows = q.rows;
  a.cols = q.cols;
  a.block_rows = q.granularity().per_tensor ? 0 : q.granularity().block_rows;
  a.block_cols = q.granularity().per_tensor ? 0 : q.granularity().block_cols;
  a.scales = q.rowwise.scales.data<float>();
  a.strides = strides;
  a.out = out.raw();
  a.out_type = ot;
  ops::cuda::dequantize(a, stream);
  return out;
}

namespace {
OperandScaling scaling_of(const quant::QTensor& q, quant::ScaleLayout* layout, const char* name) {
  const quant::Granularity& g = q.granularity();
  FP8T_CHECK(q.rowwise.defined() && q.groups == 1, "scaled_gemm: operand {} needs a row-wise payload and one group",
             name);
  *layout = q.rowwise.layout;
  if (g.per_tensor) return OperandScaling::Tensor;
  if (g == quant::Granularity::tile_1x128()) return OperandScaling::Tile1x128;
  if (g == quant::Granularity::block_128x128()) return OperandScaling::Block128x128;
  FP8T_FAIL("scaled_gemm: operand {} has {} blocks; cuBLASLt serves tensor, 1x128 and 128x128", name, g.name());
}
GemmInput gemm_input_of(quant::Format f, const char* name) {
  FP8T_CHECK(f == quant::Format::E4M3 || f == quant::Format::E5M2,
             "scaled_gemm: operand {} is {}; cuBLASLt's scaled GEMM takes E4M3 or E5M2", name, quant::format_name(f));
  return f == quant::Format::E4M3 ? GemmInput::E4M3 : GemmInput::E5M2;
}
}  // namespace

void scaled_gemm(const quant::QTensor& a, const quant::QTensor& b, Tensor& out, bool accumulate, bool fast_accum) {
  FP8T_CHECK(a.rowwise.defined() && b.rowwise.defined(), "scaled_gemm: undefined operand");
  FP8T_CHECK(a.cols == b.cols, "scaled_gemm: A is [{}, {}] and B is [{}, {}]; out = A·Bᵀ needs the same K", a.rows,
             a.cols, b.rows, b.cols);
  check_cuda_matrix(out, "scaled_gemm", "out");
  FP8T_CHECK(out.size(0) == a.rows && out.size(1) == b.rows, "scaled_gemm: out is {} but A·Bᵀ is [{}, {}]",
             out.str(), a.rows, b.rows);
  FP8T_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::BF16, "scaled_gemm: out must be F32 or BF16, got {}",
             dtype_name(out.dtype()));
  FP8T_CHECK(a.device() == out.device() && b.device() == out.device(),
             "scaled_gemm: operands on {} and {}, output on {}", a.device().str(), b.device().str(),
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
  p.a_type = gemm_input_of(a.format(), "A");
  p.b_type = gemm_input_of(b.format(), "B");
  p.a_scaling = scaling_of(a, &p.a_scale_layout, "A");
  p.b_scaling = scaling_of(b, &p.b_scale_layout, "B");
  p.out = out.dtype() == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16;
  p.accumulate = accumulate;
  p.fast_accum = fast_accum;
  cublaslt_gemm(out.device().index)
      .run(p, a.rowwise.codes.raw(), a.rowwise.scales.data<float>(), b.rowwise.codes.raw(),
           b.rowwise.scales.data<float>(), out.raw(), fp8train::cuda::compute_stream(out.device()));
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
