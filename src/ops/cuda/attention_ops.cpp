// CUDA launchers of the attention core (ops/op_table.h, ops/attention.h). BF16 goes to cuDNN's fused flash
// attention (attention_cudnn.cpp) when cuDNN has an engine for the form, else to the own tensor-core kernels
// (attention_mma.cu: qk_dim, v_dim multiples of 8 up to 256, 16-byte aligned rows), else to the SIMT kernels
// (attention_simt.cu), which also serve F32. F64 and head dims above 256 are refused.
// FP8TRAIN_ATTENTION picks the path: auto (default, as above), cudnn (every BF16 form on cuDNN, or an error saying
// why not), own (the own kernels only), simt (SIMT only; to tell the paths apart when a result looks wrong).
// Determinism of the backward: the own kernels are deterministic (delta = rowsum(dO∘O) in F32 scratch, then
// dK / dV per key block and dQ per query block, no atomics); cuDNN's backward is deterministic unless
// FP8TRAIN_ATTENTION_BACKWARD=fast selects its engine that accumulates dQ with atomics (the deterministic one
// keeps dP in its workspace, so it runs over slices of the heads of at most 512 MiB of dP each).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "ops/attention.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/attention_cached.h"
#include "ops/cuda/attention_cached_launch.h"
#include "ops/cuda/attention_launch.h"
#include "ops/cuda/kernels.h"

