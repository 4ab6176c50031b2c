// Argument validation and launches for the CUDA quantizers (quantize_cuda.h); the kernels live in the .cu
// files beside this one (quant_launch.h). Every bad argument becomes an fp8train::Error naming the problem.
#include <cstdint>

#include "common/error.h"
#include "ops/cuda/quant_launch.h"
#include "ops/cuda/quantize_cuda.h"
#include "tensor/cuda/cuda_check.h"

namespace fp8train::ops::cuda {

size_t in_type_size(InType t) { return t == InType::F32 ? 4 : 2; }


namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The one-byte kernels serve E4M3, E5M2 and INT8; E5M6 has its own quantizer and BF16 is not a CUDA code format.
void check_one_byte(quant::Format f, const char* what) {
  FP8T_CHECK(f == quant::Format::E4M3 || f == quant::Format::E5M2 || f == quant::Format::INT8,
             "{}: format {} is not implemented on cuda (the one-byte kernels take e4m3, e5m2 or int8)", what,
             quant::format_name(f));
}

void check_launch_result(cudaError_t err, const char* kernel, cudaStream_t stream) {
  if (err != cudaSuccess) FP8T_FAIL("launching {} failed: {} ({})", kernel, cudaGetErrorName(err), cudaGetErrorString(err));
  FP8T_CHECK_LAUNCH(kernel, stream);
}

template <class Args>
detail::FastParams check_fast(const Args& a, const char* what) {
  FP8T_CHECK(a.rows >= 0 && a.cols >= 0, "{}: negative shape [{}, {}]", what, a.rows, a.cols);
  FP8T_CHECK(a.q != nullptr || a.qt != nullptr, "{}: neither the codes nor the transposed codes were requested",
             what);
  check_one_byte(a.opt.format, what);
  FP8T_CHECK(a.x != nullptr || a.rows * a.cols == 0, "{}: the input pointer is null", what);
  FP8T_CHECK(a.cols % 16 == 0,
             "{}: cols = {} must be a multiple of 16 (16-byte vector loads); quantize_blocks serves other shapes",
             what, a.cols);
  FP8T_CHECK(a.qt == nullptr || a.rows % 16 == 0,
             "{}: rows = {} must be a multiple of 16 for the transposed output (16-byte stores)", what, a.rows);
  FP8T_CHECK(aligned16(a.x) && aligned16(a.q) && aligned16(a.qt),
             "{}: the input and code pointers must be 16-byte aligned", what);
  FP8T_CHECK(a.q == nullptr || a.q_scales != nullptr, "{}: codes requested without a scale buffer", what);
  FP8T_CHECK(a.qt == nullptr || a.qt_scales != nullptr, "{}: transposed codes requested without a scale buffer",
             what);
  FP8T_CHECK(!a.opt.stochastic || a.opt.format == quant::Format::INT8,
             "{}: stochastic rounding is only defined for INT8", what);
  FP8T_CHECK(a.groups >= 1 && a.rows % a.groups == 0, "{}: {} rows do not split into {} equal groups", what, a.rows,
             a.groups);
  FP8T_CHECK(a.groups == 1 || (a.rows / a.groups) % 128 == 0,
             "{}: {} groups of {} rows: one launch over groups needs a multiple of 128 rows per group", what, a.groups,
             a.rows / a.groups);
  FP8T_CHECK(!a.opt.stochastic || a.groups == 1,
             "{}: stochastic rounding counts positions per launch; groups are not one tensor", what);
  FP8T_CHECK((a.rows + 127) / 128 <= 65535, "{}: rows = {} exceeds the CUDA grid limit (65535 tiles of 128)", what,
             a.rows);
  detail::FastParams p;
  p.x = a.x;
  p.rows = a.rows;
  p.cols = a.cols;
  p.pow2 = a.opt.pow2_scales;
  p.stochastic = a.opt.stochastic;
  p.seed = a.opt.seed;
  p.q = a.q;
  p.q_scales = a.q_scales;
  p.qs = a.q_strides;
  p.qt = a.qt;
  p.qt_scales = a.qt_scales;
  p.qts = a.qt_strides;
  p.groups = a.groups;
  p.qs_group = a.q_scales_group;
  p.qts_group = a.qt_scales_group;
  return p;
}

}  // namespace

