// CUDA launchers of the scaled GEMMs (ops/scaled_gemm.h; the plain GEMMs of ops/gemm.h are in gemm_ops.cpp):
//   block-scaled E4M3 x E4M3, hopper accumulation promoting every 128 (the CPU's numerics bit for bit):
//     a 1x128 · b 128x128 -> BF16 (+= d)             fp8train's dense kernel (k_splits as the numerics say)
//     a 1x128 · b 128x128 -> F32 (+= d)              the Wgrad kernel, b's block scales repeated per row
//     a 1x128 · b 1x128 -> F32 (+= d)              fp8train's Wgrad kernel
//     with set_fp8_gemm_backend(CublasLt) / FP8TRAIN_FP8_GEMM=cublaslt: cuBLASLt (not bit-exact for every form)
//   per-tensor FP8 (promotion every 128, or never: cuBLASLt's fast accumulation)  cuBLASLt
//   grouped over M (a 1x128 · b_e 128x128 -> BF16) and over K (1x128 · 1x128 -> F32)  fp8train's grouped kernels
//   grouped per-tensor FP8 (fp8-tensorwise's experts)    one cuBLASLt GEMM per expert, offsets read on the host
//   grouped 1x128 · 128x128 -> F32 (health samples)      one F32 product per expert, offsets read on the host
//   the same block-scaled forms (dense, grouped over M and over K) with INT8 x INT8 operands, exact or hopper
//   accumulation (both mean: each 128 block's integer sum, exact, then the same FP32 promotion): fp8train's kernels
//   on the integer tensor-core instruction, bit for bit the CPU's
//   the same block-scaled E4M3 forms never promoting (promote=never, an ablation: each 128 block's scaled partial
//   added into a pending sum with the truncating FP22 adder): fp8train's kernels built so, bit for bit the CPU's
//   model (quant/ref_gemm.h); cuBLASLt has no such arithmetic, so FP8TRAIN_FP8_GEMM=cublaslt does not apply
// Every other form throws "not implemented on cuda: <what>": per-tensor INT8, E5M6 / BF16 scaled operands, exact
// or fp32 accumulation of FP8, block-scaled promotion intervals other than 128 and never, split-K never promoting,
// strided outputs of our kernels.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/scaled_gemm.h"
#include "tensor/cuda/cuda_check.h"

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

// Whether both operands are INT8 (the block-scaled INT8 form; one INT8 operand alone is refused).
bool int8_pair(const ops::ScaledGemmProblem& p) {
  return p.a.format == quant::Format::INT8 && p.b.format == quant::Format::INT8;
}

// The numerics fp8train's kernels compute: hopper accumulation promoting every 128 elements of K, or never (the
// pending FP22 sum; no split-K); for INT8 x INT8 (block-scaled only, no split-K), exact or hopper accumulation,
// which mean the same there (each 128 block's exact integer sum, then the FP32 promotion).
void check_own_numerics(const char* op, const ops::ScaledGemmProblem& p) {
  if (int8_pair(p)) {
    if (p.a.granularity.per_tensor || p.b.granularity.per_tensor)
      throw_not_implemented(op, "per-tensor INT8 (the INT8 kernels are block-scaled)");
    if (p.numerics.mode != quant::AccumMode::Exact && p.numerics.mode != quant::AccumMode::Hopper)
      throw_not_implemented(op, std::string(quant::accum_mode_name(p.numerics.mode)) + " accumulation of INT8");
    if (p.numerics.k_splits != 1) throw_not_implemented(op, "split-K of INT8 GEMMs");
    return;
  }
  if (p.numerics.mode != quant::AccumMode::Hopper)
    throw_not_implemented(op, std::string(quant::accum_mode_name(p.numerics.mode)) + " accumulation");
  if (p.numerics.promote_interval == num::kNeverPromote) {
    if (p.numerics.k_splits != 1) throw_not_implemented(op, "split-K never promoting");
    return;
  }
  if (p.numerics.promote_interval != 128)
    throw_not_implemented(op, "promotion every " + std::to_string(p.numerics.promote_interval) +
                                  " elements (the kernels promote every 128, or never)");
}

// Whether fp8train's kernels run never promoting (FP8 operands under promote=never; INT8 ignores the interval,
// as the CPU model does).
bool never_promote(const ops::ScaledGemmProblem& p) {
  return !int8_pair(p) && p.numerics.promote_interval == num::kNeverPromote;
}

void check_fp8(const char* op, const ops::ScaledGemmProblem& p) {
  if (int8_pair(p)) return;
  for (const ScaledOperand* o : {&p.a, &p.b})
    if (o->format != quant::Format::E4M3 && o->format != quant::Format::E5M2)
      throw_not_implemented(
          op, std::string(quant::format_name(o->format)) + " operands (the GEMMs take e4m3 / e5m2, or int8 x int8)");
}

