// cuDNN's fused flash attention for the BF16 attention core, through cuDNN's backend graph API (no frontend
// library: the graph is built here from backend descriptors). cuDNN recognises the causal-softmax-attention
// pattern of primitive operations below and runs its fused SDPA engine on it:
//   forward:  S = scale·Q·Kᵀ, causal mask (row ≥ col, else −inf), Stats = max + log Σ exp(S − max),
//             O = softmax(S)·V  — Stats is our lse ([batch, heads, seq] F32, natural log), so the backward of
//             either implementation can follow the forward of the other.
//   backward: P = exp(scale·Q·Kᵀ − lse) under the mask, D = rowsum(dO∘O), dV = Pᵀ·dO, dS = P∘(dO·Vᵀ − D)·scale,
//             dK = dSᵀ·Q, dQ = dS·K. With an F32 dQ accumulator in the workspace cuDNN's engine adds into dQ
//             with atomics (nondeterministic); without one it takes its deterministic path (the form the cuDNN
//             frontend builds for "deterministic" on Hopper).
// A plan is built once per shape, layout and scale (runtime-compiled engines: the first call of a shape costs
// compile time) and cached. When cuDNN has no engine for a form the caller falls back to the own kernels.
#include "ops/cuda/attention_cudnn.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"

#if FP8TRAIN_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace fp8train::ops::cuda::detail {

#if FP8TRAIN_HAVE_CUDNN
namespace {

// A cuDNN call that failed while building a graph: the message carries cuDNN's own explanation.
struct CudnnFailure {
  std::string what;
};

void ok(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  throw CudnnFailure{std::string(what) + ": " + cudnnGetErrorString(s) +
                     (last[0] ? std::string(" (") + last + ")" : "")};
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { ok(cudnnBackendCreateDescriptor(type, &d_), "create descriptor"); }
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    ok(cudnnBackendSetAttribute(d_, name, type, count, values), "set attribute");
    return *this;
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  Desc& set_i64(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
  Desc& set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t v) {
    return set(name, CUDNN_TYPE_DATA_TYPE, 1, &v);
  }
  void finalize(const char* what) { ok(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::vector<int64_t>;

// UIDs of the tensors the caller supplies through the variant pack.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kOne,
  kSoftmaxSum,
  kDQAccum,
  kFirstVirtual = 100
};

class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}

  const Desc& tensor(int64_t uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides, bool is_virtual,
                     bool by_value = false) {
    auto t = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const bool v = is_virtual, bv = by_value;
    t->set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, dt)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data())
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    if (by_value) t->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv);
    t->finalize("tensor descriptor");
    return keep(std::move(t));
  }
  // A virtual (in-kernel) tensor with contiguous strides.
  const Desc& virt(cudnnDataType_t dt, const Dims& dims) {
    return tensor(next_uid_++, dt, dims, contiguous(dims), true);
  }
  const Desc& virt_strided(cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
    return tensor(next_uid_++, dt, dims, strides, true);
  }
  const Desc& scalar(int64_t uid) { return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, const Desc& x, const Desc* b, const Desc* t,
                 const Desc& y, int64_t axis = -1) {
    auto pw = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
    if (axis >= 0) pw->set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw->finalize("pointwise descriptor");
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t != nullptr) op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    op->finalize("pointwise operation");
    keep(std::move(pw));
    ops_.push_back(&keep(std::move(op)));
  }
  void reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
    auto r = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    r->finalize("reduction descriptor");
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    op->finalize("reduction operation");
    keep(std::move(r));
    ops_.push_back(&keep(std::move(op)));
  }
  void matmul(const Desc& a, const Desc& b, const Desc& c) {
    auto m = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m->set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    m->finalize("matmul descriptor");
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *m)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    op->finalize("matmul operation");
    keep(std::move(m));
    ops_.push_back(&keep(std::move(op)));
  }
  void reshape(const Desc& x, const Desc& y) {
    auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x).set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op->finalize("reshape operation");
    ops_.push_back(&keep(std::move(op)));
  }
  // The causal mask on scores x [b, h, s, s]: entries with row < col become −inf.
  const Desc& causal_mask(const Desc& x, const Dims& sdims, const Desc& neg_inf) {
    const Desc& row = virt(CUDNN_DATA_INT32, sdims);
    const Desc& col = virt(CUDNN_DATA_INT32, sdims);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, nullptr, nullptr, row, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, nullptr, nullptr, col, 3);
    const Desc& keep_mask = virt(CUDNN_DATA_BOOLEAN, sdims);
    pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, &col, nullptr, keep_mask);
    const Desc& y = virt(CUDNN_DATA_FLOAT, sdims);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, &neg_inf, &keep_mask, y);
    return y;
  }

  // Finalizes the operation graph and the first execution plan the heuristics offer that builds.
  void build(Desc& graph_out, std::unique_ptr<Desc>& plan_out, int64_t& workspace) {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc* d : ops_) raw.push_back(d->get());
    graph_out.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
        .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
             raw.data());
    graph_out.finalize("operation graph");
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph_out)
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      try {
        heur.finalize("engine heuristics");
      } catch (const CudnnFailure& f) {
        tried += f.what + "; ";
        continue;
      }
      int64_t count = 0;
      ok(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                  nullptr),
         "engine count");
      std::vector<std::unique_ptr<Desc>> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw_cfgs;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw_cfgs.push_back(cfgs.back()->get());
      }
      int64_t got = 0;
      if (count > 0)
        ok(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                    &got, raw_cfgs.data()),
           "engine configs");
      for (int64_t i = 0; i < got; ++i) {
        auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        try {
          plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_)
              .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfgs[i]);
          plan->finalize("execution plan");
        } catch (const CudnnFailure& f) {
          tried += f.what + "; ";
          continue;
        }
        int64_t ws = 0;
        ok(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr,
                                    &ws),
           "workspace size");
        workspace = ws;
        plan_out = std::move(plan);
        return;
      }
      if (got == 0) tried += "no engine config; ";
    }
    throw CudnnFailure{"no execution plan builds: " + tried};
  }

 private:
  static Dims contiguous(const Dims& dims) {
    Dims s(dims.size(), 1);
    for (size_t i = dims.size() - 1; i > 0; --i) s[i - 1] = s[i] * dims[i];
    return s;
  }
  const Desc& keep(std::unique_ptr<Desc> d) {
    owned_.push_back(std::move(d));
    return *owned_.back();
  }
  cudnnHandle_t handle_;
  int64_t next_uid_ = kFirstVirtual;
  std::vector<std::unique_ptr<Desc>> owned_;
  std::vector<const Desc*> ops_;

  friend struct Plan;
};