void quantize_1x128(const Quant1x128Args& a, cudaStream_t stream) {
  detail::FastParams p = check_fast(a, "quantize_1x128");
  if (a.x_scales != nullptr) {
    FP8T_CHECK(a.opt.format == quant::Format::E4M3 || a.opt.format == quant::Format::E5M2,
               "quantize_1x128: re-tiling codes takes e4m3 or e5m2, not {}", quant::format_name(a.opt.format));
    p.x_scales = a.x_scales;
    p.xs = a.x_strides;
    p.xs_group = a.x_scales_group;
  }
  if (a.swiglu != 0) {
    FP8T_CHECK(a.swiglu == 1 || a.swiglu == 2, "quantize_1x128: swiglu = {} is not 1 (forward) or 2 (backward)",
               a.swiglu);
    FP8T_CHECK(a.x_scales != nullptr && a.groups == 1 && a.x_cols > 0 && a.x_cols % 256 == 0 &&
                   a.cols == (a.swiglu == 1 ? a.x_cols / 2 : a.x_cols),
               "quantize_1x128: SwiGLU from codes needs their scales, one group and gate|up of 2F columns with "
               "F % 128 == 0 (x_cols {}, cols {})",
               a.x_cols, a.cols);
    FP8T_CHECK(
        a.swiglu == 1 || (a.dout != nullptr && aligned16(a.dout) && a.ld_dout >= a.x_cols / 2 && a.ld_dout % 8 == 0),
        "quantize_1x128: SwiGLU's backward needs dout, 16-byte aligned rows of at least F BF16 values");
    p.swiglu = a.swiglu;
    p.x_cols = a.x_cols;
    p.dout = a.dout;
    p.ld_dout = a.ld_dout;
  }
  if (a.rows == 0 || a.cols == 0) return;
  check_launch_result(detail::launch_quant_1x128(p, a.x_type, a.opt.format, a.opt.encoder, stream),
                      a.swiglu != 0 ? "quant_1x128_kernel (SwiGLU)" : "quant_1x128_kernel", stream);
}

void quantize_swiglu_gate_up(const QuantSwigluGateUpArgs& a, cudaStream_t stream) {
  const char* what = "quantize_swiglu_gate_up";
  FP8T_CHECK(a.rows >= 0 && a.ffn > 0 && a.ffn % 128 == 0 && a.ld_x >= 2 * a.ffn && a.ld_x % 8 == 0,
             "{}: gate|up must be [rows, 2F] with F % 128 == 0 and 16-byte rows (rows {}, F {}, ld {})", what, a.rows,
             a.ffn, a.ld_x);
  FP8T_CHECK(a.x != nullptr && aligned16(a.x) && a.act != nullptr && aligned16(a.act) && a.act_scales != nullptr &&
                 (a.cache == nullptr || (aligned16(a.cache) && a.cache_scales != nullptr)),
             "{}: the input, the act codes and their scales must be given, 16-byte aligned", what);
  FP8T_CHECK(a.act_format == quant::Format::E4M3 || a.act_format == quant::Format::E5M2,
             "{}: act in e4m3 or e5m2, not {}", what, quant::format_name(a.act_format));
  FP8T_CHECK((a.rows + 127) / 128 <= 65535, "{}: rows = {} exceeds the CUDA grid limit", what, a.rows);
  if (a.rows == 0) return;
  check_launch_result(detail::launch_swiglu_gate_up(a, stream), "swiglu_gate_up_kernel", stream);
}

