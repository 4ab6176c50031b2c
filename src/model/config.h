// ModelConfig: every dimension of a DeepSeek-V3-style model, named as in the DeepSeek-V3 report and its
// Hugging Face config (hidden_size, q_lora_rank, kv_lora_rank, qk_nope_head_dim, ...). JSON round trip
// (to_json/from_json: unknown keys are errors naming the key) and validate() with one sentence per problem.
// DeepSeek-V3 itself: hidden 7168, 61 layers (3 dense), 128 heads, q_lora 1536, kv_lora 512, nope 128,
// rope 64, v 128, 256 routed experts (8 per token, 8 groups, top-4 groups), 1 shared, moe_intermediate 2048,
// routed_scaling_factor 2.5, MTP depth 1.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace fp8train::model {

struct ModelConfig {
  int64_t vocab_size = 259;         // byte tokenizer: 256 bytes + BOS, EOS, PAD
  int64_t hidden_size = 128;        // d (model width)
  int64_t n_layers = 2;             // transformer blocks of the main model
  int64_t n_dense_layers = 1;       // the first blocks use a dense SwiGLU FFN, the rest DeepSeekMoE
  int64_t n_heads = 4;              // n_h
  int64_t q_lora_rank = 64;         // d'_c: query compression (c_Q)
  int64_t kv_lora_rank = 32;        // d_c: key/value compression (c_KV)
  int64_t qk_nope_head_dim = 16;    // d_h: per-head q/k dims without RoPE (q^C, k^C)
  int64_t qk_rope_head_dim = 16;    // d^R_h: per-head decoupled RoPE dims (q^R, shared k^R)
  int64_t v_head_dim = 16;          // per-head value dims
  int64_t intermediate_size = 384;  // dense FFN hidden size
  int64_t moe_intermediate_size = 96;  // hidden size of each expert (shared experts too)
  int64_t n_routed_experts = 8;     // N_r
  int64_t n_shared_experts = 1;     // N_s (implemented as one SwiGLU FFN of N_s·moe_intermediate_size)
  int64_t num_experts_per_tok = 2;  // K_r
  int64_t n_group = 1;              // expert groups (the report's nodes) for group-limited routing
  int64_t topk_group = 1;           // M: groups a token may use
  double routed_scaling_factor = 1.0;  // multiplies the normalized routed gates
  double bias_update_speed = 1e-3;  // γ of the auxiliary-loss-free bias update (0 disables)
  double seq_aux_loss_alpha = 1e-4; // α of the sequence-wise balance loss (0 disables)
  int64_t mtp_depth = 1;            // D: multi-token prediction modules
  double mtp_lambda = 0.3;          // λ: weight of L_MTP = λ/D·Σ_k L^k
  double rope_theta = 10000.0;      // RoPE base
  double init_std = 0.006;          // weights ~ N(0, init_std²); RMSNorm gains 1; router biases 0
  double rms_norm_eps = 1e-6;
  bool tie_embeddings = false;      // the output head reuses the embedding table

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  double softmax_scale() const;  // 1/sqrt(qk_nope_head_dim + qk_rope_head_dim)
  int64_t n_moe_layers() const { return n_layers - n_dense_layers; }
  bool is_moe_layer(int64_t layer) const { return layer >= n_dense_layers; }

  // Model FLOPs of one training token at sequence length `seq` (forward + backward), the convention of
  // ../shared/bench/torch_moe_reference.py: 6 × the matmul parameters a token activates (MLA projections, the
  // dense FFN, the shared and top-K routed experts, the router gate, the head; plus each MTP module's
  // projection, block and head) + 3 × the causal attention's forward FLOPs (2·seq·(qk + v) per head per layer,
  // half of the full 4·seq·d for the causal mask).
  struct Flops {
    double per_token = 0;           // model FLOPs per token
    int64_t active_params = 0;      // matmul parameters a token activates
  };
  Flops training_flops(int64_t seq) const;
  // Throws fp8train::Error naming the first inconsistent key.
  void validate() const;
  std::string describe() const;  // one line: the main dimensions
};

nlohmann::json to_json(const ModelConfig& c);
ModelConfig model_config_from_json(const nlohmann::json& j);  // keys absent keep their defaults

// The config of the whole-model gradient checks: 2 layers (1 dense, 1 MoE with 8 routed experts top-2 in 4 groups,
// 1 shared), MTP D = 1, tiny widths.
ModelConfig tiny_test_config();
// The training-step speed benchmark's config (bench/model_step_bench.cpp): hidden 256, 4 layers, 8 routed
// experts top-2.
ModelConfig bench_config();

}  // namespace fp8train::model
