// The op table: one plain table of launchers per backend (tier 2 of the three tiers below), filled once at
// start-up — ops/cpu/table.cpp for the CPU (always present), ops/cuda/table.cpp for CUDA (registered with the
// CUDA backend). A null entry means "this backend does not implement this op": the entry point then throws
// "op X is not implemented on device Y" instead of running anything else.
//   tier 1 kernel    — ops/cpu/<op>.cpp (OpenMP loops, OpenBLAS; the bit-exact reference), ops/cuda/<op>.cu
//   tier 2 launcher  — a member below: ExecCtx + problem descriptor + raw device pointers, no checks
//   tier 3 entry     — ops/<op>.h on Tensors / QTensors: checks dtype, shape, strides and device, fills the
//                      problem descriptor and calls the launcher of ctx.device's table (launcher() below)
// Adding an op: its descriptor and entry point (ops/<op>.h/.cpp), its launcher type and member here, its CPU
// kernel (ops/cpu/<op>.cpp + a line in ops/cpu/kernels.h and ops/cpu/table.cpp), its CUDA kernel (same on the
// CUDA side), and one row in the backend-vs-CPU test table (tests/ops/backend_ops_test.cpp).
// Layout conventions: row-major; "ld" = row stride in elements (>= columns); ids, expert indices and offsets
// are int32. Determinism: every CPU reduction has a fixed order that does not depend on the thread count.
#pragma once
#include <chrono>
#include <cstdint>
#include <string_view>
#include <utility>

#include "tensor/exec_ctx.h"

