// The DeepSeek-V3-style model: embedding, n_layers blocks (MLA + dense FFN / DeepSeekMoE), final RMSNorm,
// output head, and D multi-token-prediction (MTP) modules sharing the embedding and the head.
//
// Shapes: inputs and targets are i32 [batch·seq] (row-major [batch, seq]; targets = inputs shifted by one,
// −1 = no target). Activations are [batch·seq, hidden_size].
//
// Losses (each reported separately in LossBreakdown):
//   main     L_main = mean over targeted positions of −log P(t_{i+1} | t_≤i)
//   MTP      module k = 1..D at position i takes h^{k−1}_i (h^0 = the main model's last block output, before
//            the final norm) and Emb(t_{i+k}):  h'^k_i = M_k·[RMSNorm(h^{k−1}_i); RMSNorm(Emb(t_{i+k}))]
//            ("mtp.<k−1>.eh_proj", hnorm, enorm), h^k = Block_k(h'^k), and predicts t_{i+k+1} through its own
//            RMSNorm ("mtp.<k−1>.norm") and the shared head; L^k = mean CE over positions where t_{i+k+1} exists;
//            L_MTP = λ/D·Σ_k L^k
//   balance  Σ over MoE layers of α·Σ_i f_i·P_i (sequence-wise, averaged over sequences)
//   total    L_main + L_MTP + balance — what forward_backward differentiates (times grad_scale)
// The head's logits are never kept: the head and cross-entropy run fused in row chunks during forward, and
// with gradients requested they produce ∂L/∂h and accumulate the head's weight gradient right there.
//
// Precision: the recipe (ModelOptions::recipe, recipe/recipe.h) is fixed at construction — FP32 master weights and
// weight gradients, activations and their gradients in its compute dtype (F32 for fp32, BF16 otherwise; F64
// throughout in a gradient-check model), every Linear's GEMMs by its role (model/linear.h), everything kept for
// backward through the ActivationStore (model/activation_store.h). After changing the parameters (an optimizer
// step, a checkpoint load) call mark_parameters_updated(): the GEMMs' compute copies of the weights are then
// refreshed once, at the next forward. Schedulable knobs: set_mtp_lambda, set_bias_update_speed,
// set_seq_aux_loss_alpha. After each optimizer step call update_router_biases(): each MoE layer moves its bias
// by b_i += γ·sign(mean_load − load_i) using the loads of the training forwards since the previous call.
// Numerics health: begin_step(step, sample_health) before a step's first forward; on a sampled step every Linear
// GEMM reports to the model's HealthRecorder, read with take_health().
// Determinism: for a fixed seed every result is bit-for-bit reproducible — no racy reductions, and on the CPU
// the same bits for any thread count (GEMMs split into shape-determined chunks; tests/model checks 1 vs 2).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "recipe/health.h"

