// The model section of the config registry, the model's cross-key checks, and the presets.
#include <fmt/format.h>

#include "common/error.h"
#include "train/config.h"
#include "train/config_keys.h"

namespace fp8train::train {
namespace detail {

#define FP8T_REF(expr) [](TrainConfig& c) -> ValueRef { return &c.model.expr; }
// The registry is a table, one key per line: clang-format would spread each entry over several.
// clang-format off
void append_model_keys(std::vector<ConfigKey>& k) {
  k.push_back({"model.vocab_size", "vocab-size", 2, 1e7, {}, "vocabulary (the byte tokenizer needs at least 259)", FP8T_REF(vocab_size)});
  k.push_back({"model.hidden_size", "hidden-size", 8, 65536, {}, "model width", FP8T_REF(hidden_size)});
  k.push_back({"model.n_layers", "n-layers", 1, 1024, {}, "transformer blocks", FP8T_REF(n_layers)});
  k.push_back({"model.n_dense_layers", "n-dense-layers", 0, 1024, {}, "leading blocks with a dense FFN instead of MoE", FP8T_REF(n_dense_layers)});
  k.push_back({"model.n_heads", "n-heads", 1, 1024, {}, "attention heads", FP8T_REF(n_heads)});
  k.push_back({"model.q_lora_rank", "q-lora-rank", 1, 65536, {}, "MLA query compression rank", FP8T_REF(q_lora_rank)});
  k.push_back({"model.kv_lora_rank", "kv-lora-rank", 1, 65536, {}, "MLA key/value compression rank", FP8T_REF(kv_lora_rank)});
  k.push_back({"model.qk_nope_head_dim", "qk-nope-head-dim", 1, 4096, {}, "per-head query/key dims without RoPE", FP8T_REF(qk_nope_head_dim)});
  k.push_back({"model.qk_rope_head_dim", "qk-rope-head-dim", 2, 4096, {}, "per-head query/key dims with RoPE (even)", FP8T_REF(qk_rope_head_dim)});
  k.push_back({"model.v_head_dim", "v-head-dim", 1, 4096, {}, "per-head value dims", FP8T_REF(v_head_dim)});
  k.push_back({"model.intermediate_size", "intermediate-size", 1, 1e6, {}, "dense FFN hidden size", FP8T_REF(intermediate_size)});
  k.push_back({"model.moe_intermediate_size", "moe-intermediate-size", 1, 1e6, {}, "hidden size of each expert", FP8T_REF(moe_intermediate_size)});
  k.push_back({"model.n_routed_experts", "n-routed-experts", 1, 65536, {}, "routed experts per MoE layer", FP8T_REF(n_routed_experts)});
  k.push_back({"model.n_shared_experts", "n-shared-experts", 0, 64, {}, "shared experts per MoE layer", FP8T_REF(n_shared_experts)});
  k.push_back({"model.num_experts_per_tok", "num-experts-per-tok", 1, 65536, {}, "routed experts per token (top-K)", FP8T_REF(num_experts_per_tok)});
  k.push_back({"model.n_group", "n-group", 1, 65536, {}, "expert groups for group-limited routing", FP8T_REF(n_group)});
  k.push_back({"model.topk_group", "topk-group", 1, 65536, {}, "groups a token may route to", FP8T_REF(topk_group)});
  k.push_back({"model.routed_scaling_factor", "routed-scaling-factor", 0.0, 1000, {}, "scale of the routed experts' combined output", FP8T_REF(routed_scaling_factor)});
  k.push_back({"model.bias_update_speed", "bias-update-speed", 0, 1, {}, "router bias update speed gamma (auxiliary-loss-free balancing), the whole run unless train.bias_update_speed_schedule is given", FP8T_REF(bias_update_speed)});
  k.push_back({"model.seq_aux_loss_alpha", "seq-aux-loss-alpha", 0, 1, {}, "sequence-wise balance loss weight alpha", FP8T_REF(seq_aux_loss_alpha)});
  k.push_back({"model.mtp_depth", "mtp-depth", 0, 16, {}, "multi-token prediction modules D", FP8T_REF(mtp_depth)});
  k.push_back({"model.mtp_lambda", "mtp-lambda", 0, 10, {}, "MTP loss weight lambda, the whole run unless train.mtp_lambda_schedule is given", FP8T_REF(mtp_lambda)});
  k.push_back({"model.rope_theta", "rope-theta", 1, 1e9, {}, "RoPE base", FP8T_REF(rope_theta)});
  k.push_back({"model.init_std", "init-std", 1e-6, 1, {}, "standard deviation of the weight initialisation", FP8T_REF(init_std)});
  k.push_back({"model.rms_norm_eps", "rms-norm-eps", 1e-12, 1e-2, {}, "RMSNorm epsilon", FP8T_REF(rms_norm_eps)});
  k.push_back({"model.tie_embeddings", "tie-embeddings", 0, 0, {}, "share the embedding and output head weights", FP8T_REF(tie_embeddings)});
}
// clang-format on
#undef FP8T_REF

}  // namespace detail

void validate_model_config(const TrainConfig& c) {
  const model::ModelConfig& m = c.model;
  FP8T_CHECK(m.n_dense_layers <= m.n_layers, "config key 'model.n_dense_layers' ({}) must not exceed 'model.n_layers' ({})",
             m.n_dense_layers, m.n_layers);
  FP8T_CHECK(m.qk_rope_head_dim % 2 == 0, "config key 'model.qk_rope_head_dim' must be even, got {}", m.qk_rope_head_dim);
  FP8T_CHECK(m.num_experts_per_tok <= m.n_routed_experts,
             "config key 'model.num_experts_per_tok' ({}) must not exceed 'model.n_routed_experts' ({})",
             m.num_experts_per_tok, m.n_routed_experts);
  FP8T_CHECK(m.n_routed_experts % m.n_group == 0,
             "config key 'model.n_group' ({}) must divide 'model.n_routed_experts' ({})", m.n_group, m.n_routed_experts);
  FP8T_CHECK(m.topk_group <= m.n_group, "config key 'model.topk_group' ({}) must not exceed 'model.n_group' ({})",
             m.topk_group, m.n_group);
  FP8T_CHECK(m.num_experts_per_tok <= m.topk_group * (m.n_routed_experts / m.n_group),
             "config key 'model.num_experts_per_tok' ({}) exceeds the experts in 'model.topk_group' ({}) groups of {}",
             m.num_experts_per_tok, m.topk_group, m.n_routed_experts / m.n_group);
  m.validate();  // the model layer's own checks (any it has beyond these)
}

std::vector<std::string> preset_names() { return {"tiny", "small", "base"}; }

TrainConfig preset_config(const std::string& name) {
  TrainConfig c;
  c.preset = name;
  // Shared by the CPU presets: small widths train faster from a larger init than DeepSeek-V3's 0.006, and runs
  // of a few hundred steps need a faster router-bias update than its 0.001 to reach balance (measured: the
  // max expert load ratio ends at 1.16 with 0.01 versus 3.2 with 0.001 after 300 steps, same loss).
  c.model.init_std = 0.02;
  c.model.bias_update_speed = 0.01;
  if (name == "tiny") {
    // Tuned on tinyshakespeare, 300 steps of 64×128 tokens (sweep in bench/RESULTS.md): 192 wide, 2 blocks,
    // peak learning rate held to 70 % of the run, then a cosine to 1e-3 at the end: 2.48 bits per byte on the
    // whole held-out split (the 128-wide model with a decay from 50 % to 95 %: 2.53).
    c.model.hidden_size = 192;
    c.model.n_heads = 6;
    c.steps = 300;
    c.batch_size = 64;
    c.seq_len = 128;
    c.lr = 1e-2;
    c.final_lr = 1e-3;
    c.decay_start = 0.7;
    c.decay_end = 1.0;
    c.eval_every = 50;
    c.eval_batches = 2;
  } else if (name == "small") {
    // The default of `fp8train train`: a few minutes on 2 CPU cores on the embedded corpus (bench/RESULTS.md).
    c.model.hidden_size = 192;
    c.model.n_layers = 3;
    c.model.n_heads = 6;
    c.model.q_lora_rank = 96;
    c.model.kv_lora_rank = 48;
    c.model.intermediate_size = 512;
    c.model.moe_intermediate_size = 128;
    c.steps = 400;
  } else if (name == "base") {
    // GPU-sized: 1024 wide, 12 blocks (1 dense), 64 routed experts top-6 in 8 groups, MTP depth 1.
    c.model.vocab_size = 259;
    c.model.hidden_size = 1024;
    c.model.n_layers = 12;
    c.model.n_dense_layers = 1;
    c.model.n_heads = 16;
    c.model.q_lora_rank = 384;
    c.model.kv_lora_rank = 256;
    c.model.qk_nope_head_dim = 64;
    c.model.qk_rope_head_dim = 32;
    c.model.v_head_dim = 64;
    c.model.intermediate_size = 2816;
    c.model.moe_intermediate_size = 352;
    c.model.n_routed_experts = 64;
    c.model.n_shared_experts = 1;
    c.model.num_experts_per_tok = 6;
    c.model.n_group = 8;
    c.model.topk_group = 4;
    c.model.routed_scaling_factor = 2.5;
    c.model.init_std = 0.006;
    c.model.bias_update_speed = 1e-3;
    c.steps = 20000;
    c.batch_size = 256;
    c.micro_batch_size = 32;
    c.seq_len = 1024;
    c.lr = 1e-3;
    c.final_lr = 1e-4;
    c.warmup_steps = 500;
    c.eval_every = 500;
    c.save_every = 1000;
    c.log_every = 20;
    c.batch_warmup_start = 64;
    c.batch_warmup_steps = 1000;
  } else {
    FP8T_FAIL("unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
  }
  return c;
}

}  // namespace fp8train::train
