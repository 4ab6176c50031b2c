// DeepSeekMoE (DeepSeek-V3 report §2.1.2) with auxiliary-loss-free balancing, for one block.
// Input u: [tokens, d] (the FFN RMSNorm's output).
//   h' = Σ_{i ≤ N_s} FFN^(s)_i(u) + Σ_{i ≤ N_r} g_i·FFN^(r)_i(u)
//   s_i = sigmoid(u·e_i)                        gate.weight: [N_r, d] (rows e_i; the router GEMM is high precision)
//   selection: TopK over s_i + b_i (bias b_i only for selection), group-limited when n_group > 1
//   g_i = s_i / Σ_{j selected} s_j × routed_scaling_factor      (ops/router.h)
//   No token is ever dropped: every (token, choice) pair gets a row in the expert-ordered matrices.
// Shared experts: one SwiGLU FFN of width N_s·moe_intermediate_size ("<name>.shared_experts.*").
// Routed experts: SwiGLU FFNs of width F = moe_intermediate_size; all experts' W1|W3 live in one
// [N_r·2F, d] buffer and all W2 in one [N_r·d, F] buffer, each a grouped Linear (model/linear.h) whose GEMMs run
// as one grouped call over the dispatch plan's device offsets; the named parameters
// "<name>.experts.<e>.w1.weight" etc. are row blocks of those buffers. Tokens are dispatched into the plan's
// expert-ordered layout (padded to the grouped FP8 GEMM's 128-row blocks in the quantized recipes), quantized
// before the move when the recipe dispatches in FP8, and combined in the compute dtype.
// Expert parallelism (set_expert_parallel, dist/expert_parallel.h): this rank computes only its contiguous block
// of E/ep experts; the tokens of every (token, choice) pair go to the EP rank owning the expert and the expert
// outputs come back (FP8 codes + power-of-two 1×128 scales where the recipe dispatches in FP8, else the compute
// dtype; the outputs and dx always in the compute dtype), and the combine is the same gate-weighted sum.
// Memory: built with ep > 1 the layer holds only its shard's experts (E/ep of them, registered as local experts:
// model/parameter.h), so their weights, gradients and optimizer state are divided by ep; built with every expert
// and then set to expert parallelism, it keeps every expert (the non-owned experts' gradients stay zero). The loads
// are the EP group's totals either way, so every EP rank moves its bias alike.
// Auxiliary-loss-free balancing: the bias "<name>.gate.bias" (non-trainable, F32) moves after each optimizer
// step by b_i += γ·sign(mean_load − load_i) (update_bias). Complementary sequence-wise balance loss:
// α·Σ_i f_i·P_i per sequence, averaged over sequences (ops::seq_balance_loss).
#pragma once
#include <vector>

#include "dist/expert_parallel.h"
#include "model/config.h"
#include "model/layers.h"
#include "ops/moe_dispatch.h"
#include "ops/router.h"

namespace fp8train::model {

class MoE {
 public:
  struct State {
    SavedTensor scores, selected, gates;  // router (FP32): [tokens, N_r], [tokens, K], [tokens, K]
    ops::MoePlan plan;                    // dispatch plan (its tensors are booked as kept activations)
    dist::ExpertExchange ep;              // with expert parallelism: the exchange (plan: unpadded, this rank's
                                          // tokens; ep.local_plan(): the local experts' rows)
    LinearInput x13;                      // the experts' input as W1|W3 keeps it (the dispatched FP8 tokens)
    SavedTensor gate_up;                  // W1|W3 output, the SwiGLU input (FP8 with swiglu_fp8)
    LinearInput x2;                       // the SwiGLU output as W2 keeps it (undefined: recomputed)
    SavedTensor yp;                       // W2 output, the combine's input (for the gate gradients)
    SwigluFFN::State shared;
  };

  MoE() = default;
  // ep / ep_rank: hold only shard ep_rank of ep of the routed experts (E a multiple of ep, checked); such a layer
  // must then be set to expert parallelism over a group of that size and rank before it runs.
  MoE(ParameterSet& params, const std::string& name, const ModelConfig& config, DType dtype, int layer, int ep = 1,
      int ep_rank = 0);

  // Returns h'; adds α·L_bal of this layer to *balance_loss. Training forwards add the expert loads to the
  // pending loads used by update_bias(). keep_input: the caller keeps u (the shared experts keep their input).
  Tensor forward(const StepContext& ctx, const Tensor& u, State* state, double* balance_loss, bool keep_input);
  // du (+)= ∂L/∂u from dy = ∂L/∂h' (including the balance loss term, weighted by ctx.grad_scale). u: the forward
  // input (the router's backward reads it).
  void backward(const StepContext& ctx, const State& state, const Tensor& dy, const Tensor& u, const Tensor& du,
                bool accumulate) const;
  void collect_linears(std::vector<const Linear*>& out) const;

  // Expert parallelism over `ep` (nullptr or a group of one: every expert here, no exchange). Collective use
  // only: every EP rank runs the same forwards and backwards. Throws Error unless E is a multiple of ep.size(), and
  // for a layer built with a shard of the experts, unless the group's size and this rank match that shard.
  void set_expert_parallel(dist::Communicator* ep);
  // The experts this rank computes: [first, first + count).
  int64_t first_local_expert() const { return shard_.first(); }
  int64_t local_experts() const { return shard_.local(); }

  // Tokens routed to each expert by training forwards since the last update_bias()/clear_load().
  const std::vector<int64_t>& pending_load() const { return load_; }
  // Tokens per routed expert in the most recent training forward alone (for per-micro-batch logging).
  const std::vector<int64_t>& last_load() const { return last_load_; }
  void clear_load() { std::fill(load_.begin(), load_.end(), 0); }
  // Replaces the pending loads (data parallelism: every rank's loads summed, so all ranks move the bias alike).
  void set_pending_load(const std::vector<int64_t>& load);
  // b_i += γ·sign(mean_load − load_i) over the pending loads, then clears them (γ = 0: only clears).
  void update_bias(double gamma);
  const Tensor& bias() const { return bias_; }
  const std::string& name() const { return name_; }
  void set_seq_aux_loss_alpha(double alpha) { alpha_ = alpha; }

 private:
  void build_expert_linears();  // w13_, w2_ over the local experts' rows of the stacked buffers

  std::string name_;
  int64_t n_experts_ = 0, ffn_ = 0, hidden_ = 0;
  ops::RouterConfig router_;
  double alpha_ = 0.0;
  Tensor gate_weight_, gate_grad_, bias_;
  Linear w13_, w2_;  // the local routed experts, grouped: [E_local·2F, d] and [E_local·d, F]
  const ParameterSet* params_ = nullptr;
  int layer_ = 0;
  Tensor w13_all_, g13_all_, w2_all_, g2_all_;  // the experts held: [H·2F, d] and [H·d, F] from expert held_first_
  dist::ExpertShard held_;                      // the experts held (all of them unless built with a shard)
  dist::Communicator* ep_ = nullptr;            // set with more than one EP rank
  dist::ExpertShard shard_;
  bool has_shared_ = false;
  SwigluFFN shared_;
  std::vector<int64_t> load_, last_load_;
};

}  // namespace fp8train::model