OperandScaling lt_scaling(const ScaledOperand& o) {
  if (o.granularity.per_tensor) return OperandScaling::Tensor;
  if (o.granularity == quant::Granularity::tile_1x128()) return OperandScaling::Tile1x128;
  if (o.granularity == quant::Granularity::block_128x128()) return OperandScaling::Block128x128;
  throw_not_implemented("scaled_gemm", o.granularity.name() + " blocks (cuBLASLt serves tensor, 1x128 and 128x128)");
}

void run_cublaslt(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, void* d, int64_t lda = 0, int64_t ldb = 0) {
  CublasLtProblem q;
  q.m = p.m;
  q.n = p.n;
  q.k = p.k;
  q.lda = lda;
  q.ldb = ldb;
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

// Per-tensor FP8 over experts (fp8-tensorwise's MoE): one cuBLASLt per-tensor GEMM per expert on its rows (over M)
// or its K range (over K), each expert's weight with its own scale entry (a stack quantized per tensor repeats the
// one scale per group). The offsets are read on the host, as the BF16 per-expert path does.
void per_tensor_grouped(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, const int32_t* offsets, void* d,
                        bool over_k) {
  const char* op = over_k ? "scaled_gemm_grouped_k" : "scaled_gemm_grouped";
  if (p.numerics.promote_interval != 128 && p.numerics.promote_interval != num::kNeverPromote)
    throw_not_implemented(op, "per-tensor FP8 promoting every " + std::to_string(p.numerics.promote_interval) +
                                  " elements (cuBLASLt promotes every 128, or never)");
  const std::vector<int32_t> off = expert_offsets_on_host(ctx, offsets, p.num_groups, over_k ? p.k : p.m, 16, op);
  const int64_t out_es = p.out_dtype == DType::F32 ? 4 : 2;
  auto* d_bytes = static_cast<char*>(d);
  if (!over_k && !p.accumulate && off[p.num_groups] < p.m)  // spare rows past the last expert come out zero
    FP8T_CUDA_CHECK(cudaMemsetAsync(d_bytes + off[p.num_groups] * p.ldd * out_es, 0,
                                    static_cast<size_t>((p.m - off[p.num_groups]) * p.ldd * out_es), stream_of(ctx)));
  for (int e = 0; e < p.num_groups; ++e) {
    const int64_t begin = off[e], len = off[e + 1] - off[e];
    ops::ScaledGemmProblem q = p;
    q.num_groups = 1;
    q.a.groups = q.b.groups = 1;
    if (over_k) {
      // d[e] (+)= a[:, K_e] · b[:, K_e]ᵀ: column slices of a and b (row strides stay the whole K).
      void* de = d_bytes + e * p.m * p.n * out_es;
      if (len == 0) {
        if (!p.accumulate)
          FP8T_CUDA_CHECK(cudaMemsetAsync(de, 0, static_cast<size_t>(p.m * p.n * out_es), stream_of(ctx)));
        continue;
      }
      q.k = len;
      q.a.codes = static_cast<const uint8_t*>(p.a.codes) + begin;
      q.b.codes = static_cast<const uint8_t*>(p.b.codes) + begin;
      q.ldd = p.n;
      run_cublaslt(ctx, q, de, p.k, p.k);
    } else {
      if (len == 0) continue;
      q.m = len;
      q.a.codes = static_cast<const uint8_t*>(p.a.codes) + begin * p.k;
      q.b.codes = static_cast<const uint8_t*>(p.b.codes) + e * p.n * p.k;
      q.b.scales = p.b.scales + (p.b.groups > 1 ? e : 0);
      run_cublaslt(ctx, q, d_bytes + begin * p.ldd * out_es);
    }
  }
}

// 1x128 · 128x128 into F32 (the numerics-health samples' FP32 view of Fprop / Dgrad products): b's block scales
// repeated per row make it the Wgrad kernel's 1x128 · 1x128 form, whose K chain is the dense kernel's -- the same
// scale product and promotion per 128 -- without the BF16 rounding. The scales are expanded on the host (a copy
// each way and a stream synchronization: sampled steps only). d: [m, n] F32 (+= when accumulate).
void f32_block_product(const ExecCtx& ctx, int64_t m, int64_t n, int64_t k, const uint8_t* a, ScaleView sa,
                       const uint8_t* b, ScaleView sb, bool accumulate, float* d, bool int8, bool never) {
  const cudaStream_t stream = stream_of(ctx);
  const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
  const int64_t span = (nb - 1) * sb.row_stride + (kb - 1) * sb.kblock_stride + 1;
  std::vector<float> blocks(static_cast<size_t>(span)), rows(static_cast<size_t>(n * kb));
  FP8T_CUDA_CHECK(
      cudaMemcpyAsync(blocks.data(), sb.data, blocks.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < kb; ++g) rows[r * kb + g] = blocks[(r / 128) * sb.row_stride + g * sb.kblock_stride];
  const Tensor row_scales = Tensor::from_vector(rows, {n, kb}, MemCategory::Workspace, Device::cpu()).to(ctx.device);
  Fp8GemmWgradProblem q;
  q.m = m;
  q.n = n;
  q.k = k;
  q.a = a;
  q.a_scales = sa;
  q.b = b;
  q.b_scales = row_major_scale_view(row_scales.data<float>(), kb);
  q.int8 = int8;
  q.never_promote = never;
  q.c = accumulate ? d : nullptr;
  q.d = d;
  fp8_gemm_wgrad(q, Fp8GemmConfig{}, stream);
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream));  // row_scales is freed on return
}

