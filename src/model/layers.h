// Building blocks with explicit forward and backward: RMSNorm and the SwiGLU FFN (dense FFN and shared experts);
// the Linear layers and the step context are in model/linear.h. Shapes: activations are [tokens, features]
// matrices in the compute dtype, tokens = batch·seq flattened (row t = b·seq + s). Backward functions ACCUMULATE
// parameter gradients (FP32); input gradients are written or accumulated as the `accumulate` flag says. What a
// layer keeps for backward lives in a small State struct filled by forward and consumed by backward.
//
// Keeping a layer's input: a layer whose input is an RMSNorm output is told by its caller whether that output
// is kept (`keep_input`, the recipe's recompute_norm). If it is, its Linears keep their inputs in the recipe's
// form during forward; if not, the caller recomputes the norm output in backward and passes it in.
#pragma once
#include <functional>
#include <string>

#include "model/activation_store.h"
#include "model/linear.h"
#include "model/parameter.h"

namespace fp8train::model {

// RMSNorm(x) = x / sqrt(mean(x²) + eps) ∘ g, g: [dim] ("<name>.weight", FP32, initialized to ones); the
// statistics (rstd) in FP32, y in x's dtype.
class RMSNorm {
 public:
  struct State {
    SavedTensor x, rstd, y;
  };
  RMSNorm() = default;
  RMSNorm(ParameterSet& params, const std::string& name, int64_t dim, double eps, DType dtype);

  // y = RMSNorm(x); when training, keeps x, rstd and — when keep_output and the store keeps norm outputs — y.
  Tensor forward(const StepContext& ctx, const Tensor& x, State* state, bool keep_output = false) const;
  void forward(const StepContext& ctx, const Tensor& x, const Tensor& y, State* state, bool keep_output) const;
  // The kept output, or recomputed from the kept input.
  Tensor output(const StepContext& ctx, const State& state) const;
  // dx (+)= ∂L/∂x from dy; dg += ∂L/∂g.
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& dx, bool accumulate) const;

 private:
  Tensor weight_, grad_;
  double eps_ = 1e-6;
};

// The forward of a SwiGLU FFN between W1|W3 and W2: act = silu(gate)∘up from gate|up, prepared as W2's input
// (kept for W2's backward with keep_act), and with keep, gate|up kept for the backward. Where the recipe lets a
// producer hand W2 its operand (Linear::input_form) and the store keeps gate|up quantized, one fused op
// (ops::quantize_swiglu_gate_up) writes both from gate|up: the same operands, without the BF16 act.
struct SwigluForward {
  LinearInput x2;       // W2's prepared input
  SavedTensor gate_up;  // gate|up as kept (keep only)
};
SwigluForward swiglu_ffn_forward(const StepContext& ctx, const Tensor& gate_up, const Linear& w2, bool keep,
                                 bool keep_act);

// The backward of a SwiGLU FFN below its output: W2's input recomputed from the kept gate|up when x2 is undefined,
// W2's backward from dy into dact, SwiGLU's backward, then W1|W3's backward into dx (x13 gives W1|W3's kept or
// recomputed input when it is needed). Where gate|up is kept quantized and the recipe lets a producer hand the
// Linears their operands (Linear::recompute_form, Linear::dy_form), the fused ops::quantize_swiglu_* ops write
// W2's recomputed input and W1|W3's dy from the FP8 gate|up directly: the same operands as dequantize, the SwiGLU
// ops and the Linears' own quantization, without the BF16 copies. Shared by SwigluFFN and the MoE's experts
// (offsets: the grouped Linears' expert offsets). Each operand is dropped once its last reader is queued (dy and
// x2 after W2's backward, dact after SwiGLU's backward), so a caller that hands dy over (std::move) frees it before
// W1|W3's backward, the largest part (the MoE's: dy is [padded expert rows, hidden]).
void swiglu_ffn_backward(const StepContext& ctx, const SavedTensor& gate_up, LinearInput x2, const Linear& w2,
                         const Linear& w13, Tensor dy, const std::function<LinearInput()>& x13, const Tensor& dx,
                         bool accumulate, const Tensor& offsets = {});

// SwiGLU FFN: FFN(x) = W2·(silu(W1·x) ∘ (W3·x)). W1 and W3 ([F, d] each, "<name>.w1.weight", "<name>.w3.weight")
// are the two row halves of one fused [2F, d] buffer, so the up-projection is one GEMM (site "<name>.w13");
// W2: [d, F] ("<name>.w2.weight").
class SwigluFFN {
 public:
  struct State {
    LinearInput x13;      // W1|W3's input as its Linear keeps it (undefined when the caller recomputes x)
    SavedTensor gate_up;  // [tokens, 2F] = x·W13ᵀ (the SwiGLU input; FP8 with swiglu_fp8)
    LinearInput x2;       // W2's input silu(gate)∘up (undefined when recomputed from gate_up)
  };
  SwigluFFN() = default;
  SwigluFFN(ParameterSet& params, const std::string& name, int64_t hidden, int64_t ffn_dim, DType dtype, int layer,
            recipe::LinearRole up, recipe::LinearRole down);

  int64_t ffn_dim() const { return w13_.out_features() / 2; }
  Tensor forward(const StepContext& ctx, const Tensor& x, State* state, bool keep_input) const;
  // dx (+)= ∂L/∂x, parameter gradients accumulate; x is the forward input when it was not kept (else undefined).
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& x, const Tensor& dx,
                bool accumulate) const;
  void collect_linears(std::vector<const Linear*>& out) const;

 private:
  Linear w13_, w2_;
};

}  // namespace fp8train::model
