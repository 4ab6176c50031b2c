// Checkpoint writing and reading (layout and guarantees in checkpoint.h).
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "numerics/formats.h"
#include "train/atomic_file.h"
#include "train/safetensors.h"

namespace fp8train::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "fp8train-checkpoint-1";
const char* const kDataFiles[] = {"model.safetensors", "master.safetensors", "optimizer.safetensors", "config.json"};

std::string step_name(int64_t step) { return fmt::format("step-{:08d}", step); }

nlohmann::json state_to_json(const TrainerState& s) {
  return {{"step", s.step},
          {"tokens_seen", s.tokens_seen},
          {"sampler", {{"rng_state", s.sampler.rng_state}, {"windows_drawn", s.sampler.windows_drawn}}},
          {"skipped_steps", s.skipped_steps},
          {"bad_in_row", s.bad_in_row},
          {"wall_seconds", s.wall_seconds},
          {"recent_losses", s.recent_losses},
          {"memory", s.memory},
          {"data_fingerprint", s.data_fingerprint}};
}

TrainerState state_from_json(const nlohmann::json& j) {
  TrainerState s;
  s.step = j.at("step").get<int64_t>();
  s.tokens_seen = j.at("tokens_seen").get<int64_t>();
  s.sampler.rng_state = j.at("sampler").at("rng_state").get<uint64_t>();
  s.sampler.windows_drawn = j.at("sampler").at("windows_drawn").get<int64_t>();
  s.skipped_steps = j.at("skipped_steps").get<int64_t>();
  s.bad_in_row = j.at("bad_in_row").get<int64_t>();
  FP8T_CHECK(s.step >= 0 && s.tokens_seen >= 0 && s.sampler.windows_drawn >= 0 && s.skipped_steps >= 0 &&
                 s.bad_in_row >= 0,
             "negative counter");
  // The history fields came later: a checkpoint without them is valid (its summary then covers the resumed part).
  s.wall_seconds = j.value("wall_seconds", 0.0);
  if (j.contains("recent_losses")) s.recent_losses = j.at("recent_losses").get<std::vector<double>>();
  if (j.contains("memory") && j.at("memory").is_object()) s.memory = j.at("memory");
  s.data_fingerprint = j.value("data_fingerprint", std::string());
  FP8T_CHECK(std::isfinite(s.wall_seconds) && s.wall_seconds >= 0 && s.recent_losses.size() <= 10,
             "bad history field");
  return s;
}

void write_durable(const fs::path& path, std::string_view bytes) { write_file_atomic(path.string(), bytes); }

}  // namespace

