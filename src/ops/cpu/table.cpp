// The CPU op table (ops/op_table.h) and the CPU thread settings (OpenMP threads; OpenBLAS pinned to one thread
// so that our shape-determined row splits do the threading and results do not depend on the thread count).
#include <omp.h>

#include "common/error.h"
#include "ops/cpu/kernels.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace fp8train::ops {

namespace cpu {

void throw_unsupported_dtype(DType dtype, const char* op) {
  FP8T_FAIL("CPU op {} does not support {} tensors", op, dtype_name(dtype));
}

namespace {
OpTable make_table() {
  openblas_set_num_threads(1);
  OpTable t;
  t.backend = "cpu";
  t.gemm = gemm;
  t.gemm_grouped = gemm_grouped;
  t.axpby = axpby;
  t.fill = fill;
  t.embedding_forward = embedding_forward;
  t.embedding_backward = embedding_backward;
  t.rmsnorm_forward = rmsnorm_forward;
  t.rmsnorm_backward = rmsnorm_backward;
  t.rope = rope;
  t.attention_forward = attention_forward;
  t.attention_backward = attention_backward;
  t.swiglu_forward = swiglu_forward;
  t.swiglu_backward = swiglu_backward;
  t.router_forward = router_forward;
  t.router_backward = router_backward;
  t.balance_loss_forward = balance_loss_forward;
  t.balance_loss_backward = balance_loss_backward;
  t.moe_build_plan = moe_build_plan;
  t.moe_permute = moe_permute;
  t.moe_permute_backward = moe_permute_backward;
  t.moe_unpermute = moe_unpermute;
  t.moe_unpermute_backward = moe_unpermute_backward;
  t.cross_entropy = cross_entropy;
  t.cross_entropy_distill = cross_entropy_distill;
  // quantization and scaled GEMMs
  t.quantize = quantize;
  t.quantize_delayed = quantize_delayed;
  t.dequantize = dequantize;
  t.with_colwise = with_colwise;
  t.row_tile_scales = row_tile_scales;
  t.scaled_gemm = scaled_gemm;
  t.scaled_gemm_grouped = scaled_gemm_grouped;
  t.scaled_gemm_grouped_k = scaled_gemm_grouped_k;

  // Optimizer and reductions over parameter arenas.
  t.adamw = adamw;
  t.sum_squares = sum_squares;
  // Per-head broadcast and reduction.
  t.repeat_heads = repeat_heads;
  t.attention_cached = attention_cached;
  t.sum_heads = sum_heads;
  // Numerics-health samples.
  t.row_error_sums = row_error_sums;
  t.quantized_operand_counts = quantized_operand_counts;
  return t;
}
}  // namespace

const OpTable& cpu_op_table() {
  static const OpTable table = make_table();
  return table;
}

}  // namespace cpu

void set_cpu_threads(int threads) {
  FP8T_CHECK(threads >= 1, "set_cpu_threads: {} threads", threads);
  cpu::cpu_op_table();  // make sure OpenBLAS has been pinned to one thread
  omp_set_num_threads(threads);
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace fp8train::ops