void quantize_128x128(const Quant128x128Args& a, cudaStream_t stream) {
  const detail::FastParams p = check_fast(a, "quantize_128x128");
  if (a.rows == 0 || a.cols == 0) return;
  check_launch_result(detail::launch_quant_128x128(p, a.x_type, a.opt.format, a.opt.encoder, stream),
                      "quant_128x128_kernel", stream);
}

void quantize_blocks(const QuantBlocksArgs& a, cudaStream_t stream) {
  FP8T_CHECK(a.rows >= 0 && a.cols >= 0, "quantize_blocks: negative shape [{}, {}]", a.rows, a.cols);
  FP8T_CHECK(a.q != nullptr && a.scales != nullptr, "quantize_blocks: the code and scale buffers must be given");
  check_one_byte(a.opt.format, "quantize_blocks");
  FP8T_CHECK(!a.opt.stochastic || a.opt.format == quant::Format::INT8,
             "quantize_blocks: stochastic rounding is only defined for INT8");
  if (a.rows == 0 || a.cols == 0) return;
  FP8T_CHECK(a.x != nullptr, "quantize_blocks: the input pointer is null");
  const bool per_tensor = a.block_rows == 0 && a.block_cols == 0;
  if (per_tensor) {
    // amax over the tensor, the scale from it, then the codes: three launches, two reads of x.
    FP8T_CHECK(a.amax_scratch != nullptr, "quantize_blocks: per-tensor quantization needs amax_scratch (1 uint32 + "
               "2 floats, 16-byte aligned)");
    FP8T_CUDA_CHECK(cudaMemsetAsync(a.amax_scratch, 0, sizeof(uint32_t), stream));
    amax_accumulate(a.x, a.x_type, a.rows * a.cols, a.amax_scratch, stream);
    float* scale_inverse = reinterpret_cast<float*>(a.amax_scratch + 2);
    check_launch_result(detail::launch_scale_from_amax(a.amax_scratch, quant::format_max(a.opt.format),
                                                       a.opt.pow2_scales, scale_inverse, stream),
                        "scale_from_amax_kernel", stream);
    QuantWithScaleArgs w;
    w.x = a.x;
    w.x_type = a.x_type;
    w.rows = a.rows;
    w.cols = a.cols;
    w.opt = a.opt;
    w.scale_inverse = scale_inverse;
    w.q = a.q;
    w.scale_out = a.scales;
    quantize_with_scale(w, stream);
    return;
  }
  FP8T_CHECK(a.block_rows >= 1 && a.block_cols >= 1,
             "quantize_blocks: block shape {}x{} is invalid (both >= 1, or both 0 for per tensor)", a.block_rows,
             a.block_cols);
  FP8T_CHECK((a.rows + a.block_rows - 1) / a.block_rows <= 65535,
             "quantize_blocks: {} block rows exceed the CUDA grid limit of 65535", (a.rows + a.block_rows - 1) / a.block_rows);
  check_launch_result(detail::launch_quant_blocks(a, stream), "quant_blocks_kernel", stream);
}

void quantize_e5m6_1x128(const QuantE5M6Args& a, cudaStream_t stream) {
  FP8T_CHECK(a.rows >= 0 && a.cols >= 0, "quantize_e5m6_1x128: negative shape [{}, {}]", a.rows, a.cols);
  FP8T_CHECK(a.cols % 8 == 0, "quantize_e5m6_1x128: cols = {} must be a multiple of 8 (8 codes per 12 bytes)", a.cols);
  if (a.rows == 0 || a.cols == 0) return;
  FP8T_CHECK(a.x != nullptr && a.packed != nullptr && a.scales != nullptr,
             "quantize_e5m6_1x128: input, packed codes and scales must all be given");
  FP8T_CHECK(aligned16(a.x) && reinterpret_cast<uintptr_t>(a.packed) % 4 == 0,
             "quantize_e5m6_1x128: x must be 16-byte and the packed codes 4-byte aligned");
  check_launch_result(detail::launch_quant_e5m6(a, stream), "quant_e5m6_kernel", stream);
}