namespace fp8train::ops {

// Problem descriptors, defined in the op's own header.
struct GemmProblem;          // ops/gemm.h
struct GroupedGemmProblem;   // ops/gemm.h
struct AxpbyProblem;         // ops/elementwise.h
struct EmbeddingProblem;     // ops/embedding.h
struct RmsNormProblem;       // ops/rmsnorm.h
struct RopeProblem;          // ops/rope.h
struct AttentionProblem;     // ops/attention.h
struct SwigluProblem;        // ops/swiglu.h
struct RouterProblem;        // ops/router.h
struct BalanceLossProblem;   // ops/router.h
struct MoePlanProblem;       // ops/moe_dispatch.h
struct MoePermuteProblem;    // ops/moe_dispatch.h
struct CrossEntropyProblem;  // ops/cross_entropy.h
struct DistillProblem;       // ops/distill.h
// quantization and scaled GEMMs
struct QuantizeProblem;      // ops/quantize.h
struct QuantizedOut;         // ops/quantize.h
struct AmaxHistoryProblem;   // ops/quantize.h
struct DequantizeProblem;    // ops/quantize.h
struct ColwiseProblem;       // ops/quantize.h
struct RowTileScalesProblem;   // ops/quantize.h
struct SwigluQuantizeProblem;  // ops/quantize.h
struct SwigluGateUpProblem;    // ops/quantize.h
struct ScaledGemmProblem;    // ops/scaled_gemm.h
struct AdamWProblem;         // ops/adamw.h
struct SumSquaresProblem;    // ops/sum_squares.h
struct HeadsProblem;         // ops/heads.h
struct AttentionCachedProblem;  // ops/attention_cached.h
struct RowErrorSumsProblem;     // ops/health_stats.h
struct OperandCountsProblem;    // ops/health_stats.h

// ---- launcher types (tier 2) -------------------------------------------------------------------------
using GemmFn = void(const ExecCtx&, const GemmProblem&, const void* a, const void* b, void* c);
using GroupedGemmFn = void(const ExecCtx&, const GroupedGemmProblem&, const int32_t* offsets, const void* a,
                           const void* b, void* c);
using AxpbyFn = void(const ExecCtx&, const AxpbyProblem&, const void* a, const void* b, void* out);
using FillFn = void(const ExecCtx&, const AxpbyProblem&, double value, void* out);
using EmbeddingForwardFn = void(const ExecCtx&, const EmbeddingProblem&, const int32_t* ids, const void* table,
                                void* out);
using EmbeddingBackwardFn = void(const ExecCtx&, const EmbeddingProblem&, const int32_t* ids, const void* dout,
                                 void* dtable);
using RmsNormForwardFn = void(const ExecCtx&, const RmsNormProblem&, const void* x, const void* w, void* y, void* rstd);
using RmsNormBackwardFn = void(const ExecCtx&, const RmsNormProblem&, const void* x, const void* w, const void* rstd,
                               const void* dy, void* dx, void* dw);
using RopeFn = void(const ExecCtx&, const RopeProblem&, void* x);
using AttentionForwardFn = void(const ExecCtx&, const AttentionProblem&, const void* q, const void* k, const void* v,
                                void* o, void* lse);
using AttentionBackwardFn = void(const ExecCtx&, const AttentionProblem&, const void* q, const void* k, const void* v,
                                 const void* o, const void* lse, const void* dout, void* dq, void* dk, void* dv);
using SwigluForwardFn = void(const ExecCtx&, const SwigluProblem&, const void* in, void* out);
using SwigluBackwardFn = void(const ExecCtx&, const SwigluProblem&, const void* in, const void* dout, void* din);
using RouterForwardFn = void(const ExecCtx&, const RouterProblem&, const void* logits, const float* bias, void* scores,
                             int32_t* selected, void* gates, int32_t* expert_counts);
using RouterBackwardFn = void(const ExecCtx&, const RouterProblem&, const void* scores, const int32_t* selected,
                              const void* dgates, const void* dscores_extra, void* dlogits);
using BalanceLossForwardFn = double(const ExecCtx&, const BalanceLossProblem&, const void* scores,
                                    const int32_t* selected);
using BalanceLossBackwardFn = void(const ExecCtx&, const BalanceLossProblem&, const void* scores,
                                   const int32_t* selected, double dloss, void* dscores);
using MoeBuildPlanFn = void(const ExecCtx&, const MoePlanProblem&, const int32_t* selected, int32_t* expert_offsets,
                            int32_t* slot_token, int32_t* choice_slot);
using MoePermuteFn = void(const ExecCtx&, const MoePermuteProblem&, const void* x, const int32_t* slot_token, void* xp);
using MoePermuteBackwardFn = void(const ExecCtx&, const MoePermuteProblem&, const void* dxp, const int32_t* choice_slot,
                                  void* dx);
using MoeUnpermuteFn = void(const ExecCtx&, const MoePermuteProblem&, const void* yp, const int32_t* choice_slot,
                            const void* gates, void* y);
using MoeUnpermuteBackwardFn = void(const ExecCtx&, const MoePermuteProblem&, const void* dy, const void* yp,
                                    const int32_t* choice_slot, const void* gates, void* dyp, void* dgates);
using CrossEntropyFn = void(const ExecCtx&, const CrossEntropyProblem&, void* logits, const int32_t* targets,
                            double* row_loss);
using CrossEntropyDistillFn = void(const ExecCtx&, const DistillProblem&, void* logits, const int32_t* targets,
                                   const int32_t* teacher_ids, const float* teacher_probs, double* row_ce,
                                   double* row_kl);

// ---- quantization and scaled GEMMs (ops/quantize.h, ops/scaled_gemm.h) -------------------------------------
// A payload the problem does not ask for has null pointers.
using QuantizeFn = void(const ExecCtx&, const QuantizeProblem&, const void* x, const QuantizedOut& rowwise,
                        const QuantizedOut& colwise);
// entries F32 [length], meta I32 [3] {size, next, error}: the amax history (ops/quantize.h AmaxHistoryState).
using QuantizeDelayedFn = void(const ExecCtx&, const QuantizeProblem&, const AmaxHistoryProblem&, const void* x,
                               float* entries, int32_t* meta, const QuantizedOut& rowwise, const QuantizedOut& colwise);
using DequantizeFn = void(const ExecCtx&, const DequantizeProblem&, const void* codes, const float* scales, void* out);
using WithColwiseFn = void(const ExecCtx&, const ColwiseProblem&, const void* codes, const float* scales,
                           const QuantizedOut& colwise);
using RowTileScalesFn = void(const ExecCtx&, const RowTileScalesProblem&, const float* from, float* to);
// codes / scales: gate|up's 1x128 row-wise payload; dout: BF16 (backward only).
using SwigluQuantizeFn = void(const ExecCtx&, const SwigluQuantizeProblem&, const void* codes, const float* scales,
                              const void* dout, const QuantizedOut& rowwise, const QuantizedOut& colwise);
using SwigluGateUpFn = void(const ExecCtx&, const SwigluGateUpProblem&, const void* x, const QuantizedOut& cache,
                            const QuantizedOut& act);
// The operands' pointers travel in the problem (ScaledOperand); offsets: I32 [num_groups + 1] on the device.
using ScaledGemmFn = void(const ExecCtx&, const ScaledGemmProblem&, void* d);
using ScaledGemmGroupedFn = void(const ExecCtx&, const ScaledGemmProblem&, const int32_t* offsets, void* d);
// Optimizer and reductions over parameter arenas.
using AdamWFn = void(const ExecCtx&, const AdamWProblem&, float* param, const float* grad, void* exp_avg,
                     void* exp_avg_sq);
using SumSquaresFn = void(const ExecCtx&, const SumSquaresProblem&, const void* x, const int64_t* bounds, double* out);
// One [rows, dim] matrix and the same rows seen per head ([rows, heads, dim]): broadcast into and sum over heads.
using RepeatHeadsFn = void(const ExecCtx&, const HeadsProblem&, const void* src, void* dst);
using SumHeadsFn = void(const ExecCtx&, const HeadsProblem&, const void* src, void* dst);
// Incremental decoding: new tokens' queries against a key/value cache shared by every head.
using AttentionCachedFn = void(const ExecCtx&, const AttentionCachedProblem&, const void* q, const void* k,
                               const void* v, void* o);
// Numerics-health samples (ops/health_stats.h): per-row error sums of a product against its reference (out F64
// [rows, 2]), and a quantized operand's counts (I64 [3]) and scale range (F32 [2]).
using RowErrorSumsFn = void(const ExecCtx&, const RowErrorSumsProblem&, const void* y, const void* y_ref, double* out);
using OperandCountsFn = void(const ExecCtx&, const OperandCountsProblem&, const void* x, const void* codes,
                             const float* scales, int64_t* counts, float* scale_range);

struct OpTable {
  std::string_view backend;  // "cpu", "cuda"
  GemmFn* gemm = nullptr;
  GroupedGemmFn* gemm_grouped = nullptr;
  AxpbyFn* axpby = nullptr;
  FillFn* fill = nullptr;
  EmbeddingForwardFn* embedding_forward = nullptr;
  EmbeddingBackwardFn* embedding_backward = nullptr;
  RmsNormForwardFn* rmsnorm_forward = nullptr;
  RmsNormBackwardFn* rmsnorm_backward = nullptr;
  RopeFn* rope = nullptr;
  AttentionForwardFn* attention_forward = nullptr;
  AttentionBackwardFn* attention_backward = nullptr;
  SwigluForwardFn* swiglu_forward = nullptr;
  SwigluBackwardFn* swiglu_backward = nullptr;
  RouterForwardFn* router_forward = nullptr;
  RouterBackwardFn* router_backward = nullptr;
  BalanceLossForwardFn* balance_loss_forward = nullptr;
  BalanceLossBackwardFn* balance_loss_backward = nullptr;
  MoeBuildPlanFn* moe_build_plan = nullptr;
  MoePermuteFn* moe_permute = nullptr;
  MoePermuteBackwardFn* moe_permute_backward = nullptr;
  MoeUnpermuteFn* moe_unpermute = nullptr;
  MoeUnpermuteBackwardFn* moe_unpermute_backward = nullptr;
  CrossEntropyFn* cross_entropy = nullptr;
  CrossEntropyDistillFn* cross_entropy_distill = nullptr;  // CPU only so far

