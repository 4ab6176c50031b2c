// Shared machinery of the SNR study's experiments (internal to src/lab): quantizing sample matrices with the
// lab's scaling names, turning QTensor rows into per-group scale lists for lab_dot, evaluating a batch
// of inner products under one accumulation, and running tasks in parallel into fixed slots.
//
// Shapes: a sample matrix is [rows, k] row-major float32 (one vector, token or weight row per row); an
// inner product pairs row i of A with row j of B, both of length k.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lab/snr_study.h"
#include "quant/quant.h"

namespace fp8train::lab::detail {

// A quantized sample matrix [rows, cols] as the lab consumes it: one byte per element (E4M3, E5M2 or INT8)
// and a grid of scales, scale(r, c) = scales[(r / block_rows) * scale_cols + c / block_cols].
struct LabOperand {
  quant::Format format = quant::Format::E4M3;
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 1, block_cols = 1, scale_cols = 1;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  float scale(int64_t r, int64_t c) const { return scales[(r / block_rows) * scale_cols + c / block_cols]; }
};

// The lab's view of a one-byte QTensor (E4M3, E5M2, INT8): the same codes and scales.
LabOperand lab_operand(const quant::QTensor& q);

// Scaling names: "none" (scale 1, plain encode: what a kernel without scaling sees), "tensor" (one amax
// scale for the whole matrix, or for each row when per_row_tensor), "1xG", "GxG" (quant granularities with
// online amax scales). Quantization itself is quant::quantize / quant::quantize_with_scale.
LabOperand quantize_operand(const std::vector<float>& x, int64_t rows, int64_t cols, quant::Format format,
                            const std::string& scaling, bool per_row_tensor,
                            quant::Rounding rounding = quant::Rounding::Nearest, uint64_t seed = 0);

// A slice of rows of a larger tensor, quantized exactly as quantizing the whole tensor would quantize those
// rows: "tensor" uses the whole tensor's amax (tensor_amax), tiles and blocks are row-local (a "GxG" slice
// must start on a block boundary). x points at the slice's first row.
LabOperand quantize_slice(const float* x, int64_t rows, int64_t cols, quant::Format format, const std::string& scaling,
                          float tensor_amax);

// The same codes as a QTensor with 1×tile granularity whose scale for (row r, tile g) is op.scale(r, g·tile)
// — exact whenever op's scale is constant over each 1×tile span (per-tensor, 1×tile, tile×tile, ...). Lets
// quant::ref_gemm (which pairs 1×G activations with G×G weights) compute products of any of those
// scalings with the same arithmetic as hopper_dot_grouped / int8_dot_grouped with groups of `tile`.
quant::QTensor as_row_tiles(const LabOperand& op, int64_t tile);

struct Accumulation {
  std::string name;          // hopper, fp32, int32
  int promote_interval = -1; // hopper only (0 = never)
};

// Outputs test[p] = <A row pairs[p].first, B row pairs[p].second> under `acc` (FP8 operands: hopper or fp32;
// INT8 operands: int32).
std::vector<float> quantized_dots(const LabOperand& a, const LabOperand& b,
                                  const std::vector<std::pair<int64_t, int64_t>>& pairs, const Accumulation& acc);

// FP64 reference products of the unquantized rows.
std::vector<double> exact_dots(const std::vector<float>& a, const std::vector<float>& b, int64_t k,
                               const std::vector<std::pair<int64_t, int64_t>>& pairs);

// Exact (FP64) products of the quantized rows: Σ_g (s_a,g · s_b,g) · Σ_{i in g} decode(a_i) · decode(b_i),
// the value the quantized inputs represent, so that test − this is the accumulation's own error.
std::vector<double> dequantized_dots(const LabOperand& a, const LabOperand& b,
                                     const std::vector<std::pair<int64_t, int64_t>>& pairs);

// Fills row.snr_db and row.calc_diff (test against ref) and, when ref_quantized is given, row.accum_snr_db.
void score(SnrRow& row, const std::vector<double>& ref, const std::vector<float>& test,
           const std::vector<double>* ref_quantized = nullptr);
// The same for the products of two quantized sample matrices under `acc`.
void score(SnrRow& row, const std::vector<double>& ref, const LabOperand& a, const LabOperand& b,
           const std::vector<std::pair<int64_t, int64_t>>& pairs, const Accumulation& acc);

// Runs task(i) for i in [0, n) on all threads (dynamic schedule) and concatenates the results in index
// order. Exceptions thrown by tasks are rethrown (the first by index) after the loop.
std::vector<SnrRow> run_tasks(int n, const std::function<std::vector<SnrRow>(int)>& task);

// Pairs (0,0), (1,1), ... (n-1,n-1): row i of A with row i of B.
std::vector<std::pair<int64_t, int64_t>> diagonal_pairs(int64_t n);

}  // namespace fp8train::lab::detail
