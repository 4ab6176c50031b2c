// ModelConfig validation, JSON and the named configs (see config.h).
#include "model/config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fp8train::model {

double ModelConfig::softmax_scale() const { return 1.0 / std::sqrt(static_cast<double>(qk_head_dim())); }

void ModelConfig::validate() const {
  auto positive = [](const char* key, int64_t v) {
    FP8T_CHECK(v > 0, "model config '{}' must be positive, got {}", key, v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("q_lora_rank", q_lora_rank);
  positive("kv_lora_rank", kv_lora_rank);
  positive("qk_nope_head_dim", qk_nope_head_dim);
  positive("qk_rope_head_dim", qk_rope_head_dim);
  positive("v_head_dim", v_head_dim);
  FP8T_CHECK(qk_rope_head_dim % 2 == 0, "model config 'qk_rope_head_dim' must be even (RoPE rotates pairs), got {}",
             qk_rope_head_dim);
  FP8T_CHECK(n_dense_layers >= 0 && n_dense_layers <= n_layers,
             "model config 'n_dense_layers' ({}) must be in [0, n_layers = {}]", n_dense_layers, n_layers);
  if (n_dense_layers > 0) positive("intermediate_size", intermediate_size);
  if (n_dense_layers < n_layers) {
    positive("moe_intermediate_size", moe_intermediate_size);
    positive("n_routed_experts", n_routed_experts);
    FP8T_CHECK(n_shared_experts >= 0, "model config 'n_shared_experts' must be >= 0, got {}", n_shared_experts);
    FP8T_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= n_routed_experts,
               "model config 'num_experts_per_tok' ({}) must be in [1, n_routed_experts = {}]", num_experts_per_tok,
               n_routed_experts);
    FP8T_CHECK(n_group >= 1 && n_routed_experts % n_group == 0,
               "model config 'n_group' ({}) must divide 'n_routed_experts' ({})", n_group, n_routed_experts);
    FP8T_CHECK(topk_group >= 1 && topk_group <= n_group, "model config 'topk_group' ({}) must be in [1, n_group = {}]",
               topk_group, n_group);
    FP8T_CHECK(num_experts_per_tok <= topk_group * (n_routed_experts / n_group),
               "model config 'num_experts_per_tok' ({}) exceeds the {} experts of 'topk_group' = {} groups",
               num_experts_per_tok, topk_group * (n_routed_experts / n_group), topk_group);
  }
  FP8T_CHECK(routed_scaling_factor > 0, "model config 'routed_scaling_factor' must be positive, got {}",
             routed_scaling_factor);
  FP8T_CHECK(bias_update_speed >= 0, "model config 'bias_update_speed' must be >= 0, got {}", bias_update_speed);
  FP8T_CHECK(seq_aux_loss_alpha >= 0, "model config 'seq_aux_loss_alpha' must be >= 0, got {}", seq_aux_loss_alpha);
  FP8T_CHECK(mtp_depth >= 0, "model config 'mtp_depth' must be >= 0, got {}", mtp_depth);
  FP8T_CHECK(mtp_lambda >= 0, "model config 'mtp_lambda' must be >= 0, got {}", mtp_lambda);
  FP8T_CHECK(rope_theta > 0, "model config 'rope_theta' must be positive, got {}", rope_theta);
  FP8T_CHECK(init_std > 0, "model config 'init_std' must be positive, got {}", init_std);
  FP8T_CHECK(rms_norm_eps > 0, "model config 'rms_norm_eps' must be positive, got {}", rms_norm_eps);
}

std::string ModelConfig::describe() const {
  return fmt::format(
      "hidden {} layers {} ({} dense) heads {} q_lora {} kv_lora {} qk {}+{} v {} ffn {} experts {}+{} shared "
      "top-{} (groups {}/{}) moe_ffn {} mtp {} vocab {}",
      hidden_size, n_layers, n_dense_layers, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
      v_head_dim, intermediate_size, n_routed_experts, n_shared_experts, num_experts_per_tok, topk_group, n_group,
      moe_intermediate_size, mtp_depth, vocab_size);
}

#define FP8T_MODEL_CONFIG_FIELDS(X)                                                                            \
  X(vocab_size) X(hidden_size) X(n_layers) X(n_dense_layers) X(n_heads) X(q_lora_rank) X(kv_lora_rank)          \
  X(qk_nope_head_dim) X(qk_rope_head_dim) X(v_head_dim) X(intermediate_size) X(moe_intermediate_size)           \
  X(n_routed_experts) X(n_shared_experts) X(num_experts_per_tok) X(n_group) X(topk_group)                       \
  X(routed_scaling_factor) X(bias_update_speed) X(seq_aux_loss_alpha) X(mtp_depth) X(mtp_lambda) X(rope_theta) \
  X(init_std) X(rms_norm_eps) X(tie_embeddings)

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json j;
#define FP8T_PUT(f) j[#f] = c.f;
  FP8T_MODEL_CONFIG_FIELDS(FP8T_PUT)
#undef FP8T_PUT
  return j;
}

