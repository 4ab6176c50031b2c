// The CPU kernels (tier 1 + 2 of ops/op_table.h): one file per op stem in ops/cpu/, each declared here with its
// launcher type and put into the CPU table by ops/cpu/table.cpp. Each kernel is a template over the storage
// type (float, double, bf16) behind the launcher, which switches on problem.dtype; arithmetic runs in the
// compute type (float for float and bf16, double for double): bf16 elements are widened on load and rounded to
// nearest even on store. Parallel loops use OpenMP with static partitions; reductions run in a fixed order
// (chunked partial sums added in chunk order), and GEMMs are split into shape-determined chunks (never along K),
// so results do not depend on the thread count (tests/model checks 1 vs 2 threads bit for bit).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/op_table.h"

namespace fp8train::ops::cpu {

GemmFn gemm;
GroupedGemmFn gemm_grouped;
AxpbyFn axpby;
FillFn fill;
EmbeddingForwardFn embedding_forward;
EmbeddingBackwardFn embedding_backward;
RmsNormForwardFn rmsnorm_forward;
RmsNormBackwardFn rmsnorm_backward;
RopeFn rope;
AttentionForwardFn attention_forward;
AttentionBackwardFn attention_backward;
SwigluForwardFn swiglu_forward;
SwigluBackwardFn swiglu_backward;
RouterForwardFn router_forward;
RouterBackwardFn router_backward;
BalanceLossForwardFn balance_loss_forward;
BalanceLossBackwardFn balance_loss_backward;
MoeBuildPlanFn moe_build_plan;
MoePermuteFn moe_permute;
MoePermuteBackwardFn moe_permute_backward;
MoeUnpermuteFn moe_unpermute;
MoeUnpermuteBackwardFn moe_unpermute_backward;
CrossEntropyFn cross_entropy;
CrossEntropyDistillFn cross_entropy_distill;

// ---- quantization and scaled GEMMs: the exact arithmetic of quant/ (ops/cpu/quantize.cpp, scaled_gemm.cpp) ----
QuantizeFn quantize;
QuantizeDelayedFn quantize_delayed;
DequantizeFn dequantize;
WithColwiseFn with_colwise;
RowTileScalesFn row_tile_scales;
ScaledGemmFn scaled_gemm;
ScaledGemmGroupedFn scaled_gemm_grouped;
ScaledGemmGroupedFn scaled_gemm_grouped_k;
// Optimizer and reductions over parameter arenas.
AdamWFn adamw;
SumSquaresFn sum_squares;
// Per-head broadcast and reduction.
RepeatHeadsFn repeat_heads;
SumHeadsFn sum_heads;
AttentionCachedFn attention_cached;
// Numerics-health samples (health_stats.cpp).
RowErrorSumsFn row_error_sums;
OperandCountsFn quantized_operand_counts;

// The CPU table (built on first use; pins OpenBLAS to one thread).
const OpTable& cpu_op_table();

[[noreturn]] void throw_unsupported_dtype(DType dtype, const char* op);

// ---- storage types --------------------------------------------------------------------------------------------
// compute_t<S>: the type arithmetic on storage type S runs in (float for float and bf16, double for double).
template <class S>
using compute_t = std::conditional_t<std::is_same_v<S, double>, double, float>;
// Widening load and rounding store (round to nearest even for bf16; the identity for float and double).
template <class S>
inline compute_t<S> load(S v) {
  return static_cast<compute_t<S>>(v);
}
template <class S>
inline S store(compute_t<S> v) {
  return static_cast<S>(v);
}

// log Σ exp(z[c]) over one row of n logits, in compute type C (the max first, then the sum in column order): the
// shared first pass of the cross-entropy kernels (cross_entropy.cpp, distill.cpp).
template <class C, class T>
inline C row_logsumexp(const T* z, int64_t n) {
  C mx = -std::numeric_limits<C>::infinity();
  for (int64_t c = 0; c < n; ++c) mx = std::max(mx, static_cast<C>(z[c]));
  C sum = 0;
  for (int64_t c = 0; c < n; ++c) sum += std::exp(static_cast<C>(z[c]) - mx);
  return mx + std::log(sum);
}

// Calls f(S{}) with S = float, double or bf16 according to a storage dtype; other dtypes throw.
template <class F>
void dispatch_storage(DType dtype, const char* op, F&& f) {
  if (dtype == DType::F32) {
    f(float{});
  } else if (dtype == DType::F64) {
    f(double{});
  } else if (dtype == DType::BF16) {
    f(bf16{});
  } else {
    throw_unsupported_dtype(dtype, op);
  }
}

// Calls f(T{}) with T = float or double according to dtype; other dtypes throw.
template <class F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  if (dtype == DType::F32) {
    f(float{});
  } else if (dtype == DType::F64) {
    f(double{});
  } else {
    throw_unsupported_dtype(dtype, op);
  }
}

}  // namespace fp8train::ops::cpu
