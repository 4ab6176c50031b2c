// Internal: the launch functions of the numerics-health reductions' kernels (health_stats.cu), called by
// health_ops.cpp after the entry points validated the arguments (ops/health_stats.h gives the arithmetic). Plain
// structs and pointers only (the .cu file includes no fmt); each returns the launch's cudaError_t.
//   row error sums   y, ref F32 / BF16 (uint16_t codes) / F64 [rows, cols], row strides in elements;
//                    out f64 [rows, 2]
//   operand counts   x F32 / BF16 / F64 [rows, cols] (or [cols, rows] when transposed); the row-wise payload's
//                    codes and scale grid (strides as quant::ScaleStrides); counts u64 [3] (zeroed here first);
//                    keys u32 [2] scratch; scale_range f32 [2]. Every dimension below 2^31.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8train::ops::cuda::detail {

enum class HealthType : uint8_t { F32, BF16, F64 };
enum class HealthCodes : uint8_t { E4M3, E5M2, INT8, E5M6, BF16 };

struct RowErrorSumsArgs {
  const void* y = nullptr;
  const void* ref = nullptr;
  HealthType y_type = HealthType::F32, ref_type = HealthType::F32;
  int64_t rows = 0, cols = 0, ld_y = 0, ld_ref = 0;
  double* out = nullptr;
};
cudaError_t launch_row_error_sums(const RowErrorSumsArgs& a, cudaStream_t stream);

struct OperandCountsArgs {
  const void* x = nullptr;
  HealthType x_type = HealthType::F32;
  int64_t ld_x = 0;
  bool transposed = false;
  const uint8_t* codes = nullptr;
  HealthCodes codes_kind = HealthCodes::E4M3;
  const float* scales = nullptr;
  int64_t rows = 0, cols = 0;  // of the payload
  int64_t groups = 1, group_rows = 0;
  bool per_tensor = true;
  int64_t block_rows = 1, block_cols = 1;
  int64_t stride_row = 0, stride_col = 0, stride_group = 0;
  int64_t grid_rows = 1, grid_cols = 1;  // blocks per group, block columns
  float limit = 0;
  unsigned long long* counts = nullptr;
  unsigned int* keys = nullptr;
  float* scale_range = nullptr;
};
cudaError_t launch_operand_counts(const OperandCountsArgs& a, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::detail
