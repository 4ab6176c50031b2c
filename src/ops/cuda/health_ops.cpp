// CUDA launchers of the numerics-health reductions (ops/health_stats.h); the kernels are in health_stats.cu
// (health_launch.h).
//   row_error_sums            y and y_ref F32, BF16 or F64, each its own; FP64 row sums that agree with the CPU's
//                             to the last bits (another summation order)
//   quantized_operand_counts  every format (E4M3, E5M2, INT8, E5M6, BF16 codes), granularity (per tensor, any
//                             block shape, row groups) and scale layout; x F32, BF16 or F64, either orientation;
//                             exact integer counts and the scale range as on the CPU. Refused (not implemented on
//                             cuda) only for a payload dimension of 2^31 or more.
#include <cuda_runtime_api.h>

#include <string>

#include "common/error.h"
#include "ops/cuda/health_launch.h"
#include "ops/cuda/kernels.h"
#include "ops/health_stats.h"

namespace fp8train::ops::cuda {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

void check_cuda(cudaError_t e, const char* op, const char* what) {
  FP8T_CHECK(e == cudaSuccess, "{} on cuda: {} failed: {}", op, what, cudaGetErrorString(e));
}

detail::HealthType health_type(DType t, const char* op) {
  switch (t) {
    case DType::F32:
      return detail::HealthType::F32;
    case DType::BF16:
      return detail::HealthType::BF16;
    case DType::F64:
      return detail::HealthType::F64;
    default:
      break;
  }
  FP8T_FAIL("{}: {} tensors are not supported", op, dtype_name(t));
}

void row_error_sums(const ExecCtx& ctx, const RowErrorSumsProblem& p, const void* y, const void* y_ref, double* out) {
  const char* op = "row_error_sums";
  detail::RowErrorSumsArgs a;
  a.y = y;
  a.ref = y_ref;
  a.y_type = health_type(p.y_dtype, op);
  a.ref_type = health_type(p.ref_dtype, op);
  a.rows = p.rows;
  a.cols = p.cols;
  a.ld_y = p.ld_y;
  a.ld_ref = p.ld_ref;
  a.out = out;
  check_cuda(detail::launch_row_error_sums(a, stream_of(ctx)), op, "the kernel launch");
}

detail::HealthCodes codes_kind(quant::Format f) {
  switch (f) {
    case quant::Format::E4M3:
      return detail::HealthCodes::E4M3;
    case quant::Format::E5M2:
      return detail::HealthCodes::E5M2;
    case quant::Format::INT8:
      return detail::HealthCodes::INT8;
    case quant::Format::E5M6:
      return detail::HealthCodes::E5M6;
    case quant::Format::BF16:
      return detail::HealthCodes::BF16;
  }
  FP8T_FAIL("quantized_operand_counts: invalid format value {}", static_cast<int>(f));
}

void quantized_operand_counts(const ExecCtx& ctx, const OperandCountsProblem& p, const void* x, const void* codes,
                              const float* scales, int64_t* counts, float* scale_range) {
  const char* op = "quantized_operand_counts";
  constexpr int64_t kMaxDim = 0x7FFFFFFF;
  if (p.grid.rows > kMaxDim || p.grid.cols > kMaxDim)
    throw_not_implemented(op, "a payload of " + std::to_string(p.grid.rows) + " x " + std::to_string(p.grid.cols) +
                                  " (each dimension must stay below 2^31)");
  const quant::ScaleStrides st = p.grid.strides();
  const Tensor keys = ctx.scratch({2}, DType::I32);
  detail::OperandCountsArgs a;
  a.x = x;
  a.x_type = health_type(p.x_dtype, op);
  a.ld_x = p.ld_x;
  a.transposed = p.transposed;
  a.codes = static_cast<const uint8_t*>(codes);
  a.codes_kind = codes_kind(p.format);
  a.scales = scales;
  a.rows = p.grid.rows;
  a.cols = p.grid.cols;
  a.groups = p.grid.groups;
  a.group_rows = p.grid.group_rows();
  a.per_tensor = p.grid.granularity.per_tensor;
  a.block_rows = p.grid.granularity.block_rows;
  a.block_cols = p.grid.granularity.block_cols;
  a.stride_row = st.row;
  a.stride_col = st.col;
  a.stride_group = st.group;
  a.grid_rows = p.grid.block_rows_per_group();
  a.grid_cols = p.grid.block_cols();
  a.limit = p.limit;
  a.counts = reinterpret_cast<unsigned long long*>(counts);
  a.keys = static_cast<unsigned int*>(keys.raw());
  a.scale_range = scale_range;
  check_cuda(detail::launch_operand_counts(a, stream_of(ctx)), op, "the kernel launch");
}

}  // namespace

void install_health_ops(OpTable& t) {
  t.row_error_sums = row_error_sums;
  t.quantized_operand_counts = quantized_operand_counts;
}

}  // namespace fp8train::ops::cuda
