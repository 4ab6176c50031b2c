// The Hugging Face format: fp8train's DeepSeek-V3 model as a directory that transformers loads with
// AutoModelForCausalLM (DeepseekV3ForCausalLM), and any such directory as the starting weights of a run.
//
//   HFDIR/config.json             model_type "deepseek_v3": every field transformers' DeepseekV3Config reads
//   HFDIR/generation_config.json  the special tokens and fp8train generate's sampling defaults
//   HFDIR/model.safetensors       FP32 weights under the Hugging Face names (metadata format "pt")
//   HFDIR/<tokenizer files>       written by the tokenizer's exporter (see export_hf)
//
// Names: fp8train follows DeepSeek's reference naming; the Hugging Face names are those of DeepSeek-V3's release:
//   embed.weight → model.embed_tokens.weight, norm.weight → model.norm.weight, head.weight → lm_head.weight;
//   layers.i.{attn_norm, ffn_norm} → model.layers.i.{input_layernorm, post_attention_layernorm};
//   attn.{wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, wo} → self_attn.{q_a_proj, q_a_layernorm, q_b_proj,
//   kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}; ffn / moe.shared_experts / moe.experts.e
//   .{w1, w2, w3} → mlp / mlp.shared_experts / mlp.experts.e .{gate_proj, down_proj, up_proj};
//   moe.gate.weight → mlp.gate.weight, the router bias moe.gate.bias → mlp.gate.e_score_correction_bias.
// The layouts already agree (RoPE dims interleaved as in DeepSeek's reference, hence rope_interleave true;
// q_b / kv_b rows per head [nope, rope] / [nope, v]; kv_a rows [kv_lora, rope]).
// MTP module k is layer n_layers + k, as in the release: its block under the layer's usual names, plus enorm,
// hnorm, eh_proj, shared_head.norm (fp8train's mtp.k.norm), and copies of the shared embedding and output head
// (embed_tokens, shared_head.head). The release's eh_proj multiplies [enorm(embedding); hnorm(hidden)], fp8train's
// [hnorm(hidden); enorm(embedding)] (the report's order), so the two column halves are swapped both ways.
// transformers itself does not run the MTP layer (it reports its tensors as unused when loading).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/safetensors.h"
#include "train/trainable.h"

namespace fp8train::train {

// The Hugging Face name of an fp8train parameter or state tensor; throws naming a name it does not know.
std::string hf_tensor_name(const std::string& name, int64_t n_layers);

// config.json of a model; `max_positions` is the context it was trained for (train.seq_len).
nlohmann::ordered_json hf_config_json(const model::ModelConfig& c, int64_t max_positions);

// The architecture keys ("model" section of fp8train's config) of a Hugging Face config.json. Refuses, naming
// the key, what fp8train's model cannot represent: another model_type, YaRN or other RoPE scaling, softmax router
// scores, no query compression (q_lora_rank null), unnormalized top-k gates, key/value heads fewer than query
// heads, attention biases, FP8-quantized weights. Keys absent take transformers' DeepseekV3Config defaults.
nlohmann::json model_section_from_hf_config(const nlohmann::json& hf, const std::string& where);

// The Hugging Face tensors of fp8train's master tensors (FP32, fp8train names: master.safetensors).
StFile hf_weights_from_master(const StFile& master, const model::ModelConfig& c);

// `fp8train export --format hf`: the checkpoint at `checkpoint` (run, checkpoints/ or step directory) to a new
// directory `out_dir`, built in "<out_dir>.tmp-<pid>" and renamed into place (no half-written directory on error).
// Refuses an existing `out_dir`. Returns a one-line summary.
std::string export_hf(const std::string& checkpoint, const std::string& out_dir, bool ema = false);

// A Hugging Face directory read for --init-from: its config and all its tensors (model.safetensors, or the shards
// model.safetensors.index.json names).
struct HfCheckpoint {
  std::string dir;
  nlohmann::json config;         // config.json as found
  nlohmann::json model_section;  // model_section_from_hf_config
  std::vector<StTensor> tensors;
};
HfCheckpoint read_hf_checkpoint(const std::string& dir);

// Copies the tensors into the model's master weights and router biases (F32 or BF16 tensors, converted to FP32).
// Every main-model tensor must be present with the model's shape; the MTP layers must be all present or all
// absent (absent: they keep their fresh initialization, which a returned note says); a tensor the model has no
// place for is an error. Nothing is written unless everything checked out. Returns notes for the user.
std::vector<std::string> load_hf_weights(const HfCheckpoint& hf, TrainableModel& model, const model::ModelConfig& c);

}  // namespace fp8train::train
