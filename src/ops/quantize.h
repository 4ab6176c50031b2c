// Quantization ops on Tensors and QTensors (quant/qtensor.h), on any device: quantize (online scales),
// quantize_delayed (per-tensor scales from an amax history kept in Tensors), dequantize, and with_colwise (adds
// the column-wise payload of a quantized tensor). The CPU kernels are the exact arithmetic of quant/quant.h; the
// CUDA kernels reproduce their codes and scales bit for bit (tests/cuda compares them).
//   x:   [rows, cols] F32 or BF16 matrix view (unit column stride, any row stride), on ctx's device
//   out: a QTensor on ctx's device, its payloads booked under `category`
// groups: x's rows are `groups` equal ranges quantized independently (MoE expert weights; quant/qtensor.h).
#pragma once
#include <cstdint>
#include <optional>

#include "ops/op_table.h"
#include "quant/quant.h"
#include "tensor/tensor.h"

namespace fp8train::ops {

enum class QuantizeOutputs : uint8_t {
  Rowwise,  // x under spec
  Colwise,  // xᵀ (per group) under spec only
  Both,     // both, from one read of x where the backend can
};
std::string_view quantize_outputs_name(QuantizeOutputs o);  // "rowwise", "colwise", "both"

// What the quantize launchers compute: x [rows, cols] (row stride ld, in_dtype F32 or BF16) quantized under
// spec, `groups` row groups, into the payloads asked for (each with its scale layout; quant/qtensor.h).
struct QuantizeProblem {
  DType in_dtype = DType::F32;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t groups = 1;
  quant::QuantSpec spec;
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
  bool rowwise = true, colwise = false;
};

// The output pointers of one payload (codes in the format's layout, scales in the problem's layout).
struct QuantizedOut {
  void* codes = nullptr;
  float* scales = nullptr;
};

// Online quantization (quant.h's arithmetic; per-tensor granularity: one amax per group).
quant::QTensor quantize(const ExecCtx& ctx, const Tensor& x, const quant::QuantSpec& spec,
                        QuantizeOutputs outputs = QuantizeOutputs::Rowwise,
                        quant::ScaleLayout layout = quant::ScaleLayout::RowMajor, int64_t groups = 1,
                        MemCategory category = MemCategory::Workspace);

// ---- delayed scaling (fp8-tensorwise) ------------------------------------------------------------------------
// The amax history of one tensor, on ctx's device, with quant::AmaxHistory's rules: the scale of a tensor comes
// from the history before it (reference = max of the window, or the most recent entry; 0 -> scale 1; else
// block_scale(reference · 2^margin)), then the tensor's amax is pushed, dropping the oldest beyond `length`.
//   entries  F32 [length]  a ring: entry i of the window, oldest first, at (next - size + i) mod length
//   meta     I32 [3]       {size, next, error}; error = 1 once a tensor holding Inf or NaN was offered (the
//                          history is left as it was). The CPU kernel also throws at once; a CUDA kernel cannot,
//                          so check() reads the flag back.
struct AmaxHistoryState {
  Tensor entries;
  Tensor meta;
  int length = 1;
  quant::AmaxAlgorithm algorithm = quant::AmaxAlgorithm::Max;
  int margin = 0;

