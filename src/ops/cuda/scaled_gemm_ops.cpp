// CUDA launchers of the scaled GEMMs (ops/scaled_gemm.h; the plain GEMMs of ops/gemm.h are in gemm_ops.cpp):
//   block-scaled E4M3 x E4M3, hopper accumulation promoting every 128 (the CPU's numerics bit for bit):
//     a 1x128 · b 128x128 -> BF16                   fp8train's dense kernel (k_splits as the numerics say)
//     a 1x128 · b 1x128 -> F32 (+= d)              fp8train's Wgrad kernel
//     with set_fp8_gemm_backend(CublasLt) / FP8TRAIN_FP8_GEMM=cublaslt: cuBLASLt (not bit-exact for every form)
//   per-tensor FP8 (promotion every 128, or never: cuBLASLt's fast accumulation)  cuBLASLt
//   grouped over M (a 1x128 · b_e 128x128 -> BF16) and over K (1x128 · 1x128 -> F32)  fp8train's grouped kernels
// Every other form throws "not implemented on cuda: <what>": INT8 GEMMs, E5M6 / BF16 scaled operands, exact or
// fp32 accumulation, other promotion intervals, strided outputs of our kernels.
#include <cuda_runtime_api.h>

#include <string>

#include "common/error.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/scaled_gemm.h"

