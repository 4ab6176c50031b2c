#include "train/hf_format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "common/error.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/tokenizer.h"
#include "train/tokenizer_hf.h"

namespace fp8train::train {
namespace {

namespace fs = std::filesystem;

// Block-internal names: fp8train suffix → Hugging Face suffix (a block's experts are mapped by index below).
const std::vector<std::pair<std::string, std::string>>& block_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
      {"attn.q_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
      {"attn.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn.kv_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attn.wkv_b.weight", "self_attn.kv_b_proj.weight"},
      {"attn.wo.weight", "self_attn.o_proj.weight"},
      {"ffn.w1.weight", "mlp.gate_proj.weight"},
      {"ffn.w2.weight", "mlp.down_proj.weight"},
      {"ffn.w3.weight", "mlp.up_proj.weight"},
      {"moe.gate.weight", "mlp.gate.weight"},
      {"moe.gate.bias", "mlp.gate.e_score_correction_bias"},
      {"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
      {"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
  };
  return names;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// "12.rest" → 12 and "rest"; false when `s` does not start with a number and a dot.
bool split_index(const std::string& s, int64_t* index, std::string* rest) {
  const size_t dot = s.find('.');
  if (dot == 0 || dot == std::string::npos) return false;
  for (size_t i = 0; i < dot; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  *index = std::stoll(s.substr(0, dot));
  *rest = s.substr(dot + 1);
  return true;
}

// The Hugging Face suffix of a block-internal fp8train suffix, or "" when unknown.
std::string hf_block_suffix(const std::string& suffix) {
  for (const auto& [ours, theirs] : block_names())
    if (suffix == ours) return theirs;
  int64_t e = 0;
  std::string rest;
  if (starts_with(suffix, "moe.experts.") && split_index(suffix.substr(12), &e, &rest)) {
    if (rest == "w1.weight") return fmt::format("mlp.experts.{}.gate_proj.weight", e);
    if (rest == "w2.weight") return fmt::format("mlp.experts.{}.down_proj.weight", e);
    if (rest == "w3.weight") return fmt::format("mlp.experts.{}.up_proj.weight", e);
  }
  return "";
}

bool is_eh_proj(const std::string& name) {
  int64_t k = 0;
  std::string rest;
  return starts_with(name, "mtp.") && split_index(name.substr(4), &k, &rest) && rest == "eh_proj.weight";
}

// [rows, 2·half] → the two column halves swapped (its own inverse): the MTP projection's input order.
StTensor swap_column_halves(const StTensor& t) {
  FP8T_CHECK(t.shape.size() == 2 && t.shape[1] % 2 == 0, "'{}' has shape [{}], not [d, 2·d]", t.name,
             fmt::join(t.shape, ", "));
  StTensor out = t;
  const size_t elem = st_dtype_size(t.dtype);
  const size_t half = static_cast<size_t>(t.shape[1] / 2) * elem;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    const size_t row = static_cast<size_t>(r) * 2 * half;
    std::memcpy(out.data.data() + row, t.data.data() + row + half, half);
    std::memcpy(out.data.data() + row + half, t.data.data() + row, half);
  }
  return out;
}

// A JSON value as T, with the key named when it has another type.
template <typename T>
T hf_get(const nlohmann::json& j, const std::string& key, const T& fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const nlohmann::json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    FP8T_CHECK(v.is_boolean(), "{}: '{}' must be true or false, got {}", where, key, v.dump());
  } else if constexpr (std::is_integral_v<T>) {
    FP8T_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", where, key, v.dump());
  } else if constexpr (std::is_floating_point_v<T>) {
    FP8T_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", where, key, v.dump());
  } else {
    FP8T_CHECK(v.is_string(), "{}: '{}' must be a string, got {}", where, key, v.dump());
  }
  return v.get<T>();
}

}  // namespace

std::string hf_tensor_name(const std::string& name, int64_t n_layers) {
  if (name == "embed.weight") return "model.embed_tokens.weight";
  if (name == "norm.weight") return "model.norm.weight";
  if (name == "head.weight") return "lm_head.weight";
  int64_t i = 0;
  std::string rest;
  if (starts_with(name, "layers.") && split_index(name.substr(7), &i, &rest)) {
    const std::string s = hf_block_suffix(rest);
    if (!s.empty()) return fmt::format("model.layers.{}.{}", i, s);
  }
  if (starts_with(name, "mtp.") && split_index(name.substr(4), &i, &rest)) {
    const int64_t layer = n_layers + i;
    if (rest == "enorm.weight" || rest == "hnorm.weight" || rest == "eh_proj.weight")
      return fmt::format("model.layers.{}.{}", layer, rest);
    if (rest == "norm.weight") return fmt::format("model.layers.{}.shared_head.norm.weight", layer);
    if (starts_with(rest, "block.")) {
      const std::string s = hf_block_suffix(rest.substr(6));
      if (!s.empty()) return fmt::format("model.layers.{}.{}", layer, s);
    }
  }
  FP8T_FAIL("no Hugging Face name for the tensor '{}'", name);
}

nlohmann::ordered_json hf_config_json(const model::ModelConfig& c, int64_t max_positions) {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  j["model_type"] = "deepseek_v3";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.n_layers;
  j["first_k_dense_replace"] = c.n_dense_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_heads;  // MLA: every head has its own keys and values
  j["q_lora_rank"] = c.q_lora_rank;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["head_dim"] = c.qk_rope_head_dim;  // what transformers' RoPE reads as its dimension
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["topk_method"] = "noaux_tc";
  j["scoring_func"] = "sigmoid";
  j["norm_topk_prob"] = true;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["moe_layer_freq"] = 1;
  j["num_nextn_predict_layers"] = c.mtp_depth;
  j["num_mtp_layers"] = c.mtp_depth;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  j["rope_scaling"] = nullptr;
  j["rope_interleave"] = true;  // RoPE on interleaved pairs (2i, 2i+1), as DeepSeek's reference and fp8train
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["max_position_embeddings"] = max_positions;
  j["initializer_range"] = c.init_std;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["bos_token_id"] = kBos;
  j["eos_token_id"] = kEos;
  j["pad_token_id"] = kPad;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  j["dtype"] = "float32";
  return j;
}

nlohmann::json model_section_from_hf_config(const nlohmann::json& hf, const std::string& where) {
  FP8T_CHECK(hf.is_object(), "{}: config.json is not a JSON object", where);
  const std::string type = hf_get<std::string>(hf, "model_type", "", where);
  FP8T_CHECK(type == "deepseek_v3",
             "{}: model_type is '{}'; fp8train trains the DeepSeek-V3 architecture only (model_type 'deepseek_v3')",
             where, type);
  FP8T_CHECK(!hf.contains("quantization_config") || hf["quantization_config"].is_null(),
             "{}: the weights are quantized ('quantization_config'); convert them to BF16 or FP32 first", where);
  // What the model cannot represent: refuse rather than load it wrong.
  if (hf.contains("rope_scaling") && !hf["rope_scaling"].is_null()) {
    const nlohmann::json& s = hf["rope_scaling"];
    const std::string kind = s.is_object() ? s.value("rope_type", s.value("type", std::string("?"))) : s.dump();
    FP8T_CHECK(kind == "default", "{}: rope_scaling '{}' (e.g. YaRN) is not supported: fp8train's RoPE is unscaled",
               where, kind);
  }
  double rope_theta = hf_get<double>(hf, "rope_theta", 10000.0, where);
  if (hf.contains("rope_parameters") && hf["rope_parameters"].is_object()) {
    const nlohmann::json& p = hf["rope_parameters"];
    const std::string kind = p.value("rope_type", std::string("default"));
    FP8T_CHECK(kind == "default",
               "{}: rope_parameters.rope_type '{}' (e.g. YaRN) is not supported: fp8train's RoPE "
               "is unscaled",
               where, kind);
    rope_theta = hf_get<double>(p, "rope_theta", rope_theta, where);
  }
  FP8T_CHECK(hf_get<bool>(hf, "rope_interleave", true, where),
             "{}: rope_interleave false (RoPE on split halves) is not supported: fp8train rotates interleaved pairs",
             where);
  const std::string scoring = hf_get<std::string>(hf, "scoring_func", "sigmoid", where);
  FP8T_CHECK(scoring == "sigmoid", "{}: scoring_func '{}' is not supported: fp8train's router scores are sigmoid",
             where, scoring);
  const std::string topk_method = hf_get<std::string>(hf, "topk_method", "noaux_tc", where);
  FP8T_CHECK(topk_method == "noaux_tc",
             "{}: topk_method '{}' is not supported: fp8train routes by sigmoid score + bias (noaux_tc)", where,
             topk_method);
  FP8T_CHECK(hf_get<bool>(hf, "norm_topk_prob", true, where),
             "{}: norm_topk_prob false is not supported: fp8train normalizes the top-k gates", where);
  FP8T_CHECK(hf.contains("q_lora_rank") && !hf["q_lora_rank"].is_null(),
             "{}: q_lora_rank is null (no query compression), which fp8train's MLA does not support", where);
  const std::string act = hf_get<std::string>(hf, "hidden_act", "silu", where);
  FP8T_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (SwiGLU uses silu)", where, act);
  FP8T_CHECK(!hf_get<bool>(hf, "attention_bias", false, where),
             "{}: attention_bias true is not supported: fp8train's projections have no bias", where);
  FP8T_CHECK(hf_get<int64_t>(hf, "moe_layer_freq", 1, where) == 1,
             "{}: moe_layer_freq other than 1 is not supported: every layer after the dense ones is MoE", where);
  const int64_t heads = hf_get<int64_t>(hf, "num_attention_heads", 128, where);
  FP8T_CHECK(hf_get<int64_t>(hf, "num_key_value_heads", heads, where) == heads,
             "{}: num_key_value_heads must equal num_attention_heads ({}) in MLA", where, heads);
  const int64_t mtp = hf.contains("num_nextn_predict_layers")
                          ? hf_get<int64_t>(hf, "num_nextn_predict_layers", 0, where)
                          : hf_get<int64_t>(hf, "num_mtp_layers", 0, where);

  nlohmann::json m;
  m["vocab_size"] = hf_get<int64_t>(hf, "vocab_size", 129280, where);
  m["hidden_size"] = hf_get<int64_t>(hf, "hidden_size", 7168, where);
  m["intermediate_size"] = hf_get<int64_t>(hf, "intermediate_size", 18432, where);
  m["moe_intermediate_size"] = hf_get<int64_t>(hf, "moe_intermediate_size", 2048, where);
  m["n_layers"] = hf_get<int64_t>(hf, "num_hidden_layers", 61, where);
  m["n_dense_layers"] = hf_get<int64_t>(hf, "first_k_dense_replace", 3, where);
  m["n_heads"] = heads;
  m["q_lora_rank"] = hf_get<int64_t>(hf, "q_lora_rank", 1536, where);
  m["kv_lora_rank"] = hf_get<int64_t>(hf, "kv_lora_rank", 512, where);
  m["qk_nope_head_dim"] = hf_get<int64_t>(hf, "qk_nope_head_dim", 128, where);
  m["qk_rope_head_dim"] = hf_get<int64_t>(hf, "qk_rope_head_dim", 64, where);
  m["v_head_dim"] = hf_get<int64_t>(hf, "v_head_dim", 128, where);
  m["n_routed_experts"] = hf_get<int64_t>(hf, "n_routed_experts", 256, where);
  m["n_shared_experts"] = hf_get<int64_t>(hf, "n_shared_experts", 1, where);
  m["num_experts_per_tok"] = hf_get<int64_t>(hf, "num_experts_per_tok", 8, where);
  m["n_group"] = hf_get<int64_t>(hf, "n_group", 8, where);
  m["topk_group"] = hf_get<int64_t>(hf, "topk_group", 4, where);
  m["routed_scaling_factor"] = hf_get<double>(hf, "routed_scaling_factor", 2.5, where);
  m["mtp_depth"] = mtp;
  m["rope_theta"] = rope_theta;
  m["rms_norm_eps"] = hf_get<double>(hf, "rms_norm_eps", 1e-6, where);
  m["tie_embeddings"] = hf_get<bool>(hf, "tie_word_embeddings", false, where);
  if (hf.contains("initializer_range") && !hf["initializer_range"].is_null())
    m["init_std"] = hf_get<double>(hf, "initializer_range", 0.02, where);
  return m;
}

StFile hf_weights_from_master(const StFile& master, const model::ModelConfig& c) {
  StFile out;
  out.metadata["format"] = "pt";  // transformers reads safetensors files marked as PyTorch's
  for (const StTensor& t : master.tensors) {
    StTensor h = is_eh_proj(t.name) ? swap_column_halves(t) : t;
    h.name = hf_tensor_name(t.name, c.n_layers);
    out.tensors.push_back(std::move(h));
  }
  // The release stores each MTP layer's copies of the shared embedding and output head.
  const StTensor& embed = master.get("embed.weight", "master.safetensors");
  const StTensor& head = c.tie_embeddings ? embed : master.get("head.weight", "master.safetensors");
  for (int64_t k = 0; k < c.mtp_depth; ++k) {
    StTensor e = embed;
    e.name = fmt::format("model.layers.{}.embed_tokens.weight", c.n_layers + k);
    StTensor h = head;
    h.name = fmt::format("model.layers.{}.shared_head.head.weight", c.n_layers + k);
    out.tensors.push_back(std::move(e));
    out.tensors.push_back(std::move(h));
  }
  return out;
}

std::string export_hf(const std::string& checkpoint, const std::string& out_dir, bool ema) {
  FP8T_CHECK(!out_dir.empty(), "export: --out is empty");
  std::error_code ec;
  FP8T_CHECK(!fs::exists(out_dir, ec), "export: '{}' already exists; choose another --out or remove it", out_dir);
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(checkpoint), CheckpointUse::Inference);
  FP8T_CHECK(meta.config.contains("model") && meta.config["model"].is_object(),
             "checkpoint '{}': config.json has no model section", meta.dir);
  const model::ModelConfig c = model::model_config_from_json(meta.config["model"]);
  c.validate();
  const int64_t group_size = c.n_routed_experts / c.n_group;
  FP8T_CHECK(c.n_dense_layers == c.n_layers || group_size >= 2,
             "checkpoint '{}': groups of {} expert (n_group {}), but transformers' router scores a group by its two "
             "best experts, so it needs at least 2 experts per group",
             meta.dir, group_size, c.n_group);
  int64_t seq_len = 4096;
  if (meta.config.contains("train") && meta.config["train"].contains("seq_len"))
    seq_len = meta.config["train"]["seq_len"].get<int64_t>();
  // The master weights, or the weight EMA (ema.safetensors: F32 under the same parameter names).
  FP8T_CHECK(!ema || checkpoint_has_ema(meta),
             "export --ema: checkpoint '{}' holds no weight EMA (train with --ema-decay to keep one)", meta.dir);
  const StFile master =
      read_safetensors((fs::path(meta.dir) / (ema ? "ema.safetensors" : "master.safetensors")).string());
  const StFile weights = hf_weights_from_master(master, c);