std::string fnv1a64_hex(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

std::string save_checkpoint(const std::string& run_dir, const CheckpointWrite& what) {
  FP8T_CHECK(what.config && what.model && what.optimizer, "save_checkpoint: config, model and optimizer are required");
  const fs::path checkpoints = fs::path(run_dir) / "checkpoints";
  fs::create_directories(checkpoints);
  // Leftovers of writers that were killed: never referenced by "latest", safe to delete.
  for (const auto& entry : fs::directory_iterator(checkpoints))
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) fs::remove_all(entry.path());

  const std::string name = step_name(what.state.step);
  const fs::path tmp = checkpoints / (name + ".tmp-" + std::to_string(::getpid()));
  fs::create_directories(tmp);

  TrainableModel& model = *what.model;
  const optim::ParamList params = model.parameters();
  const std::vector<NamedShape> shapes = model.parameter_shapes();
  FP8T_CHECK(shapes.size() == params.size(), "model lists {} parameters but {} shapes", params.size(), shapes.size());
  const std::vector<StateBuffer> buffers = model.state();

  StFile weights, master, optimizer;
  const std::string step_text = std::to_string(what.state.step);
  weights.metadata = {{"format", "pt"}, {"fp8train_step", step_text}, {"fp8train_config", what.config->dump()}};
  master.metadata = {{"format", "pt"}, {"fp8train_step", step_text}};
  for (size_t i = 0; i < params.size(); ++i) {
    const optim::ParamBuffer& p = params[i];
    master.tensors.push_back(st_from_f32(p.name, shapes[i].shape, p.value));
    if (what.bf16_weights) {
      std::vector<uint16_t> codes(p.size);
      for (size_t e = 0; e < p.size; ++e) codes[e] = num::bf16_encode(p.value[e]);
      weights.tensors.push_back(st_from_bf16_codes(p.name, shapes[i].shape, codes.data()));
    } else {
      weights.tensors.push_back(st_from_f32(p.name, shapes[i].shape, p.value));
    }
  }
  for (const StateBuffer& b : buffers) {
    weights.tensors.push_back(st_from_f32(b.name, b.shape, b.data));
    master.tensors.push_back(st_from_f32(b.name, b.shape, b.data));
  }
  const optim::AdamW& opt = *what.optimizer;
  optimizer.metadata = {{"step_count", std::to_string(opt.step_count())},
                        {"moment_dtype", optim::moment_dtype_name(opt.config().moment_dtype)}};
  for (size_t i = 0; i < opt.state().size(); ++i) {
    const optim::MomentState& s = opt.state()[i];
    if (opt.config().moment_dtype == optim::MomentDtype::BF16) {
      optimizer.tensors.push_back(st_from_bf16_codes("exp_avg." + s.name, shapes[i].shape, s.m_bf16.data()));
      optimizer.tensors.push_back(st_from_bf16_codes("exp_avg_sq." + s.name, shapes[i].shape, s.v_bf16.data()));
    } else {
      optimizer.tensors.push_back(st_from_f32("exp_avg." + s.name, shapes[i].shape, s.m_f32.data()));
      optimizer.tensors.push_back(st_from_f32("exp_avg_sq." + s.name, shapes[i].shape, s.v_f32.data()));
    }
  }

  nlohmann::json files = nlohmann::json::object();
  const auto put = [&](const char* file, const std::string& bytes) {
    write_durable(tmp / file, bytes);
    files[file] = {{"bytes", bytes.size()}, {"fnv1a64", fnv1a64_hex(bytes)}};
  };
  put("model.safetensors", encode_safetensors(weights));
  put("master.safetensors", encode_safetensors(master));
  put("optimizer.safetensors", encode_safetensors(optimizer));
  put("config.json", what.config->dump(2) + "\n");
  nlohmann::json state = {{"format", kFormat}, {"files", files}};
  state.update(state_to_json(what.state));
  write_durable(tmp / "state.json", state.dump(2) + "\n");
  fsync_directory(tmp.string());

  const fs::path final_dir = checkpoints / name;
  if (fs::exists(final_dir)) {  // re-saving a step (e.g. after a resume): move the old one aside first
    const fs::path old = checkpoints / (name + ".tmp-old-" + std::to_string(::getpid()));
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_directory(checkpoints.string());
  write_file_atomic((checkpoints / "latest").string(), name + "\n");
  return final_dir.string();
}

std::string resolve_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  FP8T_CHECK(fs::exists(path, ec), "checkpoint '{}' does not exist", path);
  FP8T_CHECK(fs::is_directory(path, ec), "checkpoint '{}' is not a directory", path);
  fs::path p(path);
  if (fs::exists(p / "state.json")) return p.string();
  if (fs::exists(p / "checkpoints")) p /= "checkpoints";
  const fs::path latest = p / "latest";
  FP8T_CHECK(fs::exists(latest), "'{}' holds no checkpoint (no state.json, no checkpoints/latest)", path);
  std::string name = read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  FP8T_CHECK(!name.empty() && name.find('/') == std::string::npos && name.find("..") == std::string::npos,
             "'{}' is corrupted: it does not name a checkpoint directory", latest.string());
  const fs::path dir = p / name;
  FP8T_CHECK(fs::is_directory(dir), "'{}' names '{}', which does not exist", latest.string(), name);
  return dir.string();
}