// A built graph and plan, with what execution needs beyond the caller's pointers.
struct Plan {
  std::unique_ptr<GraphBuilder> builder;  // owns the tensor and operation descriptors
  std::unique_ptr<Desc> graph;
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;  // the engine's own workspace bytes
  int64_t softmax_sum_bytes = 0, dq_accum_bytes = 0;
  std::string failure;  // non-empty: cuDNN cannot run this form
};

cudnnHandle_t handle_for_thread() {
  thread_local cudnnHandle_t handle = [] {
    cudnnHandle_t h = nullptr;
    ok(cudnnCreate(&h), "cudnnCreate");
    return h;
  }();
  return handle;
}

// dims/strides of one [batch·seq, heads, dim] tensor as cuDNN's [b, h, s, d] (transposed: [b, h, d, s]).
Dims bhsd_dims(const AttnArgs& a, int d) { return {a.batch, a.heads, a.seq, d}; }
Dims bhsd_strides(const AttnArgs& a, const AttnLayout& l) {
  return {a.seq * l.row_stride, l.head_stride, l.row_stride, 1};
}
Dims bhds_dims(const AttnArgs& a, int d) { return {a.batch, a.heads, d, a.seq}; }
Dims bhds_strides(const AttnArgs& a, const AttnLayout& l) {
  return {a.seq * l.row_stride, l.head_stride, 1, l.row_stride};
}

std::string key_of(const AttnArgs& a, int64_t lse_bs, bool backward, bool deterministic) {
  auto l = [](const AttnLayout& x) { return std::to_string(x.row_stride) + "," + std::to_string(x.head_stride) + ";"; };
  std::string k = std::string(backward ? (deterministic ? "bd" : "bn") : "f") + ":" + std::to_string(a.batch) + "x" +
                  std::to_string(a.heads) + "x" + std::to_string(a.seq) + ":" + std::to_string(a.qk_dim) + "/" +
                  std::to_string(a.v_dim) + ":" + std::to_string(lse_bs) + ":" + l(a.lq) + l(a.lk) + l(a.lv) + l(a.lo);
  if (backward) k += l(a.ldout) + l(a.ldq) + l(a.ldk) + l(a.ldv);
  return k;
}