  // ---- quantization and scaled GEMMs ----
  QuantizeFn* quantize = nullptr;
  QuantizeDelayedFn* quantize_delayed = nullptr;
  DequantizeFn* dequantize = nullptr;
  WithColwiseFn* with_colwise = nullptr;
  RowTileScalesFn* row_tile_scales = nullptr;
  SwigluQuantizeFn* swiglu_quantize = nullptr;  // fused forms only (CUDA); the entry point composes otherwise
  SwigluGateUpFn* swiglu_gate_up = nullptr;     // fused forms only (CUDA); the entry point composes otherwise
  ScaledGemmFn* scaled_gemm = nullptr;
  ScaledGemmGroupedFn* scaled_gemm_grouped = nullptr;    // over M (expert rows)
  ScaledGemmGroupedFn* scaled_gemm_grouped_k = nullptr;  // over K (expert Wgrad)
  // Optimizer and reductions over parameter arenas.
  AdamWFn* adamw = nullptr;
  SumSquaresFn* sum_squares = nullptr;
  // Per-head broadcast and reduction (MLA's shared rotated key).
  RepeatHeadsFn* repeat_heads = nullptr;
  SumHeadsFn* sum_heads = nullptr;
  // Incremental decoding.
  AttentionCachedFn* attention_cached = nullptr;
  // Numerics-health samples.
  RowErrorSumsFn* row_error_sums = nullptr;
  OperandCountsFn* quantized_operand_counts = nullptr;
};

// The table of a device type: the CPU's is built in; another backend's exists once registered.
const OpTable& op_table(DeviceType type);
bool has_op_table(DeviceType type);
// Installs a backend's table (start-up; the table must outlive every op call). The CPU table cannot be replaced.
void register_op_table(DeviceType type, const OpTable* table);

[[noreturn]] void throw_not_implemented(std::string_view op, const ExecCtx& ctx);

// A launcher bound to its context: calling it runs the op, timed into ctx.profile when one is set.
template <class Fn>
struct Launch {
  Fn* fn;
  const ExecCtx* ctx;
  std::string_view op;
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    if (ctx->profile == nullptr) return fn(std::forward<Args>(args)...);
    const bool sync = ctx->profile->synchronizing() && ctx->stream != nullptr;
    if (sync) ctx->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    struct Record {  // records on every exit, a thrown error included
      const Launch* l;
      std::chrono::steady_clock::time_point t0;
      bool sync;
      ~Record() {
        if (sync) {
          try {
            l->ctx->synchronize();
          } catch (...) {  // a device error resurfaces at the step's next synchronization
          }
        }
        l->ctx->profile->add(l->op, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    } record{this, t0, sync};
    return fn(std::forward<Args>(args)...);
  }
};

// The launcher of `member` for ctx's device, or a clear error when that backend lacks the op.
template <class Fn>
Launch<Fn> launcher(const ExecCtx& ctx, Fn* OpTable::*member, std::string_view op) {
  Fn* fn = op_table(ctx.device.type).*member;
  if (fn == nullptr) throw_not_implemented(op, ctx);
  return {fn, &ctx, op};
}

// CPU threading: OpenMP threads used by the CPU kernels (OpenBLAS itself is kept single-threaded and every
// GEMM is split across the OpenMP threads, which keeps the result independent of scheduling).
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace fp8train::ops