std::string run_dir_of_checkpoint(const std::string& step_dir) {
  const fs::path parent = fs::path(step_dir).lexically_normal().parent_path();
  return parent.filename() == "checkpoints" ? parent.parent_path().string() : parent.string();
}

CheckpointMeta read_checkpoint_meta(const std::string& step_dir, CheckpointUse use) {
  CheckpointMeta meta;
  meta.dir = step_dir;
  const std::string where = fmt::format("checkpoint '{}'", step_dir);
  const fs::path dir(step_dir);
  FP8T_CHECK(fs::exists(dir / "state.json"), "{} is incomplete: state.json is missing", where);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file((dir / "state.json").string()));
  } catch (const nlohmann::json::parse_error& e) {
    // The parser's own message quotes the bytes it read, which in a corrupt file are binary: give the offset.
    FP8T_FAIL("{} is corrupted: state.json is not valid JSON (at byte {})", where, e.byte);
  }
  FP8T_CHECK(state.is_object() && state.value("format", "") == kFormat,
             "{} is not an fp8train checkpoint (state.json format is not '{}')", where, kFormat);
  try {
    meta.state = state_from_json(state);
    meta.files = state.at("files");
  } catch (const nlohmann::json::exception&) {
    FP8T_FAIL("{} is corrupted: state.json lacks or mangles a field", where);
  } catch (const Error& e) {
    FP8T_FAIL("{} is corrupted: state.json has a {}", where, e.what());
  }
  for (const char* file : kDataFiles) {
    if (use == CheckpointUse::Inference && std::string(file) == "optimizer.safetensors") continue;
    FP8T_CHECK(meta.files.contains(file), "{} is corrupted: state.json does not list {}", where, file);
    const fs::path path = dir / file;
    FP8T_CHECK(fs::exists(path), "{} is incomplete: {} is missing", where, file);
    const std::string bytes = read_file(path.string());
    const uint64_t expected = meta.files[file].value("bytes", uint64_t{0});
    FP8T_CHECK(bytes.size() == expected, "{} is corrupted: {} has {} bytes, {} were written (truncated?)", where, file,
               bytes.size(), expected);
    FP8T_CHECK(fnv1a64_hex(bytes) == meta.files[file].value("fnv1a64", ""),
               "{} is corrupted: {} does not match its recorded checksum", where, file);
    if (std::string(file) == "config.json") {
      try {
        meta.config = nlohmann::json::parse(bytes);
      } catch (const nlohmann::json::parse_error& e) {
        FP8T_FAIL("{} is corrupted: config.json is not valid JSON (at byte {})", where, e.byte);
      }
    }
  }
  return meta;
}

std::vector<std::string> prune_checkpoints(const std::string& run_dir, int64_t keep_last, int64_t keep_every) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  const fs::path checkpoints = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(checkpoints, ec)) return removed;
  std::string latest;
  if (fs::exists(checkpoints / "latest", ec)) {
    latest = read_file((checkpoints / "latest").string());
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == '\r' || latest.back() == ' ')) latest.pop_back();
  }
  std::vector<std::pair<int64_t, std::string>> steps;  // complete checkpoints: "step-" + 8 digits
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.size() < 6 || name.rfind("step-", 0) != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    steps.emplace_back(std::stoll(name.substr(5)), name);
  }
  std::sort(steps.begin(), steps.end());
  const size_t first_kept = steps.size() > static_cast<size_t>(keep_last) ? steps.size() - static_cast<size_t>(keep_last) : 0;
  for (size_t i = 0; i < first_kept; ++i) {
    const auto& [step, name] = steps[i];
    if (name == latest || (keep_every > 0 && step % keep_every == 0)) continue;
    const fs::path doomed = checkpoints / (name + ".tmp-pruned-" + std::to_string(::getpid()));
    fs::rename(checkpoints / name, doomed);
    fs::remove_all(doomed);
    removed.push_back(name);
  }
  if (!removed.empty()) fsync_directory(checkpoints.string());
  return removed;
}

