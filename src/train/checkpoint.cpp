// Checkpoint writing and reading (layout and guarantees in checkpoint.h).
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>

#include "common/error.h"
#include "dist/zero.h"
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

// A contiguous host copy of a tensor (the tensor itself when it already is one).
Tensor on_host(const Tensor& t) { return t.device().is_cpu() && t.is_contiguous() ? t : t.to(Device::cpu()); }

// A safetensors entry holding a host tensor's elements in its own dtype (F32, or BF16 codes).
StTensor st_from_tensor(const std::string& name, const Tensor& t) {
  if (t.dtype() == DType::BF16) {
    std::vector<uint16_t> codes;
    codes.reserve(static_cast<size_t>(t.numel()));
    const bf16* x = t.data<bf16>();
    for (int64_t i = 0; i < t.numel(); ++i) codes.push_back(x[i].bits);
    return st_from_bf16_codes(name, t.shape(), codes.data());
  }
  FP8T_CHECK(t.dtype() == DType::F32, "checkpoint: '{}' is {}, expected f32 or bf16", name, dtype_name(t.dtype()));
  return st_from_f32(name, t.shape(), t.data<float>());
}

// An F32 host tensor written as BF16 (round to nearest even): the compute weights of the `bf16` recipe.
StTensor st_bf16_from_f32(const std::string& name, const Tensor& t) {
  std::vector<uint16_t> codes;
  codes.reserve(static_cast<size_t>(t.numel()));
  const float* x = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) codes.push_back(num::bf16_encode(x[i]));
  return st_from_bf16_codes(name, t.shape(), codes.data());
}

// A host tensor of a safetensors entry's shape and dtype (F32, or BF16 codes); other dtypes throw.
Tensor host_tensor(const StTensor& t) {
  if (t.dtype == StDtype::BF16) {
    std::vector<bf16> v;
    for (uint16_t code : st_to_bf16_codes(t)) v.push_back(bf16::from_bits(code));
    return Tensor::from_vector(v, t.shape, MemCategory::Workspace, Device::cpu());
  }
  FP8T_CHECK(t.dtype == StDtype::F32, "checkpoint: '{}' is {}, expected F32 or BF16", t.name, st_dtype_name(t.dtype));
  return Tensor::from_vector(st_to_f32(t), t.shape, MemCategory::Workspace, Device::cpu());
}

// The recipe's state (amax histories): F32 or I32 tensors stored as they are.
StTensor st_exact(const std::string& name, const Tensor& host) {
  FP8T_CHECK(host.dtype() == DType::F32 || host.dtype() == DType::I32, "checkpoint: recipe state '{}' is {}", name,
             dtype_name(host.dtype()));
  StTensor t;
  t.name = name;
  t.dtype = host.dtype() == DType::F32 ? StDtype::F32 : StDtype::I32;
  t.shape = host.shape();
  t.data.assign(static_cast<const char*>(host.raw()), host.nbytes());
  return t;
}

constexpr const char* kRecipeStateFile = "recipe_state.safetensors";  // only when the recipe has state
constexpr const char* kEmaFile = "ema.safetensors";                   // only when the run keeps a weight EMA
constexpr const char* kTokenizerFile = "tokenizer.model";             // only with a SentencePiece tokenizer

// What rank 0 writes, gathered from the ranks of the gradient group (host tensors, rank 0 only):
//   m, v: the optimizer's moments over the whole arena (the local-expert prefix left zero with sharded experts);
//   with sharded experts, per EP index e: that shard's expert-prefix master values and moments.
struct Gathered {
  Tensor m, v;
  std::vector<Tensor> expert_values, expert_m, expert_v, expert_ema;  // expert_ema: with a weight EMA
};

