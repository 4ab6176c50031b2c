// Transformer block forward/backward (see block.h).
#include "model/block.h"

#include "ops/elementwise.h"

namespace fp8train::model {

Block::Block(ParameterSet& params, const std::string& prefix, const ModelConfig& c, DType dtype, int layer, bool moe,
             int ep, int ep_rank)
    : prefix_(prefix) {
  attn_norm_ = RMSNorm(params, prefix + ".attn_norm", c.hidden_size, c.rms_norm_eps, dtype);
  attn_ = MLA(params, prefix + ".attn", c, dtype, layer);
  ffn_norm_ = RMSNorm(params, prefix + ".ffn_norm", c.hidden_size, c.rms_norm_eps, dtype);
  if (moe) {
    moe_ = std::make_unique<MoE>(params, prefix + ".moe", c, dtype, layer, ep, ep_rank);
  } else {
    ffn_ = SwigluFFN(params, prefix + ".ffn", c.hidden_size, c.intermediate_size, dtype, layer,
                     recipe::LinearRole::DenseUp, recipe::LinearRole::DenseDown);
  }
}

void Block::collect_linears(std::vector<const Linear*>& out) const {
  attn_.collect_linears(out);
  if (moe_) {
    moe_->collect_linears(out);
  } else {
    ffn_.collect_linears(out);
  }
}

Tensor Block::forward(const StepContext& ctx, const Tensor& x, State* st, double* balance_loss) {
  const bool keep = ctx.training && st;
  // Norm outputs kept (or recomputed in backward): the layers after each norm keep their Linears' inputs.
  const bool keep_norm = ctx.store->keeps(CacheKind::NormOutput);
  // h = x + MLA(RMSNorm(x))
  const Tensor a = attn_norm_.forward(ctx, x, keep ? &st->attn_norm : nullptr);
  const Tensor h = attn_.forward(ctx, a, keep ? &st->attn : nullptr, keep_norm);
  ops::axpy(ctx.exec, 1.0, x, h);
  // y = h + FFN(RMSNorm(h)); the router's backward reads the norm output itself
  const Tensor b = ffn_norm_.forward(ctx, h, keep ? &st->ffn_norm : nullptr, /*keep_output=*/moe_ != nullptr);
  const Tensor y = moe_ ? moe_->forward(ctx, b, keep ? &st->moe : nullptr, balance_loss, keep_norm)
                        : ffn_.forward(ctx, b, keep ? &st->ffn : nullptr, keep_norm);
  ops::axpy(ctx.exec, 1.0, h, y);
  return y;
}

Tensor Block::decode(const StepContext& ctx, const Tensor& x, const Tensor& cache, int64_t pos) {
  const Tensor a = attn_norm_.forward(ctx, x, nullptr);
  const Tensor h = attn_.decode(ctx, a, cache, pos);
  ops::axpy(ctx.exec, 1.0, x, h);
  const Tensor b = ffn_norm_.forward(ctx, h, nullptr);
  const Tensor y = moe_ ? moe_->forward(ctx, b, nullptr, nullptr, false) : ffn_.forward(ctx, b, nullptr, false);
  ops::axpy(ctx.exec, 1.0, h, y);
  return y;
}

void Block::backward(const StepContext& ctx, const State& st, const Tensor& dresid) const {
  const int64_t n = dresid.size(0), d = dresid.size(1);
  const bool keep_norm = ctx.store->keeps(CacheKind::NormOutput);
  const Tensor b = moe_ || !keep_norm ? ffn_norm_.output(ctx, st.ffn_norm) : Tensor();
  const Tensor db = Tensor::empty({n, d}, dresid.dtype(), MemCategory::Workspace, dresid.device());
  if (moe_) {
    moe_->backward(ctx, st.moe, dresid, b, db, false);
  } else {
    ffn_.backward(ctx, st.ffn, dresid, b, db, false);
  }
  ffn_norm_.backward(ctx, st.ffn_norm, db, dresid, true);  // dresid = ∂L/∂h
  const Tensor a = keep_norm ? Tensor() : attn_norm_.output(ctx, st.attn_norm);
  const Tensor da = Tensor::empty({n, d}, dresid.dtype(), MemCategory::Workspace, dresid.device());
  attn_.backward(ctx, st.attn, dresid, a, da, false);
  attn_norm_.backward(ctx, st.attn_norm, da, dresid, true);  // dresid = ∂L/∂x
}

}  // namespace fp8train::model