void dequantize_e5m6_1x128(const uint8_t* packed, const float* scales, ScaleStrides strides, int64_t rows,
                           int64_t cols, void* out, InType out_type, cudaStream_t stream) {
  FP8T_CHECK(rows >= 0 && cols >= 0, "dequantize_e5m6_1x128: negative shape [{}, {}]", rows, cols);
  FP8T_CHECK(cols % 8 == 0, "dequantize_e5m6_1x128: cols = {} must be a multiple of 8", cols);
  if (rows == 0 || cols == 0) return;
  FP8T_CHECK(packed != nullptr && scales != nullptr && out != nullptr,
             "dequantize_e5m6_1x128: packed codes, scales and output must all be given");
  FP8T_CHECK(aligned16(out) && reinterpret_cast<uintptr_t>(packed) % 4 == 0,
             "dequantize_e5m6_1x128: out must be 16-byte and the packed codes 4-byte aligned");
  check_launch_result(detail::launch_dequant_e5m6(packed, scales, strides, rows, cols, out, out_type, stream),
                      "dequant_e5m6_kernel", stream);
}

void dequantize(const DequantArgs& a, cudaStream_t stream) {
  FP8T_CHECK(a.rows >= 0 && a.cols >= 0, "dequantize: negative shape [{}, {}]", a.rows, a.cols);
  FP8T_CHECK(a.cols % 8 == 0, "dequantize: cols = {} must be a multiple of 8 (8 codes per thread)", a.cols);
  if (a.rows == 0 || a.cols == 0) return;
  FP8T_CHECK(a.q != nullptr && a.scales != nullptr && a.out != nullptr,
             "dequantize: codes, scales and output must all be given");
  check_one_byte(a.format, "dequantize");
  FP8T_CHECK(reinterpret_cast<uintptr_t>(a.q) % 8 == 0 && aligned16(a.out),
             "dequantize: codes must be 8-byte and the output 16-byte aligned");
  DequantArgs r = a;
  const bool per_tensor = a.block_rows == 0 && a.block_cols == 0;
  if (per_tensor) {  // one block covering everything: every element reads scales[0]
    r.block_rows = a.rows;
    r.block_cols = a.cols;
    r.strides = {0, 0};
  }
  FP8T_CHECK(r.block_rows >= 1 && r.block_cols >= 1, "dequantize: block shape {}x{} is invalid", a.block_rows,
             a.block_cols);
  check_launch_result(detail::launch_dequant(r, stream), "dequant_kernel", stream);
}

void amax_accumulate(const void* x, InType x_type, int64_t n, uint32_t* amax_bits, cudaStream_t stream) {
  FP8T_CHECK(n >= 0, "amax_accumulate: negative element count {}", n);
  FP8T_CHECK(amax_bits != nullptr, "amax_accumulate: the result pointer is null");
  if (n == 0) return;
  FP8T_CHECK(x != nullptr, "amax_accumulate: the input pointer is null");
  check_launch_result(detail::launch_amax(x, x_type, n, amax_bits, stream), "amax_kernel", stream);
}

void quantize_with_scale(const QuantWithScaleArgs& a, cudaStream_t stream) {
  FP8T_CHECK(a.rows >= 0 && a.cols >= 0, "quantize_with_scale: negative shape [{}, {}]", a.rows, a.cols);
  FP8T_CHECK(a.scale_inverse != nullptr && a.scale_out != nullptr && a.q != nullptr,
             "quantize_with_scale: scale_inverse, scale_out and the code buffer must be given");
  check_one_byte(a.opt.format, "quantize_with_scale");
  FP8T_CHECK(!a.opt.stochastic || a.opt.format == quant::Format::INT8,
             "quantize_with_scale: stochastic rounding is only defined for INT8");
  if (a.rows == 0 || a.cols == 0) return;
  FP8T_CHECK(a.x != nullptr, "quantize_with_scale: the input pointer is null");
  check_launch_result(detail::launch_quant_with_scale(a, stream), "quant_with_scale_kernel", stream);
}