// Each rank sends, in this order, to rank 0: its replicated shards' exp_avg and exp_avg_sq (its ranges of the
// replicated parameters, back to back: one contiguous shard, or dist::Zero1's interleaved slices); with sharded
// experts, its expert shard's exp_avg and exp_avg_sq, and (the first rank holding those experts) the experts' master
// values and, with a weight EMA, their EMA. Rank 0 learns every rank's ranges first (an all-gather), then receives
// rank by rank in the same order.
Gathered gather_state(const CheckpointWrite& what, const optim::ParamArenas& params) {
  const optim::AdamW& opt = *what.optimizer;
  dist::Communicator* comm = what.comm;
  const int64_t elements = params.layout().elements();
  const ArenaRange experts = params.experts;
  if (comm == nullptr || comm->size() == 1) {
    FP8T_CHECK(experts.empty(), "save_checkpoint: sharded experts need the gradient group to gather them");
    FP8T_CHECK(opt.shards().size() == 1 && opt.shards().front().begin == 0 && opt.shards().front().end == elements,
               "save_checkpoint: a sharded optimizer needs its DP group to gather the moments");
    return {on_host(opt.exp_avg_shard()), on_host(opt.exp_avg_sq_shard()), {}, {}, {}, {}};
  }
  const std::vector<ArenaRange>& shards = opt.shards();
  FP8T_CHECK(experts.empty() || (shards.size() >= 2 && shards.front().end <= experts.end),
             "save_checkpoint: the optimizer's first range is not the experts' shard ({} ranges)", shards.size());
  const ArenaRange xs = experts.empty() ? ArenaRange{} : shards.front();
  const std::vector<ArenaRange> rep(shards.begin() + (experts.empty() ? 0 : 1), shards.end());
  int64_t rep_total = 0;
  for (const ArenaRange& r : rep) rep_total += r.size();
  const Tensor& m_all = opt.exp_avg_shard();
  const Tensor& v_all = opt.exp_avg_sq_shard();
  const int64_t rep_at = m_all.numel() - rep_total;  // the replicated shards' moments follow the experts'
  const ExecCtx ctx = ExecCtx::on(m_all.device());
  const DType dt = m_all.dtype();
  const int n = comm->size(), me = comm->rank();
  // Every rank's replicated ranges: their counts, then (begin, end) pairs back to back in rank order.
  std::vector<std::vector<ArenaRange>> rep_of(static_cast<size_t>(n));
  {
    const auto gather = [&](const std::vector<int64_t>& mine, std::span<const int64_t> counts) {
      int64_t total = 0;
      for (int64_t c : counts) total += c;
      const Tensor send =
          Tensor::from_vector(mine, {static_cast<int64_t>(mine.size())}, MemCategory::Workspace, Device::cpu())
              .to(ctx.device);
      const Tensor all = Tensor::empty({std::max<int64_t>(total, 1)}, DType::I64, MemCategory::Workspace, ctx.device);
      comm->all_gatherv(send, all.narrow(0, 0, total), counts, ctx);
      std::vector<int64_t> out = all.to(Device::cpu()).to_vector<int64_t>();
      out.resize(static_cast<size_t>(total));
      return out;
    };
    const std::vector<int64_t> ones(static_cast<size_t>(n), 1);
    const std::vector<int64_t> counts = gather({2 * static_cast<int64_t>(rep.size())}, ones);
    std::vector<int64_t> mine;
    for (const ArenaRange& r : rep) mine.insert(mine.end(), {r.begin, r.end});
    const std::vector<int64_t> pairs = gather(mine, counts);
    size_t at = 0;
    for (int r = 0; r < n; ++r)
      for (int64_t k = 0; k < counts[static_cast<size_t>(r)]; k += 2, at += 2) {
        const ArenaRange range{pairs[at], pairs[at + 1]};
        FP8T_CHECK(range.begin >= experts.end && range.begin <= range.end && range.end <= elements,
                   "save_checkpoint: rank {} holds moments of [{}, {}), not inside the {}-element arena's replicated "
                   "part",
                   r, range.begin, range.end, elements);
        rep_of[static_cast<size_t>(r)].push_back(range);
      }
  }
  // Who holds which experts: (EP index, rank among the ranks holding them) of every rank, in rank order.
  std::vector<int64_t> holders;
  if (!experts.empty()) {
    FP8T_CHECK(what.expert_dp != nullptr, "save_checkpoint: sharded experts need the group of ranks holding them");
    const Tensor mine = Tensor::from_vector(std::vector<int64_t>{what.ep_rank, what.expert_dp->rank()}, {2},
                                            MemCategory::Workspace, Device::cpu())
                            .to(ctx.device);
    const Tensor all = Tensor::empty({2 * n}, DType::I64, MemCategory::Workspace, ctx.device);
    comm->all_gather(mine, all, ctx);
    holders = all.to(Device::cpu()).to_vector<int64_t>();
  }
  // The experts' EMA (host floats) as a tensor the communicator can move.
  const auto expert_ema = [&] {
    const std::vector<float>& ema = what.ema->values();  // waits for the queued updates
    return Tensor::from_vector(std::vector<float>(ema.begin() + experts.begin, ema.begin() + experts.end),
                               {experts.size()}, MemCategory::Workspace, Device::cpu())
        .to(ctx.device);
  };
  if (me != 0) {
    const auto send = [&](const Tensor& t) {
      if (t.numel() > 0) comm->send(t, 0, ctx);
    };
    send(m_all.narrow(0, rep_at, rep_total));
    send(v_all.narrow(0, rep_at, rep_total));
    if (!experts.empty()) {
      send(m_all.narrow(0, 0, xs.size()));
      send(v_all.narrow(0, 0, xs.size()));
      if (what.expert_dp->rank() == 0) {
        send(params.values.range(experts));
        if (what.ema) {
          const Tensor e = expert_ema();
          send(e);
          ctx.synchronize();  // e is freed on return
        }
      }
    }
    ctx.synchronize();
    return {};
  }
  Gathered g;
  g.m = Tensor::zeros({elements}, dt, MemCategory::Workspace, Device::cpu());
  g.v = Tensor::zeros({elements}, dt, MemCategory::Workspace, Device::cpu());
  // A receive from rank r into the host tensor `dst` (a GPU communicator only enqueues it: synchronize first).
  const auto receive = [&](int r, Tensor dst, DType type) {
    if (dst.numel() == 0) return;
    const Tensor buffer = Tensor::empty({dst.numel()}, type, MemCategory::Workspace, ctx.device);
    comm->recv(buffer, r, ctx);
    ctx.synchronize();
    dst.copy_from(buffer);
  };
  // A rank's replicated moments (back to back, `from`) into their ranges of the whole-arena `dst`.
  const auto scatter = [](const Tensor& from, const std::vector<ArenaRange>& ranges, const Tensor& dst) {
    int64_t at = 0;
    for (const ArenaRange& r : ranges) {
      dst.narrow(0, r.begin, r.size()).copy_from(from.narrow(0, at, r.size()));
      at += r.size();
    }
  };
  scatter(m_all.narrow(0, rep_at, rep_total), rep, g.m);
  scatter(v_all.narrow(0, rep_at, rep_total), rep, g.v);
  int ep = 1, holders_per_shard = 1;
  dist::ShardPlan x_plan;
  if (!experts.empty()) {
    for (int r = 0; r < n; ++r) ep = std::max(ep, static_cast<int>(holders[2 * r]) + 1);
    holders_per_shard = what.expert_dp->size();
    FP8T_CHECK(ep * holders_per_shard == n && holders[0] == 0 && holders[1] == 0,
               "save_checkpoint: {} ranks do not hold {} expert shards {} times each, with rank 0 first", n, ep,
               holders_per_shard);
    x_plan = dist::shard_arena(experts.size(), holders_per_shard);
    for (int e = 0; e < ep; ++e) {
      g.expert_values.push_back(Tensor::zeros({experts.size()}, DType::F32, MemCategory::Workspace, Device::cpu()));
      g.expert_m.push_back(Tensor::zeros({experts.size()}, dt, MemCategory::Workspace, Device::cpu()));
      g.expert_v.push_back(Tensor::zeros({experts.size()}, dt, MemCategory::Workspace, Device::cpu()));
    }
    g.expert_values[0].copy_from(params.values.range(experts));
    if (what.ema) {
      for (int e = 0; e < ep; ++e)
        g.expert_ema.push_back(Tensor::zeros({experts.size()}, DType::F32, MemCategory::Workspace, Device::cpu()));
      g.expert_ema[0].copy_from(expert_ema());
    }
    g.expert_m[0].narrow(0, 0, xs.size()).copy_from(m_all.narrow(0, 0, xs.size()));
    g.expert_v[0].narrow(0, 0, xs.size()).copy_from(v_all.narrow(0, 0, xs.size()));
  }
  for (int r = 1; r < n; ++r) {
    const std::vector<ArenaRange>& ranges = rep_of[static_cast<size_t>(r)];
    int64_t total = 0;
    for (const ArenaRange& x : ranges) total += x.size();
    for (const Tensor& dst : {g.m, g.v}) {
      const Tensor host = Tensor::empty({total}, dt, MemCategory::Workspace, Device::cpu());
      receive(r, host, dt);
      scatter(host, ranges, dst);
    }
    if (experts.empty()) continue;
    const int e = static_cast<int>(holders[2 * r]), d = static_cast<int>(holders[2 * r + 1]);
    const int64_t at = x_plan.begins[static_cast<size_t>(d)], count = x_plan.counts[static_cast<size_t>(d)];
    receive(r, g.expert_m[static_cast<size_t>(e)].narrow(0, at, count), dt);
    receive(r, g.expert_v[static_cast<size_t>(e)].narrow(0, at, count), dt);
    if (d != 0) continue;
    receive(r, g.expert_values[static_cast<size_t>(e)], DType::F32);
    if (what.ema) receive(r, g.expert_ema[static_cast<size_t>(e)], DType::F32);
  }
  return g;
}

