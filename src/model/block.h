// Transformer block (pre-norm):   h = x + MLA(RMSNorm(x));   y = h + FFN(RMSNorm(h))
// FFN is a dense SwiGLU FFN for the first n_dense_layers blocks and DeepSeekMoE for the rest (and for MTP
// blocks when the model has MoE layers). Parameter names under the block's prefix ("layers.3", "mtp.0.block"):
// attn_norm, attn.*, ffn_norm, and ffn.* (dense) or moe.* (MoE).
#pragma once
#include <memory>

#include "model/mla.h"
#include "model/moe.h"

namespace fp8train::model {

class Block {
 public:
  struct State {
    RMSNorm::State attn_norm, ffn_norm;
    MLA::State attn;
    SwigluFFN::State ffn;
    MoE::State moe;
  };

  // ep / ep_rank: the MoE holds only that shard of its routed experts (MoE's constructor).
  Block(ParameterSet& params, const std::string& prefix, const ModelConfig& config, DType dtype, int layer, bool moe,
        int ep = 1, int ep_rank = 0);

  // x: [tokens, d] → y: [tokens, d]; adds this block's balance loss to *balance_loss.
  Tensor forward(const StepContext& ctx, const Tensor& x, State* state, double* balance_loss);
  // In place: on entry dresid = ∂L/∂y, on exit ∂L/∂x.
  void backward(const StepContext& ctx, const State& state, const Tensor& dresid) const;
  // Inference on m new tokens at positions pos..pos+m−1 of one sequence with MLA's latent cache (MLA::decode).
  Tensor decode(const StepContext& ctx, const Tensor& x, const Tensor& cache, int64_t pos);
  int64_t cache_width() const { return attn_.cache_width(); }

  bool is_moe() const { return moe_ != nullptr; }
  void collect_linears(std::vector<const Linear*>& out) const;
  MoE* moe() { return moe_.get(); }
  const MoE* moe() const { return moe_.get(); }

 private:
  std::string prefix_;
  RMSNorm attn_norm_, ffn_norm_;
  MLA attn_;
  SwigluFFN ffn_;
  std::unique_ptr<MoE> moe_;
};

}  // namespace fp8train::model