// lse_bs: the batch stride of lse (heads·seq, or more when `a` is a slice of the heads).
std::unique_ptr<Plan> build_forward(const AttnArgs& a, int64_t lse_bs) {
  auto p = std::make_unique<Plan>();
  p->builder = std::make_unique<GraphBuilder>(handle_for_thread());
  GraphBuilder& g = *p->builder;
  const Dims sdims{a.batch, a.heads, a.seq, a.seq}, rdims{a.batch, a.heads, a.seq, 1};
  const Desc& q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.qk_dim), bhsd_strides(a, a.lq), false);
  const Desc& kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, bhds_dims(a, a.qk_dim), bhds_strides(a, a.lk), false);
  const Desc& v = g.tensor(kV, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.v_dim), bhsd_strides(a, a.lv), false);
  const Desc& o = g.tensor(kO, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.v_dim), bhsd_strides(a, a.lo), false);
  const Desc& stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rdims, {lse_bs, a.seq, 1, 1}, false);
  const Desc& scale = g.scalar(kScale);
  const Desc& neg_inf = g.scalar(kNegInf);

  const Desc& s = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.matmul(q, kt, s);
  const Desc& s_scaled = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, &scale, nullptr, s_scaled);
  const Desc& s_masked = g.causal_mask(s_scaled, sdims, neg_inf);
  const Desc& mx = g.virt(CUDNN_DATA_FLOAT, rdims);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s_masked, mx);
  const Desc& centred = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s_masked, &mx, nullptr, centred);
  const Desc& e = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centred, nullptr, nullptr, e);
  const Desc& sum = g.virt(CUDNN_DATA_FLOAT, rdims);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const Desc& log_sum = g.virt(CUDNN_DATA_FLOAT, rdims);
  g.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, nullptr, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, &log_sum, nullptr, stats);
  // The probabilities enter the second GEMM in the storage dtype (what cuDNN's fused engine expects).
  const Desc& prob = g.virt(CUDNN_DATA_BFLOAT16, sdims);
  g.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, &sum, nullptr, prob);
  g.matmul(prob, v, o);

  p->graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.build(*p->graph, p->plan, p->workspace);
  return p;
}

std::unique_ptr<Plan> build_backward(const AttnArgs& a, int64_t lse_bs, bool deterministic) {
  auto p = std::make_unique<Plan>();
  p->builder = std::make_unique<GraphBuilder>(handle_for_thread());
  GraphBuilder& g = *p->builder;
  const int64_t b = a.batch, h = a.heads, s = a.seq;
  const Dims sdims{b, h, s, s}, rdims{b, h, s, 1}, st_strides{h * s * s, s * s, 1, s};
  const Desc& q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.qk_dim), bhsd_strides(a, a.lq), false);
  const Desc& kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, bhds_dims(a, a.qk_dim), bhds_strides(a, a.lk), false);
  const Desc& vt = g.tensor(kV, CUDNN_DATA_BFLOAT16, bhds_dims(a, a.v_dim), bhds_strides(a, a.lv), false);
  const Desc& o = g.tensor(kO, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.v_dim), bhsd_strides(a, a.lo), false);
  const Desc& dout = g.tensor(kDO, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.v_dim), bhsd_strides(a, a.ldout), false);
  const Desc& stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rdims, {lse_bs, s, 1, 1}, false);
  const Desc& dq = g.tensor(kDQ, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.qk_dim), bhsd_strides(a, a.ldq), false);
  const Desc& dk = g.tensor(kDK, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.qk_dim), bhsd_strides(a, a.ldk), false);
  const Desc& dv = g.tensor(kDV, CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.v_dim), bhsd_strides(a, a.ldv), false);
  const Desc& scale = g.scalar(kScale);
  const Desc& neg_inf = g.scalar(kNegInf);
  const Desc& one = g.scalar(kOne);

  // D = rowsum(dO∘O), kept in the workspace (F32 [b, h, s, 1]).
  const Desc& d_o_o = g.virt(CUDNN_DATA_FLOAT, bhsd_dims(a, a.v_dim));
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, &o, nullptr, d_o_o);
  const Desc& rowsum = g.virt(CUDNN_DATA_FLOAT, rdims);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, rowsum);
  const Desc& softmax_sum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rdims, {h * s, s, 1, 1}, false);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rowsum, &one, nullptr, softmax_sum);
  p->softmax_sum_bytes = b * h * s * 4;

  // P = exp(scale·Q·Kᵀ − lse) under the mask.
  const Desc& sc = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.matmul(q, kt, sc);
  const Desc& sc_scaled = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, sc, &scale, nullptr, sc_scaled);
  const Desc& centred = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, sc_scaled, &stats, nullptr, centred);
  const Desc& masked = g.causal_mask(centred, sdims, neg_inf);
  const Desc& prob = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, masked, nullptr, nullptr, prob);
  // dV = Pᵀ·dO
  const Desc& prob_t = g.virt_strided(CUDNN_DATA_BFLOAT16, sdims, st_strides);
  g.reshape(prob, prob_t);
  g.matmul(prob_t, dout, dv);
  // dS = P∘(dO·Vᵀ − D)·scale
  const Desc& dp = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.matmul(dout, vt, dp);
  const Desc& dp_centred = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, &softmax_sum, nullptr, dp_centred);
  const Desc& ds_unscaled = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp_centred, &prob, nullptr, ds_unscaled);
  const Desc& ds = g.virt(CUDNN_DATA_FLOAT, sdims);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds_unscaled, &scale, nullptr, ds);
  // dK = dSᵀ·Q
  const Desc& ds_t = g.virt_strided(CUDNN_DATA_BFLOAT16, sdims, st_strides);
  g.reshape(ds, ds_t);
  g.matmul(ds_t, q, dk);
  // dQ = dS·K
  const Desc& k = g.virt_strided(CUDNN_DATA_BFLOAT16, bhsd_dims(a, a.qk_dim), bhsd_strides(a, a.lk));
  g.reshape(kt, k);
  if (deterministic) {
    g.matmul(ds, k, dq);
  } else {
    const Dims qd = bhsd_dims(a, a.qk_dim);
    const Desc& acc = g.tensor(kDQAccum, CUDNN_DATA_FLOAT, qd, {h * s * a.qk_dim, s * a.qk_dim, a.qk_dim, 1}, false);
    g.matmul(ds, k, acc);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, nullptr, nullptr, dq);
    p->dq_accum_bytes = b * h * s * a.qk_dim * 4;
  }

  p->graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.build(*p->graph, p->plan, p->workspace);
  return p;
}