  nlohmann::ordered_json gen;
  gen["bos_token_id"] = kBos;
  gen["eos_token_id"] = kEos;
  gen["pad_token_id"] = kPad;
  gen["do_sample"] = true;  // fp8train generate's defaults
  gen["temperature"] = 0.8;
  gen["top_k"] = 40;

  const fs::path final_dir(out_dir);
  if (final_dir.has_parent_path()) fs::create_directories(final_dir.parent_path());
  const fs::path tmp = fs::path(out_dir + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<std::string> tokenizer_files;
  try {
    write_safetensors((tmp / "model.safetensors").string(), weights);
    write_file_atomic((tmp / "config.json").string(), hf_config_json(c, seq_len).dump(2) + "\n");
    write_file_atomic((tmp / "generation_config.json").string(), gen.dump(2) + "\n");
    // The tokenizer saved with the checkpoint, as Hugging Face files (train/tokenizer_hf.h: loadable by
    // AutoTokenizer), so they land atomically with the weights.
    tokenizer_files = write_hf_tokenizer_files(*checkpoint_tokenizer(meta), tmp.string());
    fsync_directory(tmp.string());
    fs::rename(tmp, final_dir);
    fsync_directory(final_dir.has_parent_path() ? final_dir.parent_path().string() : ".");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  std::string summary =
      fmt::format("exported {} (step {}) to {}: {} tensors, config.json, generation_config.json, {}", meta.dir,
                  meta.state.step, out_dir, weights.tensors.size(), fmt::join(tokenizer_files, ", "));
  if (c.rms_norm_eps != 1e-6)  // transformers' q/kv compression norms use 1e-6 whatever the config says
    summary += fmt::format(
        "\nnote: rms_norm_eps is {}, but transformers normalizes the MLA compressions with 1e-6, "
        "so its outputs differ slightly from fp8train's",
        c.rms_norm_eps);
  return summary;
}

HfCheckpoint read_hf_checkpoint(const std::string& dir) {
  HfCheckpoint hf;
  hf.dir = dir;
  const std::string where = fmt::format("Hugging Face directory '{}'", dir);
  const fs::path root(dir);
  FP8T_CHECK(fs::is_directory(root), "{} does not exist or is not a directory", where);
  const fs::path config_path = root / "config.json";
  FP8T_CHECK(fs::exists(config_path), "{} has no config.json", where);
  try {
    hf.config = nlohmann::json::parse(read_file(config_path.string()));
  } catch (const nlohmann::json::exception& e) {
    FP8T_FAIL("{}: config.json is not valid JSON ({})", where, e.what());
  }
  hf.model_section = model_section_from_hf_config(hf.config, where);
  std::vector<std::string> files;
  const fs::path index = root / "model.safetensors.index.json";
  if (fs::exists(index)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index.string()));
    } catch (const nlohmann::json::exception& e) {
      FP8T_FAIL("{}: model.safetensors.index.json is not valid JSON ({})", where, e.what());
    }
    FP8T_CHECK(j.contains("weight_map") && j["weight_map"].is_object(),
               "{}: model.safetensors.index.json has no weight_map object", where);
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      FP8T_CHECK(file.is_string(), "{}: weight_map entry '{}' is not a file name", where, name);
      const std::string f = file.get<std::string>();
      FP8T_CHECK(f.find('/') == std::string::npos && f.find("..") == std::string::npos,
                 "{}: weight_map names the file '{}' outside the directory", where, f);
      shards.insert(f);
    }
    files.assign(shards.begin(), shards.end());
  } else {
    FP8T_CHECK(fs::exists(root / "model.safetensors"),
               "{} has neither model.safetensors nor "
               "model.safetensors.index.json",
               where);
    files.push_back("model.safetensors");
  }
  std::set<std::string> seen;
  for (const std::string& f : files) {
    StFile part = read_safetensors((root / f).string());
    for (StTensor& t : part.tensors) {
      FP8T_CHECK(seen.insert(t.name).second, "{}: tensor '{}' appears in two files", where, t.name);
      hf.tensors.push_back(std::move(t));
    }
  }
  return hf;
}