namespace fp8train::ops::cuda {
namespace kernels {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The kernels' view of an operand's 1x128 or 128x128 scales (group stride for expert weights).
ScaleView scale_view(const ScaledOperand& o) {
  const quant::ScaleStrides s = quant::ScaleGrid{o.granularity, o.rows, o.cols, o.groups, o.layout}.strides();
  return {o.scales, s.row, s.col, s.group};
}

std::string operand_name(const ScaledOperand& o) {
  return std::string(quant::format_name(o.format)) + " " + o.granularity.name();
}

// The numerics fp8train's kernels compute: hopper accumulation promoting every 128 elements of K.
void check_own_numerics(const char* op, const ops::ScaledGemmProblem& p) {
  if (p.numerics.mode != quant::AccumMode::Hopper)
    throw_not_implemented(op, std::string(quant::accum_mode_name(p.numerics.mode)) + " accumulation");
  if (p.numerics.promote_interval != 128)
    throw_not_implemented(op, "promotion every " + std::to_string(p.numerics.promote_interval) +
                                  " elements (the kernels promote every 128)");
}

void check_fp8(const char* op, const ops::ScaledGemmProblem& p) {
  for (const ScaledOperand* o : {&p.a, &p.b})
    if (o->format != quant::Format::E4M3 && o->format != quant::Format::E5M2)
      throw_not_implemented(op, std::string(quant::format_name(o->format)) + " operands (FP8 GEMMs take e4m3 / e5m2)");
}

OperandScaling lt_scaling(const ScaledOperand& o) {
  if (o.granularity.per_tensor) return OperandScaling::Tensor;
  if (o.granularity == quant::Granularity::tile_1x128()) return OperandScaling::Tile1x128;
  if (o.granularity == quant::Granularity::block_128x128()) return OperandScaling::Block128x128;
  throw_not_implemented("scaled_gemm", o.granularity.name() + " blocks (cuBLASLt serves tensor, 1x128 and 128x128)");
}

void run_cublaslt(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, void* d) {
  CublasLtProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.a_type = p.a.format == quant::Format::E4M3 ? GemmInput::E4M3 : GemmInput::E5M2;
  q.b_type = p.b.format == quant::Format::E4M3 ? GemmInput::E4M3 : GemmInput::E5M2;
  q.a_scaling = lt_scaling(p.a);
  q.b_scaling = lt_scaling(p.b);
  q.a_scale_layout = p.a.layout;
  q.b_scale_layout = p.b.layout;
  q.out = p.out_dtype == DType::F32 ? GemmOutput::F32 : GemmOutput::BF16;
  q.accumulate = p.accumulate;
  q.fast_accum = p.a.granularity.per_tensor && p.numerics.promote_interval == num::kNeverPromote;
  q.ldd = p.ldd;
  cublaslt_gemm(ctx.device.index).run(q, p.a.codes, p.a.scales, p.b.codes, p.b.scales, d, stream_of(ctx));
}

}  // namespace

void scaled_gemm(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, void* d) {
  const char* op = "scaled_gemm";
  if (p.m == 0 || p.n == 0) return;
  check_fp8(op, p);
  if (p.numerics.mode != quant::AccumMode::Hopper)
    throw_not_implemented(op, std::string(quant::accum_mode_name(p.numerics.mode)) + " accumulation");
  if (p.a.granularity.per_tensor && p.b.granularity.per_tensor) {
    if (p.numerics.promote_interval != 128 && p.numerics.promote_interval != num::kNeverPromote)
      throw_not_implemented(op, "per-tensor FP8 promoting every " + std::to_string(p.numerics.promote_interval) +
                                    " elements (cuBLASLt promotes every 128, or never)");
    return run_cublaslt(ctx, p, d);
  }
  check_own_numerics(op, p);
  if (p.numerics.k_splits != 1 && fp8_gemm_backend() != Fp8GemmBackend::Own)
    throw_not_implemented(op, "split-K through cuBLASLt");
  if (fp8_gemm_backend() == Fp8GemmBackend::CublasLt) return run_cublaslt(ctx, p, d);
  // fp8train's own kernels.
  const bool e4m3 = p.a.format == quant::Format::E4M3 && p.b.format == quant::Format::E4M3;
  const bool a_tile = p.a.granularity == quant::Granularity::tile_1x128();
  const bool fprop = a_tile && p.b.granularity == quant::Granularity::block_128x128();
  const bool wgrad = a_tile && p.b.granularity == quant::Granularity::tile_1x128();
  if (!e4m3 || !(fprop || wgrad))
    throw_not_implemented(op, operand_name(p.a) + " x " + operand_name(p.b) +
                                  " on fp8train's kernels (e4m3 1x128 x e4m3 128x128 or 1x128; FP8TRAIN_FP8_GEMM="
                                  "cublaslt selects cuBLASLt)");
  if (p.ldd != p.n) throw_not_implemented(op, "a strided output (row stride " + std::to_string(p.ldd) + ")");
  if (!aligned16(p.a.codes) || !aligned16(p.b.codes) || !aligned16(d))
    throw_not_implemented(op, "operands or output not 16-byte aligned");
  if (fprop) {
    if (p.out_dtype != DType::BF16 || p.accumulate)
      throw_not_implemented(op, "1x128 x 128x128 into F32 or with accumulation (the kernel writes BF16)");
    Fp8GemmDenseProblem q;
    q.m = p.m;
    q.n = p.n;
    q.k = p.k;
    q.a = static_cast<const uint8_t*>(p.a.codes);
    q.a_scales = scale_view(p.a);
    q.b = static_cast<const uint8_t*>(p.b.codes);
    q.b_scales = scale_view(p.b);
    q.d = static_cast<uint16_t*>(d);
    Fp8GemmConfig cfg;
    cfg.k_splits = p.numerics.k_splits;  // 1: no split; the split-K arithmetic is part of the numerics
    fp8_gemm_dense(q, cfg, stream_of(ctx));
    return;
  }
  if (p.out_dtype != DType::F32) throw_not_implemented(op, "1x128 x 1x128 into BF16 (the Wgrad kernel writes F32)");
  if (p.numerics.k_splits != 1) throw_not_implemented(op, "split-K of the Wgrad form");
  Fp8GemmWgradProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.a = static_cast<const uint8_t*>(p.a.codes);
  q.a_scales = scale_view(p.a);
  q.b = static_cast<const uint8_t*>(p.b.codes);
  q.b_scales = scale_view(p.b);
  q.c = p.accumulate ? static_cast<const float*>(d) : nullptr;
  q.d = static_cast<float*>(d);
  fp8_gemm_wgrad(q, Fp8GemmConfig{}, stream_of(ctx));
}

void scaled_gemm_grouped(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, const int32_t* offsets, void* d) {
  const char* op = "scaled_gemm_grouped";
  if (p.m == 0 || p.n == 0) return;
  check_fp8(op, p);
  check_own_numerics(op, p);
  if (p.a.format != quant::Format::E4M3 || p.b.format != quant::Format::E4M3 ||
      p.a.granularity != quant::Granularity::tile_1x128() || p.b.granularity != quant::Granularity::block_128x128())
    throw_not_implemented(op, operand_name(p.a) + " x " + operand_name(p.b) + " (e4m3 1x128 x e4m3 128x128 only)");
  if (p.out_dtype != DType::BF16 || p.accumulate || p.ldd != p.n)
    throw_not_implemented(op, "F32, accumulating or strided outputs (the grouped kernel writes BF16)");
  if (p.numerics.k_splits != 1) throw_not_implemented(op, "split-K of the grouped form");
  Fp8GemmGroupedProblem q;
  q.m_total = p.m;
  q.n = p.n;
  q.k = p.k;
  q.num_groups = p.num_groups;
  q.row_offsets = offsets;
  q.a = static_cast<const uint8_t*>(p.a.codes);
  q.a_scales = scale_view(p.a);
  q.b = static_cast<const uint8_t*>(p.b.codes);
  q.b_scales = scale_view(p.b);
  q.d = static_cast<uint16_t*>(d);
  fp8_gemm_grouped(q, Fp8GemmConfig{}, stream_of(ctx));
}

void scaled_gemm_grouped_k(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, const int32_t* k_offsets, void* d) {
  const char* op = "scaled_gemm_grouped_k";
  if (p.m == 0 || p.n == 0) return;
  check_fp8(op, p);
  check_own_numerics(op, p);
  if (p.a.format != quant::Format::E4M3 || p.b.format != quant::Format::E4M3 ||
      p.a.granularity != quant::Granularity::tile_1x128())
    throw_not_implemented(op, operand_name(p.a) + " x " + operand_name(p.b) + " (e4m3 1x128 x e4m3 1x128 only)");
  if (p.numerics.k_splits != 1) throw_not_implemented(op, "split-K of the K-grouped form");
  Fp8GemmWgradProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.num_groups = p.num_groups;
  q.k_offsets = k_offsets;
  q.a = static_cast<const uint8_t*>(p.a.codes);
  q.a_scales = scale_view(p.a);
  q.b = static_cast<const uint8_t*>(p.b.codes);
  q.b_scales = scale_view(p.b);
  q.c = p.accumulate ? static_cast<const float*>(d) : nullptr;
  q.d = static_cast<float*>(d);
  fp8_gemm_wgrad(q, Fp8GemmConfig{}, stream_of(ctx));
}

}  // namespace kernels
}  // namespace fp8train::ops::cuda
