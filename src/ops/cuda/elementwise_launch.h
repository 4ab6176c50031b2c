// Plain launch functions of the CUDA elementwise family (elementwise_ops.cpp calls them; the kernels are in
// elementwise_kernels.cu and elementwise_norm.cu). No fmt here: nvcc compiles this header. Storage types are F32
// or BF16 (uint16_t codes on the device), arithmetic in FP32, BF16 outputs rounded once to nearest even with the
// host's num::bf16_encode (NaN stays NaN as on the CPU). Layouts are row-major with row strides ("ld") in elements;
// every launch runs on `stream` and returns the launch's cudaError_t.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace fp8train::ops::cuda::ew {

enum class Ty : uint8_t { F32, BF16 };

// out[r, c] = alpha·a[row_a(r), c] (+ beta·b[r, c]) over rows × cols, products and the sum rounded separately
// (as the CPU's un-contracted float arithmetic). a_rows (I32 [rows], may be null): a's row index per output row
// (the embedding lookup), rows outside [0, a_row_limit) are written as NaN. out may alias a or b (same ld):
// each element is read and written by the same thread.
struct AxpbyArgs {
  Ty out = Ty::F32, a = Ty::F32, b = Ty::F32;
  int64_t rows = 0, cols = 0;
  int64_t ld_a = 0, ld_b = 0, ld_out = 0;
  float alpha = 1.0f, beta = 0.0f;
  const int32_t* a_rows = nullptr;
  int64_t a_row_limit = 0;
};
cudaError_t axpby(const AxpbyArgs& args, const void* a, const void* b, void* out, cudaStream_t stream);

// out[r, c] = the element whose bits are `bits` (F32: 32 bits, BF16: the low 16).
cudaError_t fill(Ty type, int64_t rows, int64_t cols, int64_t ld, uint32_t bits, void* out, cudaStream_t stream);

// Embedding backward: dtable[ids[t]] += dout[t] for t in increasing order per vocab row (the CPU's order: bit
// for bit). ids are sorted stably (CUB radix sort) in `workspace` (embedding_backward_workspace bytes); ids
// outside [0, vocab) are skipped.
size_t embedding_backward_workspace(int64_t tokens);
cudaError_t embedding_backward(Ty dout_type, int64_t tokens, int64_t vocab, int64_t dim, int64_t ld_dout,
                               const int32_t* ids, const void* dout, float* dtable, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

// RMSNorm forward: one CTA per row; rstd (F32 [rows]) may be null.
struct RmsNormArgs {
  Ty type = Ty::F32;
  int64_t rows = 0, dim = 0;
  int64_t ld_x = 0, ld_y = 0, ld_dx = 0, ld_dy = 0;
  float eps = 1e-6f;
  bool accumulate_dx = false;
};
cudaError_t rmsnorm_forward(const RmsNormArgs& args, const void* x, const float* w, void* y, float* rstd,
                            cudaStream_t stream);
// RMSNorm backward: dx by one CTA per row; dw_partial F32 [ceil(rows / 64), dim] scratch (only when dw is not
// null): each fixed 64-row chunk's Σ dy·x·rstd summed row by row, then dw += the chunks in chunk order (the CPU's
// order and rounding: dw is bit for bit the CPU's).
inline constexpr int64_t kRmsNormRowsPerChunk = 64;
cudaError_t rmsnorm_backward(const RmsNormArgs& args, const void* x, const float* w, const float* rstd, const void* dy,
                             void* dx, float* dw, float* dw_partial, cudaStream_t stream);

// RoPE in place on x [rows, heads, rope_dim] (unit last stride) with `table` (F32 [seq_len, rope_dim / 2, 2]):
// rope_table fills it with cos / sin of pos·theta^(−2i/rope_dim) computed in double and rounded to F32, as the CPU
// does (the launcher keeps one table per setting, so a step computes it once).
struct RopeArgs {
  Ty type = Ty::F32;
  int64_t rows = 0, heads = 0, rope_dim = 0;
  int64_t ld = 0, head_stride = 0;
  int64_t seq_len = 0;
  double theta = 10000.0;
  bool inverse = false;
  int64_t pos_offset = 0;
};
cudaError_t rope_table(const RopeArgs& args, float* table, cudaStream_t stream);
cudaError_t rope(const RopeArgs& args, void* x, const float* table, cudaStream_t stream);

// SwiGLU on in [rows, 2F] (gate | up) -> out [rows, F]; backward din [rows, 2F] (row stride ld_in).
struct SwigluArgs {
  Ty type = Ty::F32;
  int64_t rows = 0, ffn_dim = 0;
  int64_t ld_in = 0, ld_out = 0;
};
cudaError_t swiglu_forward(const SwigluArgs& args, const void* in, void* out, cudaStream_t stream);
cudaError_t swiglu_backward(const SwigluArgs& args, const void* in, const void* dout, void* din, cudaStream_t stream);

}  // namespace fp8train::ops::cuda::ew
