// Role-aware Linear layers, y = x·Wᵀ with no bias (DeepSeek-V3 has none), whose three GEMMs run the way the
// recipe says for their role (recipe::LinearRole, fixed at construction; recipe::linear_recipe):
//   Fprop  y  = x·Wᵀ        x: [tokens, in]   W: [out, in]   y: [tokens, out]
//   Dgrad  dx (+)= dy·W     dy: [tokens, out]                dx: [tokens, in]
//   Wgrad  dW += dyᵀ·x      dW: [out, in] (FP32 gradients always accumulate)
// A grouped Linear (groups = E > 1) is the routed experts of a MoE layer: E weights stacked [E·out, in], the
// tokens in the expert-ordered layout of ops/moe_dispatch.h (expert e at rows [offsets[e], offsets[e+1]) of an
// offsets tensor on the device), every GEMM one grouped call — no per-expert loop on the host.
//
// Weights: the FP32 master W lives in the parameter set; the GEMMs read a per-step compute copy — the master
// itself (fp32), a BF16 copy (bf16), or the quantized W (128×128 blocks, or per tensor with delayed scaling)
// with its column-wise copy Wᵀ for Dgrad (fp8 / int8) — refreshed once after the parameters change (the
// optimizer step, a checkpoint load: ParameterSet::version()), not in every GEMM.
//
// Activations: prepare(x) returns x in the recipe's form, a LinearInput — the plain tensor, or the quantized
// row-wise operand of Fprop together with, when backward will need it, the column-wise copy for Wgrad written by
// the same quantizer call from the unrounded x (the recipe's Colwise form; Retile keeps Fprop's row-wise operand
// and re-tiles it in backward; W_O's input may be stored in E5M6). Several Linears that read the same x (MLA's
// W_DQ and W_DKV) share one prepared input. kept(prepared) is what backward needs of it (Fprop's row-wise
// operand is dropped when Wgrad reads the column-wise copy), booked under MemCategory::ActivationCache. A layer
// that recomputes x in backward passes recomputed(x) instead.
//
// Backward: dy is quantized once into its row-wise (Dgrad) and column-wise (Wgrad) operands; then Dgrad and
// Wgrad. With StepContext::wgrad_queue set (a pipeline's B step whose W comes later: DualPipeV), the Wgrad GEMM is
// queued with its operands instead of run; running the queue later adds the same products (in a different order
// across micro-batches). On a sampled step (StepContext::health) every GEMM also reports its operands' health and its error
// against the FP32 reference (recipe/health.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/parameter.h"
#include "ops/quantize.h"
#include "quant/qtensor.h"
#include "recipe/recipe.h"
#include "tensor/exec_ctx.h"

namespace fp8train::recipe {
class HealthRecorder;
}

namespace fp8train::model {

class ActivationStore;

// Wgrad GEMMs held back for a pipeline's W step, in the order backward met them.
using WgradQueue = std::vector<std::function<void()>>;

// Per-call settings shared by every layer of one forward/backward.
struct StepContext {
  ExecCtx exec;  // the device and stream every op of this pass runs on
  int64_t batch = 0, seq = 0;
  bool training = false;                         // keep what backward needs
  const recipe::RecipeConfig* recipe = nullptr;  // the precision recipe (never null inside a pass)
  ActivationStore* store = nullptr;              // what layers keep for backward goes through it
  recipe::HealthRecorder* health = nullptr;      // set on sampled steps: every GEMM reports its numerics
  int64_t step = 0;                              // the optimizer step (seeds stochastic rounding)
  double grad_scale = 1.0;                       // backward computes the gradient of grad_scale·loss
  DType dtype = DType::F32;                      // the compute dtype of activations and their gradients
  WgradQueue* wgrad_queue = nullptr;             // set: Linear::backward queues its Wgrad GEMM here
  int64_t tokens() const { return batch * seq; }
};

// x as a Linear reads it (see the top of this file):
//   x       the plain tensor (prepare() sets it; kept() keeps it only for a plain recipe, or on a sampled step,
//           whose health records measure against it)
//   q       x quantized: the row-wise operand of Fprop (kept for Retile) and, from prepare(keep), the column-wise
//           copy for Wgrad
//   qt      xᵀ quantized — Wgrad's operand, what kept() makes of q's column-wise copy
//   stored  x in a storage format of its own (W_O's input in E5M6), for backward only
struct LinearInput {
  Tensor x;
  quant::QTensor q;
  quant::QTensor qt;
  quant::QTensor stored;
  bool defined() const { return x.defined() || q.defined() || qt.defined() || stored.defined(); }
};

class Linear {
 public:
  Linear();
  // A Linear with its own parameter "<name>.weight" [out, in].
  Linear(ParameterSet& params, const std::string& name, int64_t in, int64_t out, recipe::LinearRole role, DType dtype,
         int layer);
  // A Linear over a weight owned by its layer (fused or stacked weights): weight [groups·out, in] and its
  // gradient, contiguous; `site` names it in health records ("layers.3.moe.experts.w13").
  Linear(const ParameterSet& params, const Tensor& weight, const Tensor& grad, const std::string& site,
         recipe::LinearRole role, int layer, int64_t groups = 1);
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();

