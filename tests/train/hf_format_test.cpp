// The Hugging Face format (train/hf_format.h): the names of DeepSeek-V3's release; export → read → load into a
// freshly built model gives back every master weight and router bias bit for bit (MTP eh_proj halves swapped in
// the file and back); the config round-trips; what the model cannot represent is refused naming the key; a file
// with a missing, misshapen or foreign tensor is refused without touching the model; absent MTP layers are a note.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "model/config.h"
#include "train/atomic_file.h"
#include "train/hf_format.h"
#include "train/model_adapter.h"
#include "train/safetensors.h"

using namespace fp8train;
using namespace fp8train::train;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("fp8train-hf-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

model::ModelConfig small_config(bool tie) {
  model::ModelConfig c = model::tiny_test_config();  // 1 dense + 1 MoE block, 8 experts in 4 groups, MTP 1
  c.tie_embeddings = tie;
  return c;
}

// master.safetensors of a model: every parameter view and state buffer, FP32, under fp8train's names.
StFile master_of(DeepSeekTrainable& m) {
  StFile f;
  const optim::ParamArenas& p = m.parameters();
  for (size_t i = 0; i < p.layout().views().size(); ++i) {
    const std::vector<float> v = p.values.view(i).to_vector<float>();
    f.tensors.push_back(st_from_f32(p.layout().view(i).name, p.layout().view(i).shape, v.data()));
  }
  for (const NamedTensor& b : m.state()) {
    const std::vector<float> v = b.value.to_vector<float>();
    f.tensors.push_back(st_from_f32(b.name, b.value.shape(), v.data()));
  }
  return f;
}

// Sets the router biases to distinct non-zero values (a fresh model's are zero).
void set_biases(DeepSeekTrainable& m) {
  float x = 0.01f;
  for (const NamedTensor& b : m.state()) {
    std::vector<float> v(static_cast<size_t>(b.value.numel()));
    for (float& e : v) e = (x += 0.003f);
    Tensor dst = b.value;  // shares the model's storage
    dst.copy_from(Tensor::from_vector(v, b.value.shape()));
  }
}

// Writes an HF directory of `c` with the given tensors.
void write_hf(const fs::path& dir, const model::ModelConfig& c, const StFile& weights) {
  fs::create_directories(dir);
  write_file_atomic((dir / "config.json").string(), hf_config_json(c, 64).dump(2));
  write_safetensors((dir / "model.safetensors").string(), weights);
}

bool same_bits(const StFile& a, const StFile& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (const StTensor& t : a.tensors) {
    const StTensor* u = b.find(t.name);
    if (u == nullptr || u->shape != t.shape || u->data != t.data) return false;
  }
  return true;
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(HfFormat, NamesFollowTheRelease) {
  EXPECT_EQ(hf_tensor_name("embed.weight", 2), "model.embed_tokens.weight");
  EXPECT_EQ(hf_tensor_name("head.weight", 2), "lm_head.weight");
  EXPECT_EQ(hf_tensor_name("layers.0.attn.wkv_a.weight", 2), "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(hf_tensor_name("layers.1.moe.gate.bias", 2), "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(hf_tensor_name("layers.1.moe.experts.7.w3.weight", 2), "model.layers.1.mlp.experts.7.up_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.0.ffn.w2.weight", 2), "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("mtp.0.eh_proj.weight", 61), "model.layers.61.eh_proj.weight");
  EXPECT_EQ(hf_tensor_name("mtp.0.norm.weight", 61), "model.layers.61.shared_head.norm.weight");
  EXPECT_EQ(hf_tensor_name("mtp.1.block.attn.q_norm.weight", 61), "model.layers.62.self_attn.q_a_layernorm.weight");
  expect_error([] { hf_tensor_name("layers.0.attn.bogus.weight", 2); }, "no Hugging Face name");
}

TEST(HfFormat, RoundTripIsBitExact) {
  for (bool tie : {false, true}) {
    const model::ModelConfig c = small_config(tie);
    DeepSeekTrainable a(c, 11, "fp32");
    set_biases(a);
    const StFile master = master_of(a);
    TempDir dir(tie ? "tied" : "untied");
    const StFile weights = hf_weights_from_master(master, c);
    // eh_proj: the release's column order, [embedding half; hidden half].
    const StTensor& ours = master.get("mtp.0.eh_proj.weight", "master");
    const StTensor& theirs = weights.get(fmt::format("model.layers.{}.eh_proj.weight", c.n_layers), "hf");
    const size_t half = static_cast<size_t>(c.hidden_size) * 4;
    EXPECT_EQ(theirs.data.substr(0, half), ours.data.substr(half, half));
    EXPECT_EQ(theirs.data.substr(half, half), ours.data.substr(0, half));
    EXPECT_EQ(weights.find("lm_head.weight") != nullptr, !tie);
    write_hf(dir.path, c, weights);

    const HfCheckpoint hf = read_hf_checkpoint(dir.path.string());
    model::ModelConfig back = model::model_config_from_json(hf.model_section);
    // Training settings (the balance loss weight, the bias speed, λ) are not the architecture's: not in the file.
    back.seq_aux_loss_alpha = c.seq_aux_loss_alpha;
    EXPECT_EQ(model::to_json(back), model::to_json(c));
    DeepSeekTrainable b(back, 12, "fp32");  // another seed: every weight differs until loaded
    EXPECT_FALSE(same_bits(master_of(b), master));
    EXPECT_TRUE(load_hf_weights(hf, b, back).empty());
    EXPECT_TRUE(same_bits(master_of(b), master)) << "tie " << tie;
  }
}

TEST(HfFormat, BadTensorsAreRefusedWithoutTouchingTheModel) {
  const model::ModelConfig c = small_config(false);
  DeepSeekTrainable a(c, 11, "fp32");
  const StFile weights = hf_weights_from_master(master_of(a), c);
  auto check = [&](const std::string& name, const std::function<void(StFile&)>& edit, const std::string& needle) {
    TempDir dir(name);
    StFile w = weights;
    edit(w);
    write_hf(dir.path, c, w);
    const HfCheckpoint hf = read_hf_checkpoint(dir.path.string());
    DeepSeekTrainable b(c, 12, "fp32");
    const StFile before = master_of(b);
    expect_error([&] { load_hf_weights(hf, b, c); }, needle);
    EXPECT_TRUE(same_bits(master_of(b), before)) << name;
  };
  check(
      "missing", [](StFile& w) { w.tensors.erase(w.tensors.begin()); }, "has no tensor");
  check(
      "shape",
      [](StFile& w) {
        for (StTensor& t : w.tensors)
          if (t.name == "model.norm.weight") {
            t.shape = {t.shape[0] / 2, 2};
          }
      },
      "has shape");
  check(
      "foreign",
      [&](StFile& w) {
        StTensor t = w.tensors.front();
        t.name = "model.layers.0.self_attn.q_proj.weight";
        w.tensors.push_back(t);
      },
      "has no place");
  check(
      "dtype",
      [](StFile& w) {
        StTensor& t = w.tensors.front();
        t.dtype = StDtype::I32;
      },
      "reads F32 or BF16");
}

TEST(HfFormat, AbsentMtpLayersKeepTheirInitialization) {
  const model::ModelConfig c = small_config(false);
  DeepSeekTrainable a(c, 11, "fp32");
  StFile w = hf_weights_from_master(master_of(a), c);
  const std::string mtp = fmt::format("model.layers.{}.", c.n_layers);
  std::erase_if(w.tensors, [&](const StTensor& t) { return t.name.rfind(mtp, 0) == 0; });
  TempDir dir("nomtp");
  write_hf(dir.path, c, w);
  DeepSeekTrainable b(c, 12, "fp32");
  const std::vector<std::string> notes = load_hf_weights(read_hf_checkpoint(dir.path.string()), b, c);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no MTP layer weights"), std::string::npos);
  const StFile got = master_of(b), want = master_of(a);
  EXPECT_EQ(got.get("layers.1.attn.wq_a.weight", "b").data, want.get("layers.1.attn.wq_a.weight", "a").data);
  EXPECT_NE(got.get("mtp.0.eh_proj.weight", "b").data, want.get("mtp.0.eh_proj.weight", "a").data);
}

TEST(HfFormat, ConfigsTheModelCannotRepresentAreRefused) {
  const nlohmann::json good = hf_config_json(small_config(false), 64);
  EXPECT_NO_THROW(model_section_from_hf_config(good, "x"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
    nlohmann::json j = good;
    edit(j);
    expect_error([&] { model_section_from_hf_config(j, "x"); }, needle);
  };
  refused([](nlohmann::json& j) { j["model_type"] = "llama"; }, "model_type is 'llama'");
  refused([](nlohmann::json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}}; }, "rope_scaling 'yarn'");
  refused([](nlohmann::json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}}; }, "'yarn'");
  refused([](nlohmann::json& j) { j["scoring_func"] = "softmax"; }, "scoring_func 'softmax'");
  refused([](nlohmann::json& j) { j["q_lora_rank"] = nullptr; }, "q_lora_rank is null");
  refused([](nlohmann::json& j) { j["norm_topk_prob"] = false; }, "norm_topk_prob");
  refused([](nlohmann::json& j) { j["rope_interleave"] = false; }, "rope_interleave");
  refused([](nlohmann::json& j) { j["topk_method"] = "greedy"; }, "topk_method 'greedy'");
  refused([](nlohmann::json& j) { j["num_key_value_heads"] = 1; }, "num_key_value_heads");
  refused([](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "fp8"}}; }, "quantized");
  refused([](nlohmann::json& j) { j["hidden_size"] = "wide"; }, "'hidden_size' must be an integer");
}

TEST(HfFormat, ReadRefusesBrokenDirectories) {
  TempDir dir("broken");
  expect_error([&] { read_hf_checkpoint((dir.path / "nope").string()); }, "does not exist");
  expect_error([&] { read_hf_checkpoint(dir.path.string()); }, "has no config.json");
  std::ofstream(dir.path / "config.json") << "{not json";
  expect_error([&] { read_hf_checkpoint(dir.path.string()); }, "not valid JSON");
  std::ofstream(dir.path / "config.json") << hf_config_json(small_config(false), 64).dump();
  expect_error([&] { read_hf_checkpoint(dir.path.string()); }, "neither model.safetensors");
  std::ofstream(dir.path / "model.safetensors") << "truncated";
  EXPECT_THROW(read_hf_checkpoint(dir.path.string()), Error);
}