  static AmaxHistoryState make(const ExecCtx& ctx, int length, quant::AmaxAlgorithm algorithm, int margin,
                               MemCategory category = MemCategory::Weights);
  // The window, oldest first, copied to the host (synchronizes with ctx's device).
  std::vector<float> window() const;
  // Throws fp8train::Error when a tensor holding Inf or NaN was offered to the history (a host read).
  void check() const;
};

// What the delayed launcher reads and writes besides the quantize problem (spec.granularity must be per tensor).
struct AmaxHistoryProblem {
  int length = 1;
  quant::AmaxAlgorithm algorithm = quant::AmaxAlgorithm::Max;
  int margin = 0;
};

// Per-tensor quantization of x with the scale of `history` (then amax(x) is pushed). spec.granularity is
// ignored (delayed scaling is per tensor); groups = 1.
quant::QTensor quantize_delayed(const ExecCtx& ctx, const Tensor& x, const quant::QuantSpec& spec,
                                AmaxHistoryState& history, QuantizeOutputs outputs = QuantizeOutputs::Rowwise,
                                quant::ScaleLayout layout = quant::ScaleLayout::RowMajor,
                                MemCategory category = MemCategory::Workspace);

// ---- dequantize ------------------------------------------------------------------------------------------------
// out [rows, cols] (F32 or BF16, row stride ld_out) = decode(code) · scale, from the row-wise payload.
struct DequantizeProblem {
  quant::Format format = quant::Format::E4M3;
  quant::Granularity granularity;
  int64_t rows = 0, cols = 0, groups = 1;
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
  DType out_dtype = DType::F32;
  int64_t ld_out = 0;
};

// The row-wise payload of q as an [rows, cols] matrix of `out` (F32 or BF16; BF16 rounds the FP32 product to
// nearest even).
Tensor dequantize(const ExecCtx& ctx, const quant::QTensor& q, DType out = DType::F32,
                  MemCategory category = MemCategory::Workspace);

// ---- the column-wise payload of a quantized tensor ---------------------------------------------------------------
// For square blocks (G×G, or per tensor) the exact transpose of the codes and scales of each group; otherwise
// quant::retile's rule applied to xᵀ: dequantize, transpose, quantize under q.spec (exact with power-of-two
// scales unless values fall below the format's subnormals; quant.h).
struct ColwiseProblem {
  quant::QuantSpec spec;
  int64_t rows = 0, cols = 0, groups = 1;  // of the row-wise payload
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;          // of the row-wise payload
  quant::ScaleLayout colwise_layout = quant::ScaleLayout::RowMajor;  // of the column-wise payload written
};

// q with its column-wise payload, its scales in `colwise_layout` (default: the row-wise payload's); q's row-wise
// payload is shared. Returns q unchanged when it already has one. The layouts may differ: the FP8 dispatch keeps its
// row scales row-major (they travel with the rows) while the Wgrad GEMM that reads the column-wise copy is fastest
// with its native layout.
quant::QTensor with_colwise(const ExecCtx& ctx, const quant::QTensor& q, MemCategory category = MemCategory::Workspace,
                            std::optional<quant::ScaleLayout> colwise_layout = std::nullopt);

// ---- block scales as row tiles (the dgrad_block ablation) --------------------------------------------------------
// A block-quantized q (row-wise payload, br×bc blocks, br > 1) re-expressed with granularity 1×bc: the same codes,
// each row of a block repeating the block's scale, in q's scale layout. The values are unchanged; this is the
// 1×128 · 128×128 pairing the scaled GEMMs take, so a 128×128-quantized dy can feed Dgrad (DeepSeek-V3 report,
// App. B.2). A device kernel, so that no scale grid goes through the host inside a step.
struct RowTileScalesProblem {
  quant::ScaleGrid from;  // q's row-wise grid (br×bc blocks)
  quant::ScaleGrid to;    // the 1×bc grid of the same rows, columns, groups and layout
};
quant::QTensor block_scales_as_row_tiles(const ExecCtx& ctx, const quant::QTensor& q,
                                         MemCategory category = MemCategory::Workspace);

// ---- SwiGLU fused into quantization ----------------------------------------------------------------------------
// SwiGLU on a gate|up [rows, 2F] kept quantized (the FP8 SwiGLU-input cache), straight into the next GEMM's
// quantized operands; by definition the composition of dequantize, the SwiGLU op and quantize, every intermediate
// in `dtype` (dout's dtype for the backward):
//   quantize_swiglu_forward(in)        = quantize(swiglu_forward(dequantize(in, dtype)), spec, outputs)   [rows, F]
//   quantize_swiglu_backward(in, dout) = quantize(swiglu_backward(dequantize(in, dtype), dout), ...)     [rows, 2F]
// The CPU, and any form the CUDA kernel does not cover, runs exactly that composition. On CUDA one 1x128 kernel
// reads the codes (and dout) once and writes the operands, rounding every intermediate to BF16 as the composition
// does: the same bits as the composition on the same device. Fused forms: in E4M3 1x128 (one group), F % 128 == 0,
// BF16, out 1x128 E4M3/E5M2 with nearest rounding, rows % 16 == 0.
struct SwigluQuantizeProblem {
  bool backward = false;
  int64_t rows = 0, ffn_dim = 0;
  quant::ScaleLayout in_layout = quant::ScaleLayout::RowMajor;  // of the gate|up codes' scales
  int64_t ld_dout = 0;                                          // backward: dout's row stride (BF16 elements)
  quant::QuantSpec spec;                                        // of the outputs
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;     // of the outputs
  bool rowwise = true, colwise = false;
};
quant::QTensor quantize_swiglu_forward(const ExecCtx& ctx, const quant::QTensor& in, DType dtype,
                                       const quant::QuantSpec& spec, QuantizeOutputs outputs, quant::ScaleLayout layout,
                                       MemCategory category = MemCategory::Workspace);
quant::QTensor quantize_swiglu_backward(const ExecCtx& ctx, const quant::QTensor& in, const Tensor& dout,
                                        const quant::QuantSpec& spec, QuantizeOutputs outputs,
                                        quant::ScaleLayout layout, MemCategory category = MemCategory::Workspace);

// SwiGLU's forward with its quantizations, from gate|up x [rows, 2F] in the compute dtype (the W1|W3 GEMM's
// output); by definition
//   cache = quantize(x, *cache_spec, Rowwise, cache_layout)          (the SwiGLU-input cache; when cache_spec is given)
//   act   = quantize(swiglu_forward(x), spec, Rowwise, layout)      (W2's Fprop operand)
// The CPU, and any form the CUDA kernel does not cover, runs exactly that; on CUDA one kernel reads x once and no
// BF16 act exists. Fused forms: BF16 x with 16-byte-aligned rows, F % 128 == 0, both specs 1x128 with nearest
// rounding, the cache E4M3, act E4M3 or E5M2.
struct SwigluGateUpProblem {
  int64_t rows = 0, ffn_dim = 0, ld = 0;
  quant::QuantSpec cache_spec;  // (the cache is written when its payload is given)
  quant::ScaleLayout cache_layout = quant::ScaleLayout::RowMajor;
  quant::QuantSpec spec;
  quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
};
struct SwigluGateUpQuantized {
  quant::QTensor cache;  // undefined without cache_spec
  quant::QTensor act;
};
SwigluGateUpQuantized quantize_swiglu_gate_up(const ExecCtx& ctx, const Tensor& x, const quant::QuantSpec* cache_spec,
                                              quant::ScaleLayout cache_layout, MemCategory cache_category,
                                              const quant::QuantSpec& spec, quant::ScaleLayout layout);

}  // namespace fp8train::ops