namespace fp8train::ops::cuda {
namespace {

detail::AttnLayout layout_of(const HeadsLayout& l) { return {l.row_stride, l.head_stride}; }

detail::AttnArgs args_of(const char* op, const AttentionProblem& p) {
  if (p.dtype == DType::F64) throw_not_implemented(op, "f64");
  if (p.qk_dim > detail::kAttnMaxDim || p.v_dim > detail::kAttnMaxDim)
    throw_not_implemented(op, "head dims above " + std::to_string(detail::kAttnMaxDim) + " (qk_dim " +
                                  std::to_string(p.qk_dim) + ", v_dim " + std::to_string(p.v_dim) + ")");
  FP8T_CHECK(p.batch * p.seq < (int64_t{1} << 31) && p.batch * p.heads < (int64_t{1} << 31),
             "{}: {} sequences of {} rows and {} heads are too many for the CUDA kernels", op, p.batch, p.seq, p.heads);
  detail::AttnArgs a;
  a.bf16 = p.dtype == DType::BF16;
  a.batch = static_cast<int>(p.batch);
  a.seq = static_cast<int>(p.seq);
  a.heads = static_cast<int>(p.heads);
  a.qk_dim = static_cast<int>(p.qk_dim);
  a.v_dim = static_cast<int>(p.v_dim);
  a.scale = static_cast<float>(p.scale);
  a.lq = layout_of(p.q);
  a.lk = layout_of(p.k);
  a.lv = layout_of(p.v);
  a.lo = layout_of(p.o);
  a.ldout = layout_of(p.dout);
  a.ldq = layout_of(p.dq);
  a.ldk = layout_of(p.dk);
  a.ldv = layout_of(p.dv);
  return a;
}

enum class Path { Auto, Cudnn, Own, Simt };

// FP8TRAIN_ATTENTION (read once).
Path path_setting() {
  static const Path path = [] {
    const char* e = std::getenv("FP8TRAIN_ATTENTION");
    const std::string v = e == nullptr ? "auto" : e;
    if (v == "auto" || v.empty()) return Path::Auto;
    if (v == "cudnn") return Path::Cudnn;
    if (v == "own") return Path::Own;
    if (v == "simt") return Path::Simt;
    throw Error("FP8TRAIN_ATTENTION='" + v + "' is not one of auto, cudnn, own, simt");
  }();
  return path;
}

// FP8TRAIN_ATTENTION_BACKWARD=fast: cuDNN's nondeterministic backward (read once).
bool deterministic_backward() {
  static const bool det = [] {
    const char* e = std::getenv("FP8TRAIN_ATTENTION_BACKWARD");
    const std::string v = e == nullptr ? "deterministic" : e;
    if (v == "deterministic" || v.empty()) return true;
    if (v == "fast") return false;
    throw Error("FP8TRAIN_ATTENTION_BACKWARD='" + v + "' is not one of deterministic, fast");
  }();
  return det;
}

bool use_mma(const detail::AttnArgs& a, bool backward) {
  return path_setting() != Path::Simt && a.bf16 && detail::attention_mma_supported(a, backward);
}

// Runs the form with cuDNN when the setting allows and cuDNN can; returns whether it did.
bool try_cudnn(const char* op, const ExecCtx& ctx, const detail::AttnArgs& a, bool backward) {
  const Path path = path_setting();
  if (path == Path::Own || path == Path::Simt || !a.bf16) return false;  // F32 goes to SIMT under any setting
  Tensor ws;  // kept alive until the work is enqueued: the caching allocator is stream-ordered on ctx's stream
  const std::string why_not = detail::cudnn_attention_try(a, backward, deterministic_backward(),
                                                          static_cast<cudaStream_t>(ctx.stream), [&](int64_t bytes) {
                                                            ws = ctx.scratch({bytes}, DType::U8);
                                                            return ws.data<uint8_t>();
                                                          });
  FP8T_CHECK(why_not.empty() || path != Path::Cudnn, "{}: FP8TRAIN_ATTENTION=cudnn, but cuDNN cannot run it: {}", op,
             why_not);
  return why_not.empty();
}

void check(const char* op, cudaError_t e) {
  FP8T_CHECK(e == cudaSuccess, "{}: CUDA kernel launch failed: {} ({})", op, cudaGetErrorName(e),
             cudaGetErrorString(e));
}

void attention_forward(const ExecCtx& ctx, const AttentionProblem& p, const void* q, const void* k, const void* v,
                       void* o, void* lse) {
  const char* op = "attention_forward";
  detail::AttnArgs a = args_of(op, p);
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = static_cast<float*>(lse);
  if (try_cudnn(op, ctx, a, false)) return;
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (use_mma(a, false))
    check(op, detail::launch_attention_forward_mma(a, stream));
  else
    check(op, detail::launch_attention_forward_simt(a, stream));
}

void attention_backward(const ExecCtx& ctx, const AttentionProblem& p, const void* q, const void* k, const void* v,
                        const void* o, const void* lse, const void* dout, void* dq, void* dk, void* dv) {
  const char* op = "attention_backward";
  detail::AttnArgs a = args_of(op, p);
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = const_cast<void*>(o);  // read only by the backward
  a.lse = static_cast<float*>(const_cast<void*>(lse));
  a.dout = dout;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  if (try_cudnn(op, ctx, a, true)) return;
  // kept alive until the kernels are enqueued: the caching allocator is stream-ordered on ctx's stream
  const Tensor delta = ctx.scratch({std::max<int64_t>(1, p.batch * p.heads * p.seq)}, DType::F32);
  a.delta = delta.data<float>();
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (use_mma(a, true))
    check(op, detail::launch_attention_backward_mma(a, stream));
  else
    check(op, detail::launch_attention_backward_simt(a, stream));
}

void attention_cached(const ExecCtx& ctx, const AttentionCachedProblem& p, const void* q, const void* k, const void* v,
                      void* o) {
  const char* op = "attention_cached";
  if (p.dtype == DType::F64) throw_not_implemented(op, "f64");
  // the query lives in shared memory (48 KiB without opting in)
  if (p.qk_dim > 12288) throw_not_implemented(op, "key dims above 12288 (" + std::to_string(p.qk_dim) + ")");
  FP8T_CHECK(p.queries * p.heads < (int64_t{1} << 31), "{}: {} tokens of {} heads are too many for one launch", op,
             p.queries, p.heads);
  detail::AttnCachedArgs a;
  a.bf16 = p.dtype == DType::BF16;
  a.queries = p.queries;
  a.heads = p.heads;
  a.keys = p.keys;
  a.qk_dim = p.qk_dim;
  a.v_dim = p.v_dim;
  a.scale = static_cast<float>(p.scale);
  a.q_row = p.q_row;
  a.q_head = p.q_head;
  a.ld_k = p.ld_k;
  a.ld_v = p.ld_v;
  a.o_row = p.o_row;
  a.o_head = p.o_head;
  const Tensor scores = ctx.scratch({p.queries * p.heads * p.keys}, DType::F32);
  check(op,
        detail::launch_attention_cached(a, q, k, v, o, scores.data<float>(), static_cast<cudaStream_t>(ctx.stream)));
}

}  // namespace

void install_attention_ops(OpTable& t) {
  t.attention_forward = attention_forward;
  t.attention_backward = attention_backward;
  t.attention_cached = attention_cached;
}

}  // namespace fp8train::ops::cuda
