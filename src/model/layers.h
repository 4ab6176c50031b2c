// Building blocks with explicit forward and backward: Linear (through the LinearCompute hook), RMSNorm and the
// SwiGLU FFN (dense FFN and shared experts). Shapes: activations are [tokens, features] matrices, tokens =
// batch·seq flattened (row t = b·seq + s). Backward functions ACCUMULATE parameter gradients; input gradients
// are written or accumulated as the `accumulate` flag says. What a layer keeps for backward lives in a small
// State struct filled by forward (through the ActivationCache) and consumed by backward.
#pragma once
#include <string>

#include "model/hooks.h"
#include "model/parameter.h"
#include "tensor/exec_ctx.h"

namespace fp8train::model {

// Per-call settings shared by every layer of one forward/backward.
struct StepContext {
  ExecCtx exec;  // the device and stream every op of this pass runs on
  int64_t batch = 0, seq = 0;
  bool training = false;  // keep what backward needs (through `cache`)
  LinearCompute* linear = nullptr;
  ActivationCache* cache = nullptr;
  double grad_scale = 1.0;  // backward computes the gradient of grad_scale·loss
  DType dtype = DType::F32;
  int64_t tokens() const { return batch * seq; }
};

// y = x·Wᵀ, W: [out, in], no bias (DeepSeek-V3 has none). The weight is either its own parameter
// ("<name>.weight") or a view given by the owner (fused weights).
class Linear {
 public:
  Linear() = default;
  Linear(ParameterSet& params, const std::string& name, int64_t in, int64_t out, DType dtype, int layer);
  Linear(const Tensor& weight, const Tensor& grad, const std::string& site_name, int layer);

  int64_t in_features() const { return weight_.size(1); }
  int64_t out_features() const { return weight_.size(0); }
  const Tensor& weight() const { return weight_; }
  const Tensor& grad() const { return grad_; }
  const LinearSite& site() const { return site_; }

  void forward(const StepContext& ctx, const Tensor& x, const Tensor& y) const;  // y = x·Wᵀ (fprop)
  Tensor forward(const StepContext& ctx, const Tensor& x) const;
  // dW += dyᵀ·x (wgrad); dx (+)= dy·W (dgrad) when dx is defined.
  void backward(const StepContext& ctx, const Tensor& dy, const Tensor& x, const Tensor& dx, bool accumulate) const;

 private:
  Tensor weight_, grad_;
  LinearSite site_;
};

// RMSNorm(x) = x / sqrt(mean(x²) + eps) ∘ g, g: [dim] ("<name>.weight", initialized to ones).
class RMSNorm {
 public:
  struct State {
    SavedTensor x, rstd, y;
  };
  RMSNorm() = default;
  RMSNorm(ParameterSet& params, const std::string& name, int64_t dim, double eps, DType dtype);

  // y = RMSNorm(x); when training, keeps x, rstd and (unless the cache declines, or keep_output is false
  // because the caller keeps y itself) y in `state`. The second form writes into a given [rows, dim] view.
  Tensor forward(const StepContext& ctx, const Tensor& x, const std::string& site, State* state) const;
  void forward(const StepContext& ctx, const Tensor& x, const Tensor& y, const std::string& site, State* state,
               bool keep_output) const;
  // The saved output, or recomputed from the saved input when the cache did not keep it.
  Tensor output(const StepContext& ctx, const State& state) const;
  // dx (+)= ∂L/∂x from dy; dg += ∂L/∂g.
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& dx, bool accumulate) const;

 private:
  Tensor weight_, grad_;
  double eps_ = 1e-6;
};

// SwiGLU FFN: FFN(x) = W2·(silu(W1·x) ∘ (W3·x)). W1 and W3 ([F, d] each, "<name>.w1.weight", "<name>.w3.weight")
// are the two row halves of one fused [2F, d] buffer, so the up-projection is one GEMM (LinearSite "<name>.w13");
// W2: [d, F] ("<name>.w2.weight").
class SwigluFFN {
 public:
  struct State {
    SavedTensor gate_up, act;  // [tokens, 2F] = x·W13ᵀ, and silu(gate)∘up (recomputable)
  };
  SwigluFFN() = default;
  SwigluFFN(ParameterSet& params, const std::string& name, int64_t hidden, int64_t ffn_dim, DType dtype, int layer);

  int64_t ffn_dim() const { return w13_.out_features() / 2; }
  Tensor forward(const StepContext& ctx, const Tensor& x, State* state) const;
  // dx (+)= ∂L/∂x, parameter gradients accumulate; x is the forward input.
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& x, const Tensor& dx,
                bool accumulate) const;

 private:
  std::string name_;
  Linear w13_, w2_;
};

}  // namespace fp8train::model