std::vector<std::string> load_hf_weights(const HfCheckpoint& hf, TrainableModel& model, const model::ModelConfig& c) {
  const std::string where = fmt::format("Hugging Face directory '{}'", hf.dir);
  std::map<std::string, const StTensor*> by_name;
  for (const StTensor& t : hf.tensors) by_name[t.name] = &t;

  // Destinations: every parameter view and state buffer of the model, under its Hugging Face name.
  struct Dest {
    std::string ours, theirs;
    Tensor value;
  };
  std::vector<Dest> dests;
  const optim::ParamArenas& params = model.parameters();
  const ArenaLayout& layout = params.layout();
  for (size_t i = 0; i < layout.views().size(); ++i) {
    const std::string& name = layout.view(i).name;
    dests.push_back({name, hf_tensor_name(name, c.n_layers), params.values.view(i)});
  }
  for (const NamedTensor& b : model.state()) dests.push_back({b.name, hf_tensor_name(b.name, c.n_layers), b.value});

  // The MTP layers: all present or all absent.
  size_t mtp_total = 0, mtp_found = 0;
  for (const Dest& d : dests)
    if (starts_with(d.ours, "mtp.")) {
      ++mtp_total;
      mtp_found += by_name.count(d.theirs);
    }
  const bool mtp_absent = mtp_total > 0 && mtp_found == 0;

  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, host FP32 source)
  std::set<std::string> used;
  for (const Dest& d : dests) {
    if (mtp_absent && starts_with(d.ours, "mtp.")) continue;
    const auto it = by_name.find(d.theirs);
    FP8T_CHECK(it != by_name.end(), "{} has no tensor '{}' (fp8train's '{}')", where, d.theirs, d.ours);
    const StTensor& t = *it->second;
    FP8T_CHECK(t.dtype == StDtype::F32 || t.dtype == StDtype::BF16,
               "{}: '{}' is {}; fp8train reads F32 or BF16 weights", where, t.name, st_dtype_name(t.dtype));
    FP8T_CHECK(t.shape == d.value.shape(),
               "{}: '{}' has shape [{}], the model's '{}' is [{}] (do flags or a config file change the model?)", where,
               t.name, fmt::join(t.shape, ", "), d.ours, fmt::join(d.value.shape(), ", "));
    std::vector<float> v = st_to_f32(is_eh_proj(d.ours) ? swap_column_halves(t) : t);
    for (float x : v) FP8T_CHECK(std::isfinite(x), "{}: '{}' holds a non-finite value", where, t.name);
    copies.emplace_back(d.value, Tensor::from_vector(v, t.shape, MemCategory::Workspace, Device::cpu()));
    used.insert(t.name);
  }
  // The MTP layers' copies of the shared embedding and head carry nothing of their own (fp8train shares them).
  for (int64_t k = 0; k < c.mtp_depth; ++k) {
    used.insert(fmt::format("model.layers.{}.embed_tokens.weight", c.n_layers + k));
    used.insert(fmt::format("model.layers.{}.shared_head.head.weight", c.n_layers + k));
  }
  // A model holding a shard of the routed experts (expert parallelism) takes only its own experts.
  const bool expert_shard = !params.experts.empty();
  for (const StTensor& t : hf.tensors)
    FP8T_CHECK(used.count(t.name) || (expert_shard && t.name.find(".mlp.experts.") != std::string::npos),
               "{}: tensor '{}' has no place in fp8train's model (another architecture, or "
               "more MTP layers than model.mtp_depth?)",
               where, t.name);
  for (auto& [dst, src] : copies) dst.copy_from(src);
  model.parameters_changed();
  std::vector<std::string> notes;
  if (mtp_absent)
    notes.push_back(fmt::format("{} has no MTP layer weights: the {} MTP module(s) start from a fresh initialization",
                                where, c.mtp_depth));
  return notes;
}

}  // namespace fp8train::train