ModelConfig model_config_from_json(const nlohmann::json& j) {
  FP8T_CHECK(j.is_object(), "model config JSON must be an object");
  ModelConfig c;
  for (const auto& [key, value] : j.items()) {
    bool known = false;
#define FP8T_GET(f)                                                                                  \
  if (key == #f) {                                                                                   \
    known = true;                                                                                    \
    try {                                                                                            \
      c.f = value.get<decltype(c.f)>();                                                              \
    } catch (const nlohmann::json::exception&) {                                                     \
      FP8T_FAIL("model config '{}' has the wrong type: {}", key, value.dump());                      \
    }                                                                                                \
  }
    FP8T_MODEL_CONFIG_FIELDS(FP8T_GET)
#undef FP8T_GET
    FP8T_CHECK(known, "unknown model config key '{}'", key);
  }
  return c;
}

ModelConfig tiny_test_config() {
  ModelConfig c;
  c.vocab_size = 11;
  c.hidden_size = 16;
  c.n_layers = 2;
  c.n_dense_layers = 1;
  c.n_heads = 2;
  c.q_lora_rank = 12;
  c.kv_lora_rank = 8;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 4;
  c.intermediate_size = 24;
  c.moe_intermediate_size = 8;
  c.n_routed_experts = 8;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 1.5;
  c.seq_aux_loss_alpha = 0.01;
  c.mtp_depth = 1;
  c.mtp_lambda = 0.3;
  c.init_std = 0.006;
  return c;
}

ModelConfig bench_config() {
  ModelConfig c;
  c.vocab_size = 259;
  c.hidden_size = 256;
  c.n_layers = 4;
  c.n_dense_layers = 1;
  c.n_heads = 4;
  c.q_lora_rank = 128;
  c.kv_lora_rank = 64;
  c.qk_nope_head_dim = 64;
  c.qk_rope_head_dim = 32;
  c.v_head_dim = 64;
  c.intermediate_size = 1024;
  c.moe_intermediate_size = 256;
  c.n_routed_experts = 8;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.n_group = 1;
  c.topk_group = 1;
  c.mtp_depth = 1;
  return c;
}

ModelConfig::Flops ModelConfig::training_flops(int64_t seq) const {
  const int64_t d = hidden_size, h = n_heads;
  const int64_t q_proj = q_lora_rank > 0 ? d * q_lora_rank + q_lora_rank * h * qk_head_dim() : d * h * qk_head_dim();
  const int64_t attn = q_proj + d * (kv_lora_rank + qk_rope_head_dim) +
                       kv_lora_rank * h * (qk_nope_head_dim + v_head_dim) + h * v_head_dim * d;
  const int64_t dense = 3 * d * intermediate_size;
  const int64_t moe = 3 * d * moe_intermediate_size * (num_experts_per_tok + n_shared_experts) + d * n_routed_experts;
  const bool mtp_moe = n_dense_layers < n_layers;  // MTP blocks use MoE when the model has MoE layers
  const int64_t mtp = 2 * d * d + attn + (mtp_moe ? moe : dense) + d * vocab_size;
  Flops f;
  f.active_params = n_layers * attn + n_dense_layers * dense + n_moe_layers() * moe + d * vocab_size + mtp_depth * mtp;
  const double attn_flops = static_cast<double>(n_layers + mtp_depth) * static_cast<double>(h) * 2.0 *
                            static_cast<double>(seq) * static_cast<double>(qk_head_dim() + v_head_dim);
  f.per_token = 6.0 * static_cast<double>(f.active_params) + 3.0 * attn_flops;
  return f;
}

}  // namespace fp8train::model