void transpose_codes(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols, int64_t batches, int64_t src_batch,
                     int64_t dst_batch, cudaStream_t stream) {
  FP8T_CHECK(rows >= 0 && cols >= 0 && batches >= 0, "transpose_codes: negative shape [{}, {}] x {}", rows, cols,
             batches);
  if (rows == 0 || cols == 0 || batches == 0) return;
  FP8T_CHECK(src != nullptr && dst != nullptr, "transpose_codes: null codes");
  FP8T_CHECK(batches <= 65535, "transpose_codes: {} batches exceed the CUDA grid limit of 65535", batches);
  check_launch_result(detail::launch_transpose_codes(src, dst, rows, cols, batches, src_batch, dst_batch, stream),
                      "transpose_codes_kernel", stream);
}

void transpose_scales(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides, int64_t rows,
                      int64_t cols, int64_t groups, cudaStream_t stream) {
  FP8T_CHECK(rows >= 0 && cols >= 0 && groups >= 0, "transpose_scales: negative grid [{}, {}] x {}", rows, cols,
             groups);
  if (rows == 0 || cols == 0 || groups == 0) return;
  FP8T_CHECK(src != nullptr && dst != nullptr, "transpose_scales: null scales");
  check_launch_result(detail::launch_transpose_scales(src, src_strides, dst, dst_strides, rows, cols, groups, stream),
                      "transpose_scales_kernel", stream);
}

void expand_scale_rows(const float* src, GridStrides src_strides, float* dst, GridStrides dst_strides, int64_t rows,
                       int64_t cols, int64_t groups, int64_t block_rows, cudaStream_t stream) {
  FP8T_CHECK(rows >= 0 && cols >= 0 && groups >= 0 && block_rows >= 1,
             "expand_scale_rows: bad grid [{}, {}] x {} (block rows {})", rows, cols, groups, block_rows);
  if (rows == 0 || cols == 0 || groups == 0) return;
  FP8T_CHECK(src != nullptr && dst != nullptr, "expand_scale_rows: null scales");
  check_launch_result(
      detail::launch_expand_scale_rows(src, src_strides, dst, dst_strides, rows, cols, groups, block_rows, stream),
      "expand_scale_rows_kernel", stream);
}

void delayed_compute_scale(const DeviceAmaxHistoryView& h, quant::Format format, bool pow2_scales,
                           float* scale_inverse, cudaStream_t stream) {
  FP8T_CHECK(h.entries != nullptr && h.state != nullptr && h.length >= 1,
             "delayed_compute_scale: the history needs entries, state and length >= 1");
  FP8T_CHECK(h.margin >= -64 && h.margin <= 64, "delayed_compute_scale: margin {} is outside [-64, 64]", h.margin);
  FP8T_CHECK(scale_inverse != nullptr, "delayed_compute_scale: the output pointer is null");
  check_one_byte(format, "delayed_compute_scale");
  check_launch_result(detail::launch_delayed_compute(h, quant::format_max(format), pow2_scales, scale_inverse, stream),
                      "delayed_compute_kernel", stream);
}

void delayed_push_amax(const DeviceAmaxHistoryView& h, const uint32_t* amax_bits, cudaStream_t stream) {
  FP8T_CHECK(h.entries != nullptr && h.state != nullptr && h.length >= 1,
             "delayed_push_amax: the history needs entries, state and length >= 1");
  FP8T_CHECK(amax_bits != nullptr, "delayed_push_amax: the amax pointer is null");
  check_launch_result(detail::launch_delayed_push(h, amax_bits, stream), "delayed_push_kernel", stream);
}

}  // namespace fp8train::ops::cuda