void load_checkpoint(const CheckpointMeta& meta, TrainableModel& model, optim::AdamW* optimizer) {
  const fs::path dir(meta.dir);
  const std::string where = fmt::format("checkpoint '{}'", meta.dir);
  const StFile master = read_safetensors((dir / "master.safetensors").string());
  const optim::ParamList params = model.parameters();
  const std::vector<NamedShape> shapes = model.parameter_shapes();
  const auto load_into = [&](const StTensor& t, const std::vector<int64_t>& shape, float* dst, size_t size) {
    FP8T_CHECK(t.dtype == StDtype::F32, "{}: '{}' is {} in master.safetensors, expected F32", where, t.name,
               st_dtype_name(t.dtype));
    FP8T_CHECK(t.shape == shape, "{}: '{}' has shape [{}], the model's is [{}] (a different model config?)", where,
               t.name, fmt::join(t.shape, ", "), fmt::join(shape, ", "));
    const std::vector<float> v = st_to_f32(t);
    std::copy(v.begin(), v.end(), dst);
    (void)size;
  };
  const std::vector<StateBuffer> buffers = model.state();
  FP8T_CHECK(master.tensors.size() == params.size() + buffers.size(),
             "{}: master.safetensors holds {} tensors, the model has {} parameters and {} state buffers", where,
             master.tensors.size(), params.size(), buffers.size());
  for (size_t i = 0; i < params.size(); ++i)
    load_into(master.get(params[i].name, where + " master.safetensors"), shapes[i].shape, params[i].value,
              params[i].size);
  for (const StateBuffer& b : buffers)
    load_into(master.get(b.name, where + " master.safetensors"), b.shape, b.data, b.size);
  model.parameters_changed();  // the compute copies of the weights follow the loaded masters
  if (optimizer == nullptr) return;

  const StFile opt = read_safetensors((dir / "optimizer.safetensors").string());
  const auto meta_it = opt.metadata.find("step_count");
  FP8T_CHECK(meta_it != opt.metadata.end(), "{}: optimizer.safetensors has no step_count", where);
  const std::string dtype_name = opt.metadata.count("moment_dtype") ? opt.metadata.at("moment_dtype") : "";
  FP8T_CHECK(dtype_name == optim::moment_dtype_name(optimizer->config().moment_dtype),
             "{}: optimizer moments are '{}', the config asks for '{}'", where, dtype_name,
             optim::moment_dtype_name(optimizer->config().moment_dtype));
  std::vector<optim::MomentState> states;
  for (size_t i = 0; i < params.size(); ++i) {
    optim::MomentState s;
    s.name = params[i].name;
    s.size = params[i].size;
    const StTensor& m = opt.get("exp_avg." + s.name, where + " optimizer.safetensors");
    const StTensor& v = opt.get("exp_avg_sq." + s.name, where + " optimizer.safetensors");
    FP8T_CHECK(m.shape == shapes[i].shape && v.shape == shapes[i].shape,
               "{}: optimizer moments of '{}' have the wrong shape", where, s.name);
    if (optimizer->config().moment_dtype == optim::MomentDtype::BF16) {
      s.m_bf16 = st_to_bf16_codes(m);
      s.v_bf16 = st_to_bf16_codes(v);
    } else {
      FP8T_CHECK(m.dtype == StDtype::F32 && v.dtype == StDtype::F32, "{}: moments of '{}' are not F32", where, s.name);
      s.m_f32 = st_to_f32(m);
      s.v_f32 = st_to_f32(v);
    }
    states.push_back(std::move(s));
  }
  int64_t step_count = 0;
  try {
    step_count = std::stoll(meta_it->second);
  } catch (const std::exception&) {
    FP8T_FAIL("{}: optimizer step_count '{}' is not a number", where, meta_it->second);
  }
  optimizer->load_state(std::move(states), step_count);
}

}  // namespace fp8train::train
