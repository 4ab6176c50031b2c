// CUDA launchers of axpby, fill, embedding, RMSNorm, RoPE, SwiGLU and the per-head broadcast / sum (ops/op_table.h)
// on the kernels of elementwise_kernels.cu / elementwise_norm.cu (elementwise_launch.h) and heads_kernels.cu
// (heads_launch.h). Every F32 / BF16 form the entry points accept is served; F64 forms (the gradient-check models, CPU
// only) are refused with "not implemented on cuda". Scratch (the embedding backward's sort, RMSNorm's dw chunk sums,
// RoPE's cos/sin table) comes from ctx.scratch and is released after the kernels are enqueued (the caching allocator is
// stream-ordered on the op's stream).
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "common/error.h"
#include "ops/cuda/elementwise_launch.h"
#include "ops/cuda/heads_launch.h"
#include "ops/cuda/kernels.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/heads.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/tensor.h"

namespace fp8train::ops::cuda {
namespace {

cudaStream_t stream_of(const ExecCtx& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

ew::Ty ty(DType t, const char* op) {
  if (t == DType::F32) return ew::Ty::F32;
  if (t == DType::BF16) return ew::Ty::BF16;
  throw_not_implemented(op, std::string(dtype_name(t)));
}

// A launch error is reported at once; with fp8train::cuda::sync_after_launch() (debug builds, FP8TRAIN_CUDA_SYNC=1)
// the stream is also waited for, so a fault is reported at its op.
void check(cudaError_t err, const char* op, const ExecCtx& ctx) {
  FP8T_CHECK(err == cudaSuccess, "{}: CUDA kernel launch failed: {} ({})", op, cudaGetErrorName(err),
             cudaGetErrorString(err));
  if (fp8train::cuda::sync_after_launch()) FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void axpby(const ExecCtx& ctx, const AxpbyProblem& p, const void* a, const void* b, void* out) {
  ew::AxpbyArgs args;
  args.out = ty(p.dtype, "axpby");
  args.a = ty(p.a_dtype, "axpby");
  args.b = b != nullptr ? ty(p.b_dtype, "axpby") : ew::Ty::F32;
  args.rows = p.rows;
  args.cols = p.cols;
  args.ld_a = p.ld_a;
  args.ld_b = p.ld_b;
  args.ld_out = p.ld_out;
  args.alpha = static_cast<float>(p.alpha);
  args.beta = static_cast<float>(p.beta);
  check(ew::axpby(args, a, b, out, stream_of(ctx)), "axpby", ctx);
}

void fill(const ExecCtx& ctx, const AxpbyProblem& p, double value, void* out) {
  const ew::Ty t = ty(p.dtype, "fill");
  const float v = static_cast<float>(value);  // the CPU's conversion: to the compute type, then to storage
  uint32_t bits = 0;
  if (t == ew::Ty::BF16)
    bits = bf16(v).bits;
  else
    std::memcpy(&bits, &v, sizeof(bits));
  check(ew::fill(t, p.rows, p.cols, p.ld_out, bits, out, stream_of(ctx)), "fill", ctx);
}

// Ids are not validated on the device (the CPU throws on an id outside [0, vocab)): the lookup writes such rows
// as NaN and the backward skips them.
void embedding_forward(const ExecCtx& ctx, const EmbeddingProblem& p, const int32_t* ids, const void* table,
                       void* out) {
  ew::AxpbyArgs args;
  args.out = ty(p.dtype, "embedding_forward");
  args.a = ew::Ty::F32;
  args.rows = p.tokens;
  args.cols = p.dim;
  args.ld_a = p.dim;
  args.ld_out = p.ld_out;
  args.a_rows = ids;
  args.a_row_limit = p.vocab;
  check(ew::axpby(args, table, nullptr, out, stream_of(ctx)), "embedding_forward", ctx);
}

void embedding_backward(const ExecCtx& ctx, const EmbeddingProblem& p, const int32_t* ids, const void* dout,
                        void* dtable) {
  const ew::Ty t = ty(p.dtype, "embedding_backward");
  if (p.tokens <= 0 || p.dim <= 0) return;
  FP8T_CHECK(p.tokens < (int64_t{1} << 31), "embedding_backward: {} tokens exceed the sort's int range", p.tokens);
  const size_t bytes = ew::embedding_backward_workspace(p.tokens);
  const Tensor ws = ctx.scratch({static_cast<int64_t>(bytes)}, DType::U8);
  check(ew::embedding_backward(t, p.tokens, p.vocab, p.dim, p.ld_out, ids, dout, static_cast<float*>(dtable), ws.raw(),
                               bytes, stream_of(ctx)),
        "embedding_backward", ctx);
}

ew::RmsNormArgs rmsnorm_args(const RmsNormProblem& p, const char* op) {
  ew::RmsNormArgs a;
  a.type = ty(p.dtype, op);
  a.rows = p.rows;
  a.dim = p.dim;
  a.ld_x = p.ld_x;
  a.ld_y = p.ld_y;
  a.ld_dx = p.ld_dx;
  a.ld_dy = p.ld_dy;
  a.eps = static_cast<float>(p.eps);
  a.accumulate_dx = p.accumulate_dx;
  return a;
}

void rmsnorm_forward(const ExecCtx& ctx, const RmsNormProblem& p, const void* x, const void* w, void* y, void* rstd) {
  check(ew::rmsnorm_forward(rmsnorm_args(p, "rmsnorm_forward"), x, static_cast<const float*>(w), y,
                            static_cast<float*>(rstd), stream_of(ctx)),
        "rmsnorm_forward", ctx);
}

void rmsnorm_backward(const ExecCtx& ctx, const RmsNormProblem& p, const void* x, const void* w, const void* rstd,
                      const void* dy, void* dx, void* dw) {
  const ew::RmsNormArgs a = rmsnorm_args(p, "rmsnorm_backward");
  Tensor partial;
  if (dw != nullptr && p.rows > 0 && p.dim > 0)
    partial = ctx.scratch({(p.rows + ew::kRmsNormRowsPerChunk - 1) / ew::kRmsNormRowsPerChunk, p.dim}, DType::F32);
  check(ew::rmsnorm_backward(a, x, static_cast<const float*>(w), static_cast<const float*>(rstd), dy, dx,
                             static_cast<float*>(dw), partial.defined() ? partial.data<float>() : nullptr,
                             stream_of(ctx)),
        "rmsnorm_backward", ctx);
}

// The cos/sin table of a training RoPE setting (device, seq_len, rope_dim, theta, direction), computed on first use
// and kept: a step applies the same few settings to every layer, and the table costs double-precision pow/sin/cos
// per entry. Decoding (a position offset: a new one per call) computes its small table into `scratch` instead.
const float* rope_table(const ExecCtx& ctx, const ew::RopeArgs& a, Tensor& scratch) {
  if (a.pos_offset != 0) {
    scratch = ctx.scratch({a.seq_len * (a.rope_dim / 2) * 2}, DType::F32);
    check(ew::rope_table(a, scratch.data<float>(), stream_of(ctx)), "rope", ctx);
    return scratch.data<float>();
  }
  static std::mutex mutex;
  static auto* tables = new std::map<std::string, Tensor>();  // leaked: device memory outlives static destructors
  const std::string key = fmt::format("{}:{}:{}:{}:{}", ctx.device.index, a.seq_len, a.rope_dim, a.theta, a.inverse);
  std::lock_guard lock(mutex);
  auto it = tables->find(key);
  if (it == tables->end()) {
    Tensor t = Tensor::empty({a.seq_len * (a.rope_dim / 2) * 2}, DType::F32, MemCategory::Workspace, ctx.device);
    check(ew::rope_table(a, t.data<float>(), stream_of(ctx)), "rope", ctx);
    it = tables->emplace(key, std::move(t)).first;
  }
  return it->second.data<float>();
}

void rope(const ExecCtx& ctx, const RopeProblem& p, void* x) {
  ew::RopeArgs a;
  a.type = ty(p.dtype, "rope");
  a.rows = p.rows;
  a.heads = p.heads;
  a.rope_dim = p.rope_dim;
  a.ld = p.ld;
  a.head_stride = p.head_stride;
  a.seq_len = p.seq_len;
  a.theta = p.theta;
  a.inverse = p.inverse;
  a.pos_offset = p.pos_offset;
  const int64_t half = p.rope_dim / 2;
  if (p.rows <= 0 || p.heads <= 0 || half <= 0) return;
  Tensor scratch;  // kept until the kernel is enqueued (the caching allocator is stream-ordered)
  check(ew::rope(a, x, rope_table(ctx, a, scratch), stream_of(ctx)), "rope", ctx);
}

ew::SwigluArgs swiglu_args(const SwigluProblem& p, const char* op) {
  ew::SwigluArgs a;
  a.type = ty(p.dtype, op);
  a.rows = p.rows;
  a.ffn_dim = p.ffn_dim;
  a.ld_in = p.ld_in;
  a.ld_out = p.ld_out;
  return a;
}

void swiglu_forward(const ExecCtx& ctx, const SwigluProblem& p, const void* in, void* out) {
  check(ew::swiglu_forward(swiglu_args(p, "swiglu_forward"), in, out, stream_of(ctx)), "swiglu_forward", ctx);
}

void swiglu_backward(const ExecCtx& ctx, const SwigluProblem& p, const void* in, const void* dout, void* din) {
  check(ew::swiglu_backward(swiglu_args(p, "swiglu_backward"), in, dout, din, stream_of(ctx)), "swiglu_backward", ctx);
}

ew::HeadsArgs heads_args(const HeadsProblem& p, const char* op) {
  ew::HeadsArgs a;
  a.type = ty(p.dtype, op);
  a.rows = p.rows;
  a.heads = p.heads;
  a.dim = p.dim;
  a.ld_mat = p.ld_mat;
  a.ld_heads = p.ld_heads;
  a.head_stride = p.head_stride;
  return a;
}

void repeat_heads(const ExecCtx& ctx, const HeadsProblem& p, const void* src, void* dst) {
  check(ew::repeat_heads(heads_args(p, "repeat_heads"), src, dst, stream_of(ctx)), "repeat_heads", ctx);
}

void sum_heads(const ExecCtx& ctx, const HeadsProblem& p, const void* src, void* dst) {
  check(ew::sum_heads(heads_args(p, "sum_heads"), src, dst, stream_of(ctx)), "sum_heads", ctx);
}

}  // namespace

void install_elementwise_ops(OpTable& t) {
  t.axpby = axpby;
  t.fill = fill;
  t.embedding_forward = embedding_forward;
  t.embedding_backward = embedding_backward;
  t.rmsnorm_forward = rmsnorm_forward;
  t.rmsnorm_backward = rmsnorm_backward;
  t.rope = rope;
  t.swiglu_forward = swiglu_forward;
  t.swiglu_backward = swiglu_backward;
  t.repeat_heads = repeat_heads;
  t.sum_heads = sum_heads;
}

}  // namespace fp8train::ops::cuda