int64_t round_up(int64_t x) { return (x + 255) / 256 * 256; }

// The cached plan of a form (built on first use; a form cuDNN cannot run is remembered as such).
Plan& plan_for(const AttnArgs& a, int64_t lse_bs, bool backward, bool deterministic) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Plan>> cache;
  const std::string key = key_of(a, lse_bs, backward, deterministic);
  std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  std::unique_ptr<Plan> p;
  try {
    p = backward ? build_backward(a, lse_bs, deterministic) : build_forward(a, lse_bs);
    if (std::getenv("FP8TRAIN_CUDNN_VERBOSE") != nullptr)
      std::fprintf(stderr, "fp8train: cuDNN attention plan for %s: %lld workspace bytes\n", key.c_str(),
                   static_cast<long long>(p->workspace));
  } catch (const CudnnFailure& f) {
    p = std::make_unique<Plan>();
    p->failure = f.what;
    if (std::getenv("FP8TRAIN_CUDNN_VERBOSE") != nullptr)
      std::fprintf(stderr, "fp8train: cuDNN attention unavailable for %s: %s\n", key.c_str(), f.what.c_str());
  }
  return *cache.emplace(key, std::move(p)).first->second;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
bool layout_ok(const AttnLayout& l) { return l.row_stride % 8 == 0 && l.head_stride % 8 == 0; }

// Bytes the deterministic backward's dP workspace may take per call (see cudnn_attention_try): 512 MiB, or
// FP8TRAIN_ATTENTION_DP_WORKSPACE_MIB (0: one head per call, which the tests use to reach the slicing).
int64_t deterministic_workspace_cap() {
  static const int64_t cap = [] {
    const char* e = std::getenv("FP8TRAIN_ATTENTION_DP_WORKSPACE_MIB");
    return (e == nullptr ? int64_t{512} : std::max<int64_t>(0, std::atoll(e))) << 20;
  }();
  return cap;
}