void f32_block_product(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, void* d) {
  if (p.numerics.k_splits > 1) throw_not_implemented("scaled_gemm", "split-K into F32");
  f32_block_product(ctx, p.m, p.n, p.k, static_cast<const uint8_t*>(p.a.codes), scale_view(p.a),
                    static_cast<const uint8_t*>(p.b.codes), scale_view(p.b), p.accumulate, static_cast<float*>(d),
                    int8_pair(p), never_promote(p));
}

// The grouped form into F32 (health samples of the experts' Fprop / Dgrad): one F32 product per expert on its rows.
void f32_block_product_grouped(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, const int32_t* offsets, void* d) {
  const std::vector<int32_t> off = expert_offsets_on_host(ctx, offsets, p.num_groups, p.m, 16, "scaled_gemm_grouped");
  auto* out = static_cast<float*>(d);
  if (!p.accumulate && off[p.num_groups] < p.m)  // spare rows past the last expert come out zero
    FP8T_CUDA_CHECK(cudaMemsetAsync(out + off[p.num_groups] * p.ldd, 0,
                                    static_cast<size_t>((p.m - off[p.num_groups]) * p.ldd) * sizeof(float),
                                    stream_of(ctx)));
  const ScaleView sa = scale_view(p.a), sb = scale_view(p.b);
  for (int e = 0; e < p.num_groups; ++e) {
    const int64_t begin = off[e], len = off[e + 1] - off[e];
    if (len == 0) continue;
    const ScaleView ea{sa.data + begin * sa.row_stride, sa.row_stride, sa.kblock_stride, 0};
    const ScaleView eb{sb.data + e * sb.group_stride, sb.row_stride, sb.kblock_stride, 0};
    f32_block_product(ctx, len, p.n, p.k, static_cast<const uint8_t*>(p.a.codes) + begin * p.k, ea,
                      static_cast<const uint8_t*>(p.b.codes) + e * p.n * p.k, eb, p.accumulate, out + begin * p.ldd,
                      int8_pair(p), never_promote(p));
  }
}

}  // namespace

