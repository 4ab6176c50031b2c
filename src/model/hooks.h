// The two hooks a precision recipe replaces without touching model code:
//
// LinearCompute — the three GEMMs of every Linear layer y = x·Wᵀ (no bias), called with the layer's site:
//     fprop  y  = x·Wᵀ         x: [tokens, in]    W: [out, in]    y: [tokens, out]
//     dgrad  dx (+)= dy·W      dy: [tokens, out]  dx: [tokens, in]
//     wgrad  dW += dyᵀ·x       dW: [out, in] (gradients always accumulate)
//   GemmLinearCompute runs them through ops::gemm (OpenBLAS; FP32 — FP64 in f64 models — the default) or,
//   with round_inputs_bf16, on BF16-rounded inputs (the BF16 baseline). An FP8 recipe quantizes x, W and dy (1×128 / 128×128 tiles) here.
//   The embedding, output head, router (MoE gate), RMSNorms and attention core are NOT Linear layers: they
//   call ops directly and stay high precision in every recipe.
//
// ActivationCache — every tensor a layer keeps from forward for backward goes through save()/load(), tagged
//   with a CacheSite (layer name + CacheKind). The default keeps the tensor itself and re-books its storage
//   under MemCategory::ActivationCache, so the allocator's peak of that category is the measured peak of
//   cached activation bytes. A recipe stores some kinds in FP8/E5M6 (save quantizes, load dequantizes; the
//   encoded form goes in SavedTensor::state) or declines to keep the recomputable kinds (keeps() == false):
//   the layer then recomputes them in backward from what it did keep.
#pragma once
#include <any>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace fp8train::model {

// What a cached tensor is. (R) marks kinds a layer can recompute when the cache declines to keep them.
enum class CacheKind : uint8_t {
  NormInput,        // input of an RMSNorm (residual stream, MLA latent before its norm), needed by its backward
  NormRstd,         // the per-row 1/rms of an RMSNorm
  NormOutput,       // (R) output of an RMSNorm, the input of the Linear(s) after it
  MlaUpProjection,  // (R) MLA up-projected q (after RoPE) and k|v (W_UQ/W_QR and W_UK/W_UV outputs)
  AttentionInput,   // attention-core inputs that cannot be recomputed from kept tensors (MLA's shared k^R)
  AttentionOutput,  // attention core output o (the input of W_O; E5M6 in the FP8 recipe) and its lse
  LinearInput,      // the input of any other Linear (e.g. MTP's concatenated projection input)
  SwigluInput,      // the fused gate|up [rows, 2F] (FP8 in the FP8 recipe's MoE)
  SwigluOutput,     // (R) silu(gate)∘up, the input of W2
  RouterState,      // scores, selection, gates and the dispatch plan (high precision, never quantized)
  ExpertIO,         // MoE expert-ordered input and output rows (for W1/W3 wgrad and the gate gradients)
};
std::string_view cache_kind_name(CacheKind kind);
bool is_recomputable(CacheKind kind);

struct CacheSite {
  std::string layer;  // e.g. "layers.3.attn"
  CacheKind kind;
};

// What save() returned. `value` is what load() hands back with the default cache; a recipe may leave it
// undefined and keep its own representation in `state`.
struct SavedTensor {
  Tensor value;
  std::any state;
  CacheKind kind = CacheKind::LinearInput;
  bool kept = false;  // false: nothing was kept (a recomputable kind the cache declined)
};

class ActivationCache {
 public:
  virtual ~ActivationCache() = default;
  // Whether the cache keeps a recomputable kind at this site; layers recompute what is not kept.
  virtual bool keeps(const CacheSite& site) const;
  virtual SavedTensor save(const Tensor& t, const CacheSite& site);
  virtual Tensor load(const SavedTensor& saved) const;
  // Layers call this: consults keeps() for recomputable kinds, then save().
  SavedTensor maybe_save(const Tensor& t, const CacheSite& site);
};

// A cache that keeps nothing recomputable (every (R) kind is recomputed in backward): the memory-lean policy,
// and a test that the recompute paths give the same gradients.
class RecomputingCache : public ActivationCache {
 public:
  bool keeps(const CacheSite& site) const override { return !is_recomputable(site.kind); }
};

// Where a Linear sits: its name ("layers.3.attn.wq_a", "layers.3.moe.experts.5.w13") and the layer index
// (−1 for none; MTP modules use n_layers + k).
struct LinearSite {
  std::string name;
  int layer = -1;
};

// One member of a grouped GEMM (the routed experts of a MoE layer): a Linear's site, weight and weight gradient,
// and its row block of the expert-ordered activations (forward: x, y; backward: x, dy, dx).
struct LinearGroupItem {
  const LinearSite* site = nullptr;
  Tensor w, dw;
  Tensor x, y;
  Tensor dy, dx;
};

class LinearCompute {
 public:
  virtual ~LinearCompute() = default;
  virtual std::string name() const = 0;
  virtual void fprop(const LinearSite& site, const Tensor& x, const Tensor& w, const Tensor& y) = 0;
  virtual void dgrad(const LinearSite& site, const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) = 0;
  virtual void wgrad(const LinearSite& site, const Tensor& dy, const Tensor& x, const Tensor& dw) = 0;
  // Grouped forms for the routed experts: every item's fprop (y = x·Wᵀ), or wgrad (dW += dyᵀ·x) then dgrad
  // (dx = dy·W). The defaults run the items one after another; an implementation may run them concurrently
  // (items never share outputs) or as one grouped kernel.
  virtual void grouped_fprop(const std::vector<LinearGroupItem>& items);
  virtual void grouped_backward(const std::vector<LinearGroupItem>& items);
};

// FP32 (or FP64 for f64 models) GEMMs via ops::gemm, optionally with BF16-rounded inputs.
class GemmLinearCompute : public LinearCompute {
 public:
  explicit GemmLinearCompute(bool round_inputs_bf16 = false) : bf16_(round_inputs_bf16) {}
  std::string name() const override { return bf16_ ? "bf16" : "fp32"; }
  void fprop(const LinearSite& site, const Tensor& x, const Tensor& w, const Tensor& y) override;
  void dgrad(const LinearSite& site, const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) override;
  void wgrad(const LinearSite& site, const Tensor& dy, const Tensor& x, const Tensor& dw) override;
  // The experts run concurrently on the CPU threads, each expert's GEMMs on one thread (largest first).
  // Each item's arithmetic is the same as fprop/wgrad/dgrad alone, so results do not change.
  void grouped_fprop(const std::vector<LinearGroupItem>& items) override;
  void grouped_backward(const std::vector<LinearGroupItem>& items) override;

 private:
  bool bf16_;
};

std::shared_ptr<LinearCompute> make_fp32_linear_compute();
std::shared_ptr<LinearCompute> make_bf16_linear_compute();

}  // namespace fp8train::model
