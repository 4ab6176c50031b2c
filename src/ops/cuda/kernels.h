// The CUDA op table (ops/op_table.h) and its launchers: each member of the table is declared here by its launcher
// type and put into the table by ops/cuda/table.cpp. A launcher runs on ctx.stream, trusts what the entry point
// validated (shapes, dtypes, devices), and throws fp8train::Error "<op> is not implemented on cuda: <what>" for a
// form the CUDA kernels do not serve (the CPU serves every form). A null table entry: the whole op is CPU only.
// The kernels behind them: quantize_fast.cu / quantize_blocks.cu / dequantize.cu / transpose.cu (quantizers,
// quantize_cuda.h), fp8_gemm_*.cu (fp8train's FP8 GEMMs, fp8_gemm.h), cuBLASLt (cublaslt_gemm.h) and gemm_convert.cu
// (gemm_launch.h).
#pragma once
#include <cstdint>
#include <vector>

#include "ops/op_table.h"
#include "tensor/device.h"

namespace fp8train::ops::cuda {

// Starts the CUDA backend on device `ordinal` (tensor/cuda: streams, allocator) and registers the CUDA op table;
// what the command line and the GPU tests call instead of fp8train::cuda::init_cuda_backend.
Device init(int ordinal = 0, bool make_default = false);

const OpTable& cuda_op_table();

[[noreturn]] void throw_not_implemented(const char* op, const std::string& what);

// The op families' launchers, each file filling its members of the table (one install function per file). The
// launchers (.cpp) validate and report errors with fmt; their kernels live in .cu files behind plain launch
// functions that return cudaError_t (nvcc cannot compile fmt's consteval format checks).
//   elementwise_ops.cpp axpby, fill, embedding, RMSNorm, RoPE, SwiGLU
//   attention_ops.cpp   the attention core (forward, backward) and the cached decoding attention
//   moe_ops.cpp         router, sequence balance loss, MoE plan / permute / unpermute
//   train_ops.cpp       cross-entropy, AdamW, sum of squares
//   health_ops.cpp      the numerics-health reductions (row error sums, quantized operand counts)
void install_elementwise_ops(OpTable& t);
void install_attention_ops(OpTable& t);
void install_moe_ops(OpTable& t);
void install_train_ops(OpTable& t);
void install_health_ops(OpTable& t);

// gemm_grouped's backend: the offsets read to the host and one cuBLASLt GEMM per expert (CublasLt, the default:
// faster at MoE shapes, one stream synchronization per call), or fp8train's kernels that read the offsets on the
// device (Own; also FP8TRAIN_GROUPED_GEMM=own at start-up).
enum class GroupedGemmBackend : uint8_t { Own, CublasLt };
void set_grouped_gemm_backend(GroupedGemmBackend b);
GroupedGemmBackend grouped_gemm_backend();

// The expert offsets of a grouped GEMM read to the host, for the paths that launch one GEMM per expert: a small
// copy and a synchronization of ctx's stream. Checked: offsets[0] >= 0, non-decreasing, multiples of `multiple`,
// offsets[groups] <= total (throws fp8train::Error naming `op` and the first bad entry). gemm_ops.cpp.
std::vector<int32_t> expert_offsets_on_host(const ExecCtx& ctx, const int32_t* offsets, int64_t groups, int64_t total,
                                            int64_t multiple, const char* op);

namespace kernels {
// plain GEMMs (gemm_ops.cpp): cuBLASLt, every transpose and F32/BF16 mix; grouped: one cuBLASLt GEMM per expert
GemmFn gemm;
GroupedGemmFn gemm_grouped;
// quantization and scaled GEMMs (quantize_ops.cpp, scaled_gemm_ops.cpp)
QuantizeFn quantize;
QuantizeDelayedFn quantize_delayed;
DequantizeFn dequantize;
WithColwiseFn with_colwise;
RowTileScalesFn row_tile_scales;
SwigluQuantizeFn swiglu_quantize;
SwigluGateUpFn swiglu_gate_up;
ScaledGemmFn scaled_gemm;
ScaledGemmGroupedFn scaled_gemm_grouped;
ScaledGemmGroupedFn scaled_gemm_grouped_k;
}  // namespace kernels

}  // namespace fp8train::ops::cuda