// A local-expert parameter's name "<layer>.experts.<k>.<weight>": where <k> stands, and k.
struct ExpertName {
  size_t begin = 0, end = 0;
  int64_t index = 0;
};
ExpertName parse_expert_name(const std::string& name) {
  const std::string key = ".experts.";
  const size_t at = name.find(key);
  FP8T_CHECK(at != std::string::npos, "save_checkpoint: local-expert parameter '{}' is not named as an expert", name);
  ExpertName e;
  e.begin = at + key.size();
  e.end = name.find('.', e.begin);
  FP8T_CHECK(e.end != std::string::npos && e.end > e.begin, "save_checkpoint: cannot read the expert index of '{}'",
             name);
  e.index = std::stoll(name.substr(e.begin, e.end - e.begin));
  return e;
}

// The same parameter of expert k + delta (another EP shard's).
std::string shift_expert(const std::string& name, int64_t delta) {
  const ExpertName e = parse_expert_name(name);
  return name.substr(0, e.begin) + std::to_string(e.index + delta) + name.substr(e.end);
}

// Every parameter of the whole model, in its registration order: fn(name, i, e) with i the index of this rank's view
// that holds it (or its shard-e counterpart) and e = -1 for the views outside the local experts; for a layer's run
// of local experts every EP shard's (shards of them), in shard order (shard e holds the experts e·L + [0, L),
// rank 0 the first L).
template <class Fn>
void for_each_model_view(const optim::ParamArenas& params, size_t shards, Fn&& fn) {
  const ArenaLayout& layout = params.layout();
  for (size_t i = 0; i < layout.views().size();) {
    const ArenaLayout::View& v = layout.view(i);
    if (params.experts.empty() || v.offset >= params.experts.end) {
      fn(v.name, i, -1);
      ++i;
      continue;
    }
    size_t j = i;
    int64_t per_shard = 0;
    while (j < layout.views().size() && layout.view(j).offset < params.experts.end)
      per_shard = std::max(per_shard, parse_expert_name(layout.view(j++).name).index + 1);
    for (size_t e = 0; e < shards; ++e)
      for (size_t k = i; k < j; ++k)
        fn(shift_expert(layout.view(k).name, static_cast<int64_t>(e) * per_shard), k, static_cast<int>(e));
    i = j;
  }
}

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
  const optim::AdamW& opt = *what.optimizer;
  const int64_t elements = what.model->parameters().layout().elements();
  FP8T_CHECK(opt.sharded() ? opt.shards().back().end <= elements
                           : opt.exp_avg().layout_ptr() == what.model->parameters().values.layout_ptr(),
             "save_checkpoint: the optimizer was built for other parameters than the model's");
  // The whole moments (and with sharded experts every shard's experts) on the host of rank 0, gathered from the
  // ranks' shards; the other ranks only send theirs.
  const Gathered gathered = gather_state(what, what.model->parameters());
  if (what.comm && what.comm->rank() != 0) return {};
  const fs::path checkpoints = fs::path(run_dir) / "checkpoints";
  fs::create_directories(checkpoints);
  // Leftovers of writers that were killed: never referenced by "latest", safe to delete.
  for (const auto& entry : fs::directory_iterator(checkpoints))
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) fs::remove_all(entry.path());

  const std::string name = step_name(what.state.step);
  const fs::path tmp = checkpoints / (name + ".tmp-" + std::to_string(::getpid()));
  fs::create_directories(tmp);

  // Every tensor is copied to the host through its named view (Tensor::to), wherever the arenas live.
  TrainableModel& model = *what.model;
  const optim::ParamArenas& params = model.parameters();
  const std::vector<NamedTensor> buffers = model.state();

  StFile weights, master, optimizer;
  const std::string step_text = std::to_string(what.state.step);
  weights.metadata = {{"format", "pt"}, {"fp8train_step", step_text}, {"fp8train_config", what.config->dump()}};
  master.metadata = {{"format", "pt"}, {"fp8train_step", step_text}};
  optimizer.metadata = {{"step_count", std::to_string(opt.step_count())},
                        {"moment_dtype", optim::moment_dtype_name(opt.config().moment_dtype)}};
  const auto put_tensors = [&](const std::string& name, const Shape& shape, const Tensor& value, const Tensor& m,
                               const Tensor& v) {
    const Tensor shaped = value.view(shape);
    master.tensors.push_back(st_from_tensor(name, shaped));
    weights.tensors.push_back(what.bf16_weights ? st_bf16_from_f32(name, shaped) : st_from_tensor(name, shaped));
    optimizer.tensors.push_back(st_from_tensor("exp_avg." + name, m.view(shape)));
    optimizer.tensors.push_back(st_from_tensor("exp_avg_sq." + name, v.view(shape)));
  };
  const auto of = [](const Tensor& all, const ArenaLayout::View& w) { return all.narrow(0, w.offset, w.numel); };
  for_each_model_view(params, gathered.expert_values.size(), [&](const std::string& name, size_t i, int e) {
    const ArenaLayout::View& w = params.layout().view(i);
    if (e < 0)
      put_tensors(name, w.shape, on_host(params.values.view(i)), of(gathered.m, w), of(gathered.v, w));
    else
      put_tensors(name, w.shape, of(gathered.expert_values[static_cast<size_t>(e)], w),
                  of(gathered.expert_m[static_cast<size_t>(e)], w), of(gathered.expert_v[static_cast<size_t>(e)], w));
  });
  for (const NamedTensor& b : buffers) {
    const Tensor value = on_host(b.value);
    weights.tensors.push_back(st_from_tensor(b.name, value));
    master.tensors.push_back(st_from_tensor(b.name, value));
  }

  nlohmann::json files = nlohmann::json::object();
  const auto put = [&](const char* file, const std::string& bytes) {
    write_durable(tmp / file, bytes);
    files[file] = {{"bytes", bytes.size()}, {"fnv1a64", fnv1a64_hex(bytes)}};
  };
  put("model.safetensors", encode_safetensors(weights));
  put("master.safetensors", encode_safetensors(master));
  put("optimizer.safetensors", encode_safetensors(optimizer));
  const std::vector<NamedTensor> recipe_state = model.recipe_state();
  if (!recipe_state.empty()) {
    StFile rs;
    rs.metadata = {{"fp8train_step", step_text}};
    for (const NamedTensor& t : recipe_state) rs.tensors.push_back(st_exact(t.name, on_host(t.value)));
    put(kRecipeStateFile, encode_safetensors(rs));
  }
  if (what.ema) {
    const std::vector<float>& ema = what.ema->values();  // waits for the queued updates
    FP8T_CHECK(ema.size() == static_cast<size_t>(params.values.flat().numel()),
               "save_checkpoint: the EMA does not cover the model's parameter arena");
    StFile ef;
    ef.metadata = {{"fp8train_step", step_text}, {"decay", fmt::format("{}", what.ema->decay())}};
    for_each_model_view(params, gathered.expert_values.size(), [&](const std::string& name, size_t i, int e) {
      const ArenaLayout::View& w = params.layout().view(i);
      const float* src =
          e < 0 ? ema.data() + w.offset : gathered.expert_ema[static_cast<size_t>(e)].data<float>() + w.offset;
      ef.tensors.push_back(st_from_f32(name, w.shape, src));
    });
    put(kEmaFile, encode_safetensors(ef));
  }
  put("config.json", what.config->dump(2) + "\n");
  if (!what.tokenizer_model.empty()) put(kTokenizerFile, what.tokenizer_model);
  nlohmann::json state = {{"format", kFormat}, {"files", files}};
  state["dp_ranks"] = what.comm ? what.comm->size() : 1;  // informative: a checkpoint loads on any number of ranks
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
  std::vector<const char*> files(std::begin(kDataFiles), std::end(kDataFiles));
  if (meta.files.is_object() && meta.files.contains(kRecipeStateFile)) files.push_back(kRecipeStateFile);
  if (meta.files.is_object() && meta.files.contains(kEmaFile)) files.push_back(kEmaFile);
  if (meta.files.is_object() && meta.files.contains(kTokenizerFile)) files.push_back(kTokenizerFile);
  for (const char* file : files) {
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
    if (std::string(file) == kTokenizerFile) meta.tokenizer_model = bytes;
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

std::unique_ptr<Tokenizer> checkpoint_tokenizer(const CheckpointMeta& meta) {
  return meta.tokenizer_model.empty()
             ? make_byte_tokenizer()
             : sentencepiece_tokenizer(meta.tokenizer_model, "checkpoint '" + meta.dir + "' tokenizer.model");
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

bool load_checkpoint(const CheckpointMeta& meta, TrainableModel& model, optim::AdamW* optimizer) {
  const fs::path dir(meta.dir);
  const std::string where = fmt::format("checkpoint '{}'", meta.dir);
  const StFile master = read_safetensors((dir / "master.safetensors").string());
  const optim::ParamArenas& params = model.parameters();
  const ArenaLayout& layout = params.layout();
  const std::vector<NamedTensor> buffers = model.state();
  // Each tensor is checked against its destination and built on the host; only when all are good are they copied
  // into the model (copy_from), so a bad file leaves the model as it was.
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, host source)
  const auto stage = [&](const StTensor& t, const Tensor& dst) {
    FP8T_CHECK(t.dtype == StDtype::F32, "{}: '{}' is {} in master.safetensors, expected F32", where, t.name,
               st_dtype_name(t.dtype));
    FP8T_CHECK(t.shape == dst.shape(), "{}: '{}' has shape [{}], the model's is [{}] (a different model config?)",
               where, t.name, fmt::join(t.shape, ", "), fmt::join(dst.shape(), ", "));
    copies.emplace_back(dst, host_tensor(t));
  };
  // (A model holding a shard of the experts reads its own experts out of the whole model's.)
  const bool expert_shard = !params.experts.empty();
  FP8T_CHECK(expert_shard ? master.tensors.size() > layout.views().size() + buffers.size()
                          : master.tensors.size() == layout.views().size() + buffers.size(),
             "{}: master.safetensors holds {} tensors, the model has {} parameters{} and {} state buffers", where,
             master.tensors.size(), layout.views().size(), expert_shard ? " (a shard of the experts)" : "",
             buffers.size());
  for (size_t i = 0; i < layout.views().size(); ++i)
    stage(master.get(layout.view(i).name, where + " master.safetensors"), params.values.view(i));
  for (const NamedTensor& b : buffers) stage(master.get(b.name, where + " master.safetensors"), b.value);
  // The recipe's state, when the checkpoint has it for exactly this recipe's tensors (another recipe's, or an
  // amax history of another length, is left out: the state then starts fresh, which the caller is told).
  const std::vector<NamedTensor> recipe_state = model.recipe_state();
  bool recipe_state_restored = recipe_state.empty();
  if (!recipe_state.empty() && meta.files.contains(kRecipeStateFile)) {
    const StFile rs = read_safetensors((dir / kRecipeStateFile).string());
    std::vector<std::pair<Tensor, Tensor>> state_copies;
    for (const NamedTensor& t : recipe_state) {
      const auto it =
          std::find_if(rs.tensors.begin(), rs.tensors.end(), [&](const StTensor& e) { return e.name == t.name; });
      const StDtype want = t.value.dtype() == DType::F32 ? StDtype::F32 : StDtype::I32;
      if (it == rs.tensors.end() || it->shape != t.value.shape() || it->dtype != want ||
          it->data.size() != t.value.nbytes())
        break;
      Tensor host = Tensor::empty(t.value.shape(), t.value.dtype(), MemCategory::Workspace, Device::cpu());
      std::memcpy(host.raw(), it->data.data(), it->data.size());
      state_copies.emplace_back(t.value, std::move(host));
    }
    if (state_copies.size() == recipe_state.size() && rs.tensors.size() == recipe_state.size()) {
      for (auto& c : state_copies) copies.push_back(std::move(c));
      recipe_state_restored = true;
    }
  }
  for (auto& [dst, src] : copies) dst.copy_from(src);
  model.parameters_changed();  // the compute copies of the weights follow the loaded masters
  if (optimizer == nullptr) return recipe_state_restored;

  const StFile opt = read_safetensors((dir / "optimizer.safetensors").string());
  const auto meta_it = opt.metadata.find("step_count");
  FP8T_CHECK(meta_it != opt.metadata.end(), "{}: optimizer.safetensors has no step_count", where);
  const std::string dtype_name = opt.metadata.count("moment_dtype") ? opt.metadata.at("moment_dtype") : "";
  FP8T_CHECK(dtype_name == optim::moment_dtype_name(optimizer->config().moment_dtype),
             "{}: optimizer moments are '{}', the config asks for '{}'", where, dtype_name,
             optim::moment_dtype_name(optimizer->config().moment_dtype));
  FP8T_CHECK(optimizer->sharded() ? optimizer->shards().back().end <= layout.elements()
                                  : optimizer->exp_avg().layout_ptr() == params.values.layout_ptr(),
             "load_checkpoint: the optimizer was built for other parameters than the model's");
  int64_t step_count = 0;
  try {
    step_count = std::stoll(meta_it->second);
  } catch (const std::exception&) {
    FP8T_FAIL("{}: optimizer step_count '{}' is not a number", where, meta_it->second);
  }
  FP8T_CHECK(step_count >= 0, "{}: optimizer step_count {} is negative", where, step_count);
  // Read and check every moment before writing any, so a bad file leaves the optimizer as it was.
  const DType moment_dtype = optimizer->exp_avg_shard().dtype();
  const StDtype expected = moment_dtype == DType::BF16 ? StDtype::BF16 : StDtype::F32;
  std::vector<std::pair<Tensor, Tensor>> moments;
  for (size_t i = 0; i < layout.views().size(); ++i) {
    const ArenaLayout::View& view = layout.view(i);
    const StTensor& m = opt.get("exp_avg." + view.name, where + " optimizer.safetensors");
    const StTensor& v = opt.get("exp_avg_sq." + view.name, where + " optimizer.safetensors");
    FP8T_CHECK(m.shape == view.shape && v.shape == view.shape, "{}: optimizer moments of '{}' have the wrong shape",
               where, view.name);
    FP8T_CHECK(m.dtype == expected && v.dtype == expected, "{}: moments of '{}' are not {}", where, view.name,
               st_dtype_name(expected));
    moments.emplace_back(host_tensor(m), host_tensor(v));
  }
  // Each parameter's slice inside the optimizer's shards (every parameter whole when it is not sharded); the
  // shards' moments lie back to back.
  int64_t base = 0;
  for (const ArenaRange& shard : optimizer->shards()) {
    for (size_t i = 0; i < moments.size(); ++i) {
      const ArenaLayout::View& view = layout.view(i);
      const int64_t lo = std::max(view.offset, shard.begin), hi = std::min(view.offset + view.numel, shard.end);
      if (lo >= hi) continue;
      const auto slice = [&](const Tensor& whole) {
        return whole.view({view.numel}).narrow(0, lo - view.offset, hi - lo);
      };
      optimizer->exp_avg_shard().narrow(0, base + lo - shard.begin, hi - lo).copy_from(slice(moments[i].first));
      optimizer->exp_avg_sq_shard().narrow(0, base + lo - shard.begin, hi - lo).copy_from(slice(moments[i].second));
    }
    base += shard.size();
  }
  optimizer->set_step_count(step_count);
  return recipe_state_restored;
}

bool checkpoint_has_ema(const CheckpointMeta& meta) { return meta.files.is_object() && meta.files.contains(kEmaFile); }

std::vector<NamedTensor> read_ema_weights(const CheckpointMeta& meta) {
  FP8T_CHECK(checkpoint_has_ema(meta), "checkpoint '{}' holds no weight EMA (it was trained without --ema-decay)",
             meta.dir);
  const std::string where = fmt::format("checkpoint '{}' {}", meta.dir, kEmaFile);
  const StFile f = read_safetensors((fs::path(meta.dir) / kEmaFile).string());
  std::vector<NamedTensor> out;
  for (const StTensor& t : f.tensors) {
    FP8T_CHECK(t.dtype == StDtype::F32, "{}: '{}' is {}, expected F32", where, t.name, st_dtype_name(t.dtype));
    out.push_back({t.name, host_tensor(t)});
  }
  return out;
}

bool load_ema(const CheckpointMeta& meta, const ArenaLayout& layout, WeightEma& ema, bool expert_shard) {
  if (!checkpoint_has_ema(meta)) return false;
  const std::string where = fmt::format("checkpoint '{}' {}", meta.dir, kEmaFile);
  const std::vector<NamedTensor> weights = read_ema_weights(meta);
  FP8T_CHECK(expert_shard ? weights.size() > layout.views().size() : weights.size() == layout.views().size(),
             "{}: holds {} tensors, the model has {} parameters{}", where, weights.size(), layout.views().size(),
             expert_shard ? " (a shard of the experts)" : "");
  std::vector<float> values(static_cast<size_t>(layout.elements()), 0.0f);
  size_t found = 0;
  for (const NamedTensor& w : weights) {
    const ArenaLayout::View* v = layout.find(w.name);
    if (v == nullptr && expert_shard && w.name.find(".experts.") != std::string::npos) continue;  // another shard's
    FP8T_CHECK(v != nullptr, "{}: '{}' is not a parameter of the model", where, w.name);
    ++found;
    FP8T_CHECK(w.value.shape() == v->shape, "{}: '{}' has shape [{}], the model's is [{}]", where, w.name,
               fmt::join(w.value.shape(), ", "), fmt::join(v->shape, ", "));
    std::memcpy(values.data() + v->offset, w.value.data<float>(), static_cast<size_t>(v->numel) * sizeof(float));
  }
  FP8T_CHECK(found == layout.views().size(), "{}: holds {} of the model's {} parameters", where, found,
             layout.views().size());
  ema.set_values(std::move(values));
  return true;
}

void load_ema_weights(const CheckpointMeta& meta, TrainableModel& model) {
  const std::string where = fmt::format("checkpoint '{}' {}", meta.dir, kEmaFile);
  const std::vector<NamedTensor> weights = read_ema_weights(meta);
  const optim::ParamArenas& params = model.parameters();
  const ArenaLayout& layout = params.layout();
  FP8T_CHECK(weights.size() == layout.views().size(), "{}: holds {} tensors, the model has {} parameters", where,
             weights.size(), layout.views().size());
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (const NamedTensor& w : weights) {
    const ArenaLayout::View* v = layout.find(w.name);
    FP8T_CHECK(v != nullptr, "{}: '{}' is not a parameter of the model", where, w.name);
    const Tensor dst = params.values.view(w.name);
    FP8T_CHECK(w.value.shape() == dst.shape(), "{}: '{}' has shape [{}], the model's is [{}]", where, w.name,
               fmt::join(w.value.shape(), ", "), fmt::join(dst.shape(), ", "));
    copies.emplace_back(dst, &w.value);
  }
  for (auto& [dst, src] : copies) dst.copy_from(*src);
  model.parameters_changed();
}

}  // namespace fp8train::train