  int64_t in_features() const { return weight_.size(1); }
  int64_t out_features() const { return weight_.size(0) / groups_; }
  int64_t groups() const { return groups_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& grad() const { return grad_; }
  const std::string& site() const { return site_; }
  recipe::LinearRole role() const { return role_; }

  // x [tokens, in] in the recipe's form; with keep, also what Wgrad will need.
  LinearInput prepare(const StepContext& ctx, const Tensor& x, bool keep) const;
  // The routed experts' input as dispatched: the expert-ordered FP8 tensor (power-of-two 1×128 tiles; the
  // recipe's dispatched input), plus, with keep, its column-wise copy for Wgrad. `plain` is the same tokens
  // unquantized (sampled steps measure against it; may be undefined otherwise).
  LinearInput dispatched(const StepContext& ctx, const quant::QTensor& xq, const Tensor& plain, bool keep) const;
  // y = x·Wᵀ (Fprop). y: [tokens, out] in the compute dtype. offsets: the expert offsets (grouped only).
  void forward(const StepContext& ctx, const LinearInput& x, const Tensor& y, const Tensor& offsets = {}) const;
  // A new [tokens, out] output in the compute dtype (for forward(ctx, x, y)).
  Tensor new_output(const StepContext& ctx, int64_t tokens) const;
  // Convenience: prepare, Fprop into a new y; *kept (when given and training) receives kept(prepared).
  Tensor forward(const StepContext& ctx, const Tensor& x, LinearInput* kept = nullptr,
                 const Tensor& offsets = {}) const;
  // What backward needs of a prepared input, booked under MemCategory::ActivationCache.
  LinearInput kept(const StepContext& ctx, const LinearInput& prepared) const;
  // Wgrad's form of an x recomputed in backward (only the payloads backward reads are quantized).
  LinearInput recomputed(const StepContext& ctx, const Tensor& x) const;
  // How this Linear quantizes a tensor, for producers that write it quantized themselves (fused kernels).
  struct QuantForm {
    quant::QuantSpec spec;
    ops::QuantizeOutputs outputs = ops::QuantizeOutputs::Both;
    quant::ScaleLayout layout = quant::ScaleLayout::RowMajor;
  };
  // The form prepare(x, keep = false) quantizes x in, when a producer may hand over x already quantized
  // (prepared(xq) below); nullopt where the recipe needs the plain x (plain recipes, delayed scaling, a dispatched
  // input, a sampled step).
  std::optional<QuantForm> input_form(const StepContext& ctx) const;
  // prepare(x, false) for an x its producer quantized in input_form(ctx): the same Fprop operand.
  LinearInput prepared(const StepContext& ctx, const quant::QTensor& xq) const;
  // The form recomputed(x) quantizes x in, when a producer may hand over x already quantized (recomputed(xq)
  // below); nullopt where the recipe needs the plain x (plain recipes, a stored input, re-tiling, a sampled step).
  std::optional<QuantForm> recompute_form(const StepContext& ctx) const;
  // recomputed(x) for an x its producer quantized in recompute_form(ctx): the same operands.
  LinearInput recomputed(const StepContext& ctx, const quant::QTensor& xq) const;
  // dW += dyᵀ·x (Wgrad) and, when dx is defined, dx (+)= dy·W (Dgrad), with dy quantized once for both.
  void backward(const StepContext& ctx, const Tensor& dy, const LinearInput& x, const Tensor& dx, bool accumulate,
                const Tensor& offsets = {}) const;
  // The form backward(dy) quantizes dy in when one quantization serves Dgrad and Wgrad; nullopt otherwise (plain,
  // per-tensor or dispatched dy, Dgrad and Wgrad specs that differ, stochastic rounding, a sampled step).
  std::optional<QuantForm> dy_form(const StepContext& ctx) const;
  // backward(dy) for a dy its producer quantized in dy_form(ctx) (both payloads): the same GEMMs.
  void backward(const StepContext& ctx, const quant::QTensor& dyq, const LinearInput& x, const Tensor& dx,
                bool accumulate, const Tensor& offsets = {}) const;

  // Bytes of the compute copy of the weight as of the last refresh (FP8 W + Wᵀ codes and scales, BF16, or the
  // FP32 master itself).
  int64_t compute_weight_bytes() const;

  // fp8-tensorwise's delayed-scaling amax histories, the one piece of recipe state a resume needs besides the
  // parameters: named tensors "<site>.amax_history.{x,w,dy}.{entries,meta}" (F32 [length], I32 [3]), created
  // empty if the Linear has not run yet; nothing for other recipes. They are the live state: a checkpoint load
  // copies into them. The compute copy of the weight is left for the next forward to refresh.
  void delayed_scaling_state(const StepContext& ctx, std::vector<std::pair<std::string, Tensor>>& out) const;

 private:
  struct State;  // compute copy, delayed-scaling histories, stochastic-rounding counters (mutable per step)
  State& created_state(const StepContext& ctx) const;  // built for ctx's recipe if it is not yet
  State& state(const StepContext& ctx) const;          // created_state, the compute copy refreshed if stale
  void check_offsets(const Tensor& offsets) const;
  LinearInput quantize_input(const StepContext& ctx, const Tensor& x, bool keep, bool delayed,
                             bool wgrad_only = false) const;
  // backward's GEMMs from dy's quantized operands (dy itself only for a sampled step's health records).
  void backward_quantized(const StepContext& ctx, const Tensor& dy, const quant::QTensor& dyq,
                          const quant::QTensor& dyt, const LinearInput& x, const Tensor& dx, bool accumulate,
                          const Tensor& offsets) const;
  // The Wgrad GEMM dW += dyᵀ·x (plain recipes) or dyᵀ·xᵀ's quantized operands: run by backward, or later from
  // StepContext::wgrad_queue.
  void plain_wgrad(const ExecCtx& exec, const Tensor& dy, const Tensor& x, const Tensor& offsets) const;
  void scaled_wgrad(const ExecCtx& exec, const quant::QTensor& dyt, const quant::QTensor& xt, const Tensor& offsets,
                    const quant::GemmConfig& gemm) const;
  // Sampled steps: the GEMMs again, against their FP32 references (recipe/health.h).
  void observe_fprop(const StepContext& ctx, const LinearInput& x, const Tensor& y, const Tensor& offsets) const;
  void observe_backward(const StepContext& ctx, const Tensor& dy, const quant::QTensor* dyq, const quant::QTensor* dyt,
                        const LinearInput& x, const quant::QTensor* xt, const Tensor& offsets) const;

  const ParameterSet* params_ = nullptr;
  Tensor weight_, grad_;
  std::string site_;
  recipe::LinearRole role_ = recipe::LinearRole::DenseUp;
  int layer_ = -1;
  int64_t groups_ = 1;
  std::unique_ptr<State> state_;
};

}  // namespace fp8train::model