namespace fp8train::model {

struct ModelOptions {
  DType dtype = DType::F32;     // master weights: F32, or F64 (gradient checks: the fp32 recipe, F64 throughout)
  uint64_t seed = 1;            // weight initialization
  std::string recipe = "fp32";  // the precision recipe (recipe::parse_recipe spec)
  // Expert parallelism with the experts sharded in memory: this model holds only shard `ep_rank` of `ep` of every
  // MoE layer's routed experts (E/ep of them; model/moe.h). 1: every expert.
  int ep = 1, ep_rank = 0;
};

struct LossBreakdown {
  double total = 0.0;
  double main = 0.0;
  double mtp = 0.0;                   // λ/D·Σ_k L^k
  double balance = 0.0;               // Σ_layers α·L_bal
  std::vector<double> mtp_per_depth;  // L^k, k = 1..D (unweighted)
  int64_t main_tokens = 0;            // targeted positions of the main loss
  double distill = 0.0;               // w·KL: the distillation term (with distillation targets set), included in total
  double distill_kl = 0.0;            // mean over the main loss's targeted positions of KL(teacher top-k ‖ student)
};

// Knowledge distillation from a teacher's top-k distribution (ops/distill.h), for the main head only:
// ids i32 and probs F32 [batch·seq, k] on the model's device, probs renormalised over each row's k tokens.
struct DistillTargets {
  Tensor ids, probs;
  double weight = 0.0;  // w: total = main + w·KL + MTP + balance
};

// A teacher's distribution at every position: its k most likely next tokens and their probabilities renormalised
// over those k, host vectors [rows, k] (rows = batch·seq).
struct TopK {
  int64_t k = 0;
  std::vector<int32_t> ids;
  std::vector<float> probs;
};

struct ExpertLoad {
  std::string layer;          // e.g. "layers.3.moe", "mtp.0.block.moe"
  std::vector<int64_t> load;  // tokens per routed expert since the last update_router_biases()/clear
  double max_over_mean() const;
};

class DeepSeekV3Model {
 public:
  explicit DeepSeekV3Model(const ModelConfig& config, const ModelOptions& options = {});
  ~DeepSeekV3Model();
  DeepSeekV3Model(const DeepSeekV3Model&) = delete;
  DeepSeekV3Model& operator=(const DeepSeekV3Model&) = delete;

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }                  // master weights
  DType compute_dtype() const { return compute_dtype_; }  // activations and their gradients
  const recipe::RecipeConfig& recipe() const { return recipe_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  void zero_grad() { params_.zero_grad(); }

  // Gradient readiness, for a data-parallel reduction overlapped with the backward (dist::Zero1): the backward of
  // forward_backward finishes the gradients in ready groups — 0: the tail (head, final norm, MTP modules); 1 + j:
  // block n_layers − 1 − j; n_layers + 1: the embedding — and, with a hook set, calls it with each group's number
  // once that group's gradients are final (queued, on a GPU). grad_ready_group: a trainable parameter's group.
  int grad_ready_group(std::string_view name) const;
  void set_grad_ready_hook(std::function<void(int)> hook) { grad_ready_ = std::move(hook); }

  // Forward + backward of one batch: gradients of grad_scale·total ACCUMULATE into the parameters' grads.
  LossBreakdown forward_backward(const Tensor& inputs, const Tensor& targets, int64_t batch, double grad_scale = 1.0);
  // Forward only, nothing kept. include_mtp = false is the inference/eval path (MTP unused: total = main +
  // balance); include_mtp = true gives the training total (gradient checks).
  LossBreakdown forward(const Tensor& inputs, const Tensor& targets, int64_t batch, bool include_mtp = false);
  // Forward only: logits [batch, vocab] at each sequence's last position (generation).
  Tensor last_logits(const Tensor& inputs, int64_t batch);
  // Forward only (no MTP, nothing kept): the top-k distribution at every position (a distillation teacher).
  TopK top_k(const Tensor& inputs, int64_t batch, int64_t k);
  // With targets set (not owned; null: none), the main loss of the following passes adds w·KL to the teacher's
  // top-k distribution (LossBreakdown::distill, distill_kl) and its gradient.
  void set_distill_targets(const DistillTargets* targets) { distill_ = targets; }

  // ---- incremental decoding of one sequence with MLA's latent cache (model/mla.h) ----
  // One [capacity, kv_lora_rank + d_rope] compute-dtype tensor per main block and per MTP block: row s holds
  // token s's [c_KV; k^R]. A row is written when its token is decoded and overwritten when a later call decodes
  // that position again, so dropping rejected tokens (speculative decoding) is just decoding from an earlier pos.
  struct DecodeCache {
    std::vector<Tensor> layers, mtp;
    int64_t capacity = 0;
  };
  DecodeCache new_decode_cache(int64_t capacity);
  // Bytes per token of the main model's latent cache, and of the k and v an MHA model of the same head dims
  // (n_heads·(qk_head_dim + v_head_dim) per layer) would cache, both in the compute dtype.
  int64_t latent_cache_bytes_per_token() const;
  int64_t mha_cache_bytes_per_token() const;
  // tokens: i32 [m], the tokens at positions pos..pos+m−1 (cache rows 0..pos−1 hold the earlier ones). Returns
  // FP32 logits [m, vocab], row j predicting the token at pos+j+1 (to rounding, last_logits of the prefix); *hidden
  // (when given) receives the last block's outputs [m, d] (h^0: what the first MTP module reads).
  Tensor decode(const Tensor& tokens, int64_t pos, DecodeCache& cache, Tensor* hidden = nullptr);
  // MTP module k (0-based) at positions pos..pos+m−1: h_prev [m, d] is h^k there (decode()'s hidden for k = 0,
  // module k−1's otherwise) and tokens i32 [m] the tokens at positions pos+k+1.. (the module's embedding input).
  // Returns FP32 logits [m, vocab] predicting the tokens at pos+k+2..; *hidden receives h^{k+1}.
  Tensor mtp_decode(int64_t k, const Tensor& h_prev, const Tensor& tokens, int64_t pos, DecodeCache& cache,
                    Tensor* hidden = nullptr);
  int64_t mtp_depth() const { return static_cast<int64_t>(mtp_.size()); }

  // The parameters changed (optimizer step, checkpoint load, a test's edit): compute copies refresh next forward.
  void mark_parameters_updated() { params_.mark_updated(); }
  // Before a step's first forward: the step seeds stochastic rounding; sample_health makes every Linear GEMM of
  // the step's training passes report its numerics (recipe/health.h).
  void begin_step(int64_t step, bool sample_health);
  std::vector<recipe::GemmHealth> take_health() { return health_.take(); }
  // Bytes of the GEMMs' compute copies of the weights (FP8 W + Wᵀ, BF16, or the FP32 masters), as of the last
  // forward.
  int64_t compute_weight_bytes() const;
  // The precision recipe's state a resume needs (fp8-tensorwise's amax histories; Linear::delayed_scaling_state),
  // as live tensors on the parameters' device; empty for the other recipes.
  std::vector<std::pair<std::string, Tensor>> recipe_state();
  // Every op of the following passes adds its wall time to `profile` (null: none; ExecCtx::profile).
  void set_op_profile(OpProfile* profile) { profile_ = profile; }
  void set_mtp_lambda(double lambda);
  void set_bias_update_speed(double gamma);
  void set_seq_aux_loss_alpha(double alpha);
  double mtp_lambda() const { return config_.mtp_lambda; }
  double bias_update_speed() const { return config_.bias_update_speed; }

  // Auxiliary-loss-free balancing: every MoE layer b_i += γ·sign(mean_load − load_i), then loads reset.
  void update_router_biases();
  void clear_expert_loads();
  // Replaces the pending loads of every MoE layer (in expert_loads() order): the summed loads of all DP ranks.
  void set_expert_loads(const std::vector<std::vector<int64_t>>& loads);
  std::vector<ExpertLoad> expert_loads() const;
  // The loads of the most recent forward_backward alone (per MoE layer, same order as expert_loads()).
  std::vector<ExpertLoad> last_expert_loads() const;
  std::vector<MoE*> moe_layers();

  // ---- pipeline stages (dist/pipeline_executor.h; docs/distributed.md) ----
  // The model cut into `stages` consecutive stages by blocks: stage s runs blocks [first, last) =
  // stage_blocks(s, stages) (n_layers split as evenly as possible, the earlier stages taking one more), stage 0
  // also the embedding, the last stage also the final norm, the fused head loss and the MTP modules. Over all
  // stages, stage_forward then stage_backward of one micro-batch do what forward_backward does on it: gradients of
  // grad_scale·total accumulate into the parameters each stage uses (the embedding's on stage 0 and, through
  // MTP, on the last stage).
  std::pair<int, int> stage_blocks(int stage, int stages) const;
  // What one stage keeps of one micro-batch between its forward and its backward.
  class StageRun {
   public:
    StageRun();
    ~StageRun();
    StageRun(StageRun&&) noexcept;
    StageRun& operator=(StageRun&&) noexcept;
    // This stage's part of the micro-batch's losses: main, MTP and distillation on the last stage, the balance
    // losses of its blocks (and of MTP's on the last stage); total = their sum, so the stages' totals add up
    // to forward_backward's.
    LossBreakdown loss;

   private:
    friend class DeepSeekV3Model;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };
  // Forward of stage `stage` of `stages` on one micro-batch (inputs/targets/batch as forward_backward takes them,
  // on every stage: the last one reads the targets, and MTP the inputs). x: the previous stage's output
  // [batch·seq, hidden] in the compute dtype (ignored on stage 0, which embeds the inputs). Returns this stage's
  // output (undefined on the last stage); `run` keeps what the backward needs.
  Tensor stage_forward(int stage, int stages, const Tensor& inputs, const Tensor& targets, int64_t batch,
                       const Tensor& x, double grad_scale, StageRun& run);
  // Backward of the stage `run` came from: dy = ∂L/∂(its output) (ignored on the last stage, which starts from
  // its losses; overwritten). Accumulates the stage's weight gradients and returns ∂L/∂(its input) (undefined on
  // stage 0). Frees what `run` kept. With `wgrad_queue`, the Linears' Wgrad GEMMs are queued there instead (the
  // pipeline's W step runs them); the other weight gradients (norms, router, embedding) are added here.
  Tensor stage_backward(const Tensor& dy, StageRun& run, WgradQueue* wgrad_queue = nullptr);

 private:
  struct Mtp;
  struct Pass;
  struct Tail;
  void check_batch(const Tensor& inputs, const Tensor& targets, int64_t batch) const;
  // The final norm, the fused head loss (main, distillation) and the MTP modules on the last block's output h_main;
  // fills out's main/distill/MTP terms and adds MTP's balance losses to `balance`. With ctx.training, `tail` keeps
  // what tail_backward needs.
  void tail_forward(const StepContext& ctx, const Tensor& h_main, const Tensor& inputs, const Tensor& targets,
                    int64_t batch, bool include_mtp, Tail& tail, LossBreakdown& out, double& balance);
  // ∂L/∂h_main [n, hidden] (MTP modules in reverse, then the final norm), accumulating their weight gradients.
  Tensor tail_backward(const StepContext& ctx, const Tail& tail, int64_t n);
  StepContext make_context(Device device, int64_t batch, int64_t seq, bool training, double grad_scale);
  // Embedding and every main block on inputs (i32 [n]), keeping nothing: the last block's output [n, hidden].
  Tensor blocks_forward(const StepContext& ctx, const Tensor& inputs);
  const Tensor& head_compute(const StepContext& ctx);  // the head weight as the head GEMM reads it
  Tensor head_logits(const StepContext& ctx, const RMSNorm& norm, const Tensor& h);  // FP32 [rows, vocab]
  LossBreakdown run(const Tensor& inputs, const Tensor& targets, int64_t batch, bool training, bool include_mtp,
                    double grad_scale);
  // Fused head + cross-entropy over row chunks; with dh defined, writes ∂(scale·Σ CE)/∂h into it and accumulates
  // the head weight's gradient. Returns Σ CE and the number of targeted rows.
  // With `distill`, the cross-entropy is fused with its KL term (ops/distill.h); *kl_sum receives Σ KL.
  std::pair<double, int64_t> head_loss(const StepContext& ctx, const Tensor& h, const Tensor& targets, double scale,
                                       const Tensor& dh, const DistillTargets* distill = nullptr,
                                       double* kl_sum = nullptr);

  ModelConfig config_;
  DType dtype_;
  recipe::RecipeConfig recipe_;
  DType compute_dtype_;
  ParameterSet params_;
  std::unique_ptr<ActivationStore> store_;
  std::function<void(int)> grad_ready_;  // set_grad_ready_hook
  recipe::HealthRecorder health_;
  int64_t step_ = 0;
  bool sample_health_ = false;
  OpProfile* profile_ = nullptr;
  const DistillTargets* distill_ = nullptr;
  Tensor head_compute_;
  uint64_t head_version_ = ~uint64_t{0};
  std::vector<const Linear*> linears_;
  Tensor embed_, embed_grad_, head_, head_grad_;
  std::vector<std::unique_ptr<Block>> layers_;
  RMSNorm norm_;
  std::vector<std::unique_ptr<Mtp>> mtp_;
};

}  // namespace fp8train::model
