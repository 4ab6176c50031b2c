// The CUDA op table (ops/op_table.h): the ops with a CUDA kernel, registered when the backend starts
// (ops::cuda::init). Ops left null here are CPU only for now; their entry points then say so.
#include "common/error.h"
#include "ops/cuda/kernels.h"
#include "tensor/cuda/cuda_backend.h"

namespace fp8train::ops::cuda {

namespace {
OpTable make_table() {
  OpTable t;
  t.backend = "cuda";
  t.gemm = kernels::gemm;
  t.gemm_grouped = kernels::gemm_grouped;
  // quantization and scaled GEMMs
  t.quantize = kernels::quantize;
  t.quantize_delayed = kernels::quantize_delayed;
  t.dequantize = kernels::dequantize;
  t.with_colwise = kernels::with_colwise;
  t.row_tile_scales = kernels::row_tile_scales;
  t.swiglu_quantize = kernels::swiglu_quantize;
  t.swiglu_gate_up = kernels::swiglu_gate_up;
  t.scaled_gemm = kernels::scaled_gemm;
  t.scaled_gemm_grouped = kernels::scaled_gemm_grouped;
  t.scaled_gemm_grouped_k = kernels::scaled_gemm_grouped_k;
  install_elementwise_ops(t);
  install_attention_ops(t);
  install_moe_ops(t);
  install_train_ops(t);
  install_health_ops(t);
  return t;
}
}  // namespace

const OpTable& cuda_op_table() {
  static const OpTable table = make_table();
  return table;
}

Device init(int ordinal, bool make_default) {
  const Device d = fp8train::cuda::init_cuda_backend(ordinal, make_default);
  register_op_table(DeviceType::CUDA, &cuda_op_table());
  return d;
}

void throw_not_implemented(const char* op, const std::string& what) {
  FP8T_FAIL("{} is not implemented on cuda: {}", op, what);
}

}  // namespace fp8train::ops::cuda