// One cuDNN call over all of a's heads (a may be a slice of a larger problem: lse_bs is lse's batch stride).
std::string run_one(const AttnArgs& a, int64_t lse_bs, bool backward, bool deterministic, cudaStream_t stream,
                    const std::function<void*(int64_t)>& workspace) {
  try {
    Plan& p = plan_for(a, lse_bs, backward, deterministic);
    if (!p.failure.empty()) return p.failure;
    const int64_t engine_bytes = round_up(p.workspace);
    const int64_t total = engine_bytes + round_up(p.softmax_sum_bytes) + round_up(p.dq_accum_bytes);
    char* ws = static_cast<char*>(total > 0 ? workspace(total) : nullptr);
    const float scale = a.scale, neg_inf = -INFINITY, one = 1.0f;
    std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale, kNegInf};
    std::vector<void*> ptrs{const_cast<void*>(a.q),     const_cast<void*>(a.k),      const_cast<void*>(a.v), a.o, a.lse,
                            const_cast<float*>(&scale), const_cast<float*>(&neg_inf)};
    if (backward) {
      uids.insert(uids.end(), {kDO, kDQ, kDK, kDV, kOne, kSoftmaxSum});
      ptrs.insert(ptrs.end(),
                  {const_cast<void*>(a.dout), a.dq, a.dk, a.dv, const_cast<float*>(&one), ws + engine_bytes});
      if (p.dq_accum_bytes > 0) {
        uids.push_back(kDQAccum);
        ptrs.push_back(ws + engine_bytes + round_up(p.softmax_sum_bytes));
      }
    }
    cudnnHandle_t handle = handle_for_thread();
    ok(cudnnSetStream(handle, stream), "cudnnSetStream");
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    void* engine_ws = p.workspace > 0 ? ws : nullptr;
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &engine_ws);
    pack.finalize("variant pack");
    ok(cudnnBackendExecute(handle, p.plan->get(), pack.get()), "execute");
  } catch (const CudnnFailure& f) {
    // A failure at execution (not at planning) is a real error: the caller throws it.
    throw Error(std::string("cuDNN attention: ") + f.what);
  }
  return {};
}

}  // namespace

bool cudnn_attention_available() { return true; }

std::string cudnn_attention_try(const AttnArgs& a, bool backward, bool deterministic, cudaStream_t stream,
                                const std::function<void*(int64_t)>& workspace) {
  if (!a.bf16) return "cuDNN attention serves BF16 only";
  if (a.qk_dim % 8 != 0 || a.v_dim % 8 != 0) return "head dims must be multiples of 8";
  for (const void* ptr : {a.q, a.k, a.v, static_cast<const void*>(a.o)})
    if (!aligned16(ptr)) return "tensors must be 16-byte aligned";
  for (const AttnLayout* l : {&a.lq, &a.lk, &a.lv, &a.lo})
    if (!layout_ok(*l)) return "strides must be multiples of 8 elements";
  if (backward) {
    for (const void* ptr :
         {a.dout, static_cast<const void*>(a.dq), static_cast<const void*>(a.dk), static_cast<const void*>(a.dv)})
      if (!aligned16(ptr)) return "tensors must be 16-byte aligned";
    for (const AttnLayout* l : {&a.ldout, &a.ldq, &a.ldk, &a.ldv})
      if (!layout_ok(*l)) return "strides must be multiples of 8 elements";
  }
  // The deterministic backward's engine keeps dP for all of a call's heads in its workspace (2 bytes per score):
  // 4 GiB for 128 heads of 4096 tokens. Calls over slices of the heads bound it.
  int64_t heads_per_call = a.heads;
  if (backward && deterministic) {
    const int64_t per_head = int64_t{a.batch} * a.seq * a.seq * 2;
    heads_per_call = std::clamp<int64_t>(deterministic_workspace_cap() / std::max<int64_t>(per_head, 1), 1, a.heads);
  }
  const int64_t lse_bs = int64_t{a.heads} * a.seq;
  for (int64_t h0 = 0; h0 < a.heads; h0 += heads_per_call) {
    AttnArgs slice = a;
    slice.heads = static_cast<int>(std::min<int64_t>(heads_per_call, a.heads - h0));
    auto shift = [&](const void* ptr, const AttnLayout& l) {
      return ptr == nullptr ? nullptr : static_cast<const char*>(ptr) + h0 * l.head_stride * 2;
    };
    slice.q = shift(a.q, a.lq);
    slice.k = shift(a.k, a.lk);
    slice.v = shift(a.v, a.lv);
    slice.o = const_cast<char*>(shift(a.o, a.lo));
    slice.lse = a.lse + h0 * a.seq;
    if (backward) {
      slice.dout = shift(a.dout, a.ldout);
      slice.dq = const_cast<char*>(shift(a.dq, a.ldq));
      slice.dk = const_cast<char*>(shift(a.dk, a.ldk));
      slice.dv = const_cast<char*>(shift(a.dv, a.ldv));
    }
    const std::string why_not = run_one(slice, lse_bs, backward, deterministic, stream, workspace);
    if (!why_not.empty()) {
      FP8T_CHECK(h0 == 0, "cuDNN attention: a slice of the heads has no engine although the first had: {}", why_not);
      return why_not;
    }
  }
  return {};
}

#else  // no cuDNN in this build

bool cudnn_attention_available() { return false; }
std::string cudnn_attention_try(const AttnArgs&, bool, bool, cudaStream_t, const std::function<void*(int64_t)>&) {
  return "this build has no cuDNN";
}

#endif

}  // namespace fp8train::ops::cuda::detail