void scaled_gemm(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, void* d) {
  const char* op = "scaled_gemm";
  if (p.m == 0 || p.n == 0) return;
  check_fp8(op, p);
  const bool int8 = int8_pair(p);
  if (!int8 && p.numerics.mode != quant::AccumMode::Hopper)
    throw_not_implemented(op, std::string(quant::accum_mode_name(p.numerics.mode)) + " accumulation");
  if (!int8 && p.a.granularity.per_tensor && p.b.granularity.per_tensor) {
    if (p.numerics.promote_interval != 128 && p.numerics.promote_interval != num::kNeverPromote)
      throw_not_implemented(op, "per-tensor FP8 promoting every " + std::to_string(p.numerics.promote_interval) +
                                    " elements (cuBLASLt promotes every 128, or never)");
    return run_cublaslt(ctx, p, d);
  }
  check_own_numerics(op, p);
  if (!int8 && !never_promote(p)) {
    if (p.numerics.k_splits != 1 && fp8_gemm_backend() != Fp8GemmBackend::Own)
      throw_not_implemented(op, "split-K through cuBLASLt");
    if (fp8_gemm_backend() == Fp8GemmBackend::CublasLt) return run_cublaslt(ctx, p, d);
  }
  // fp8train's own kernels (INT8 always: cuBLASLt has no block-scaled INT8 GEMM).
  const bool e4m3 = p.a.format == quant::Format::E4M3 && p.b.format == quant::Format::E4M3;
  const bool a_tile = p.a.granularity == quant::Granularity::tile_1x128();
  const bool fprop = a_tile && p.b.granularity == quant::Granularity::block_128x128();
  const bool wgrad = a_tile && p.b.granularity == quant::Granularity::tile_1x128();
  if (!(e4m3 || int8) || !(fprop || wgrad))
    throw_not_implemented(op, operand_name(p.a) + " x " + operand_name(p.b) +
                                  " on fp8train's kernels (e4m3 or int8, 1x128 x 128x128 or 1x128; "
                                  "FP8TRAIN_FP8_GEMM=cublaslt selects cuBLASLt for e4m3)");
  if (p.ldd != p.n) throw_not_implemented(op, "a strided output (row stride " + std::to_string(p.ldd) + ")");
  if (!aligned16(p.a.codes) || !aligned16(p.b.codes) || !aligned16(d))
    throw_not_implemented(op, "operands or output not 16-byte aligned");
  if (fprop) {
    if (p.out_dtype == DType::F32) return f32_block_product(ctx, p, d);
    Fp8GemmDenseProblem q;
    q.m = p.m;
    q.n = p.n;
    q.k = p.k;
    q.a = static_cast<const uint8_t*>(p.a.codes);
    q.a_scales = scale_view(p.a);
    q.b = static_cast<const uint8_t*>(p.b.codes);
    q.b_scales = scale_view(p.b);
    q.int8 = int8;
    q.never_promote = never_promote(p);
    q.d = static_cast<uint16_t*>(d);
    if (p.accumulate) q.c = static_cast<const uint16_t*>(d);  // d = bf16(d + a·bᵀ), the CPU's one FP32 add
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
  q.int8 = int8;
  q.never_promote = never_promote(p);
  q.c = p.accumulate ? static_cast<const float*>(d) : nullptr;
  q.d = static_cast<float*>(d);
  fp8_gemm_wgrad(q, Fp8GemmConfig{}, stream_of(ctx));
}

void scaled_gemm_grouped(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, const int32_t* offsets, void* d) {
  const char* op = "scaled_gemm_grouped";
  if (p.m == 0 || p.n == 0) return;
  check_fp8(op, p);
  const bool int8 = int8_pair(p);
  if (!int8 && p.a.granularity.per_tensor && p.b.granularity.per_tensor && p.numerics.mode == quant::AccumMode::Hopper)
    return per_tensor_grouped(ctx, p, offsets, d, false);
  check_own_numerics(op, p);
  const bool e4m3 = p.a.format == quant::Format::E4M3 && p.b.format == quant::Format::E4M3;
  if (!(e4m3 || int8) || p.a.granularity != quant::Granularity::tile_1x128() ||
      p.b.granularity != quant::Granularity::block_128x128())
    throw_not_implemented(op, operand_name(p.a) + " x " + operand_name(p.b) + " (e4m3 or int8, 1x128 x 128x128 only)");
  if (p.ldd != p.n) throw_not_implemented(op, "strided outputs");
  if (p.out_dtype == DType::F32) {
    if (p.numerics.k_splits != 1) throw_not_implemented(op, "split-K of the grouped form");
    return f32_block_product_grouped(ctx, p, offsets, d);
  }
  if (p.accumulate) throw_not_implemented(op, "accumulating into BF16 (the grouped kernel writes BF16)");
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
  q.int8 = int8;
  q.never_promote = never_promote(p);
  q.d = static_cast<uint16_t*>(d);
  fp8_gemm_grouped(q, Fp8GemmConfig{}, stream_of(ctx));
}

void scaled_gemm_grouped_k(const ExecCtx& ctx, const ops::ScaledGemmProblem& p, const int32_t* k_offsets, void* d) {
  const char* op = "scaled_gemm_grouped_k";
  if (p.m == 0 || p.n == 0) return;
  check_fp8(op, p);
  const bool int8 = int8_pair(p);
  if (!int8 && p.a.granularity.per_tensor && p.b.granularity.per_tensor && p.numerics.mode == quant::AccumMode::Hopper)
    return per_tensor_grouped(ctx, p, k_offsets, d, true);
  check_own_numerics(op, p);
  const bool e4m3 = p.a.format == quant::Format::E4M3 && p.b.format == quant::Format::E4M3;
  if (!(e4m3 || int8) || p.a.granularity != quant::Granularity::tile_1x128())
    throw_not_implemented(op, operand_name(p.a) + " x " + operand_name(p.b) + " (e4m3 or int8, 1x128 x 1x128 only)");
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
  q.int8 = int8;
  q.never_promote = never_promote(p);
  q.c = p.accumulate ? static_cast<const float*>(d) : nullptr;
  q.d = static_cast<float*>(d);
  fp8_gemm_wgrad(q, Fp8GemmConfig{}, stream_of(ctx));
}

}  // namespace kernels
}  // namespace fp8train::ops::cuda
