// The training loop on a bigram model (toy_model.h): loss falls; metrics.jsonl has exactly the documented
// keys; resume from step k reproduces the uninterrupted run bit for bit; gradient accumulation matches the
// full batch; non-finite steps are skipped, counted, logged, and stop the run after max_bad_steps in a row;
// checkpoints refuse truncation/corruption and survive a killed writer; the report is self-contained SVG.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "toy_model.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/trainer.h"

using namespace fp8train;
using namespace fp8train::train;
using fp8train::train::testing::BigramModel;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("fp8train-trainer-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TrainConfig toy_config() {
  TrainConfig c = preset_config("tiny");
  c.steps = 12;
  c.batch_size = 4;
  c.seq_len = 16;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.log_every = 1;
  c.lr = 0.05;
  c.final_lr = 0.005;
  c.warmup_steps = 2;
  return c;
}

const TokenData& toy_data() {
  static const TokenData data = embedded_corpus_data(3, 30000);
  return data;
}

TrainResult run_toy(const TrainConfig& c, BigramModel& model, const fs::path& dir, const CheckpointMeta* resume = nullptr) {
  TrainOptions o;
  o.run_dir = dir.string();
  o.resume = resume;
  o.out = std::tmpfile();
  const TrainResult r = run_training(c, model, toy_data(), o);
  std::fclose(o.out);
  return r;
}

// metrics.jsonl without the wall-clock-dependent throughput.
std::vector<nlohmann::json> deterministic_metrics(const fs::path& dir) {
  std::vector<nlohmann::json> rows = read_jsonl((dir / "metrics.jsonl").string());
  for (auto& r : rows) r.erase("tokens_per_s");
  return rows;
}

}  // namespace

TEST(Trainer, LossFallsAndLogsTheDocumentedKeys) {
  TempDir dir("basic");
  TrainConfig c = toy_config();
  c.steps = 40;
  BigramModel model(kByteVocabSize);
  const TrainResult r = run_toy(c, model, dir.path);
  EXPECT_EQ(r.steps_done, 40);
  const auto rows = read_jsonl((dir.path / "metrics.jsonl").string());
  ASSERT_EQ(rows.size(), 40u);
  const std::vector<std::string> keys{"step", "loss", "loss_main", "loss_mtp", "loss_balance", "lr",
                                      "tokens_per_s", "grad_norm", "max_expert_load_ratio"};
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), keys.size()) << row.dump();
    for (const auto& k : keys) ASSERT_TRUE(row.contains(k)) << k;
  }
  EXPECT_EQ(rows.front()["step"], 1);
  EXPECT_LT(rows.back()["loss"].get<double>(), 0.8 * rows.front()["loss"].get<double>());
  EXPECT_GT(rows.front()["max_expert_load_ratio"].get<double>(), 1.0);
  const auto evals = read_jsonl((dir.path / "eval.jsonl").string());
  ASSERT_EQ(evals.size(), 10u);  // every 4 steps
  EXPECT_TRUE(evals.back().contains("eval_bpb"));
  EXPECT_LT(evals.back()["eval_loss"].get<double>(), evals.front()["eval_loss"].get<double>());
  EXPECT_NEAR(r.final_eval_bits, r.final_eval_loss / std::log(2.0), 1e-12);
  EXPECT_TRUE(fs::exists(dir.path / "checkpoints" / "step-00000040" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir.path / "config.json"));
  EXPECT_TRUE(fs::exists(dir.path / "summary.json"));
  // report.html: self-contained, inline SVG, the promised figures.
  const std::string html = read_file((dir.path / "report.html").string());
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));  // only the SVG namespace, no fetches
  for (const char* title : {"Loss", "Learning rate", "Gradient norm", "Per-expert load: MoE layer 0", "Held-out"})
    EXPECT_NE(html.find(title), std::string::npos) << title;
}

TEST(Trainer, ResumeReproducesTheUninterruptedRunBitForBit) {
  TempDir full("full"), resumed("resumed");
  TrainConfig c = toy_config();
  c.save_every = 5;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, full.path);
  // Resume the step-5 checkpoint of the first run into a second directory, with a freshly built model.
  const CheckpointMeta meta = read_checkpoint_meta((full.path / "checkpoints" / "step-00000005").string());
  EXPECT_EQ(meta.state.step, 5);
  BigramModel b(kByteVocabSize, /*seed=*/999);  // different init: everything must come from the checkpoint
  b.set_step(5);
  run_toy(c, b, resumed.path, &meta);
  const auto rows_full = deterministic_metrics(full.path);
  const auto rows_resumed = deterministic_metrics(resumed.path);
  ASSERT_EQ(rows_full.size(), 12u);
  ASSERT_EQ(rows_resumed.size(), 7u);  // steps 6..12
  for (size_t i = 0; i < rows_resumed.size(); ++i) EXPECT_EQ(rows_resumed[i].dump(), rows_full[i + 5].dump());
  EXPECT_EQ(a.weights(), b.weights());
  EXPECT_EQ(a.bias(), b.bias());
  EXPECT_EQ(a.router_bias(), b.router_bias());
  // The resumed run's evaluation at step 8 and 12 equals the uninterrupted one's too.
  const auto ev_full = read_jsonl((full.path / "eval.jsonl").string());
  const auto ev_res = read_jsonl((resumed.path / "eval.jsonl").string());
  ASSERT_EQ(ev_res.size(), 2u);
  EXPECT_EQ(ev_res.back().dump(), ev_full.back().dump());
}

TEST(Trainer, ResumeInPlaceDropsLogLinesPastTheCheckpoint) {
  TempDir dir("inplace");
  TrainConfig c = toy_config();
  c.save_every = 5;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, dir.path);
  const auto before = deterministic_metrics(dir.path);
  // Pretend the run was killed after step 12 but the newest checkpoint is step 10: resume at 10 in place.
  const CheckpointMeta meta = read_checkpoint_meta((dir.path / "checkpoints" / "step-00000010").string());
  BigramModel b(kByteVocabSize);
  b.set_step(10);
  run_toy(c, b, dir.path, &meta);
  const auto after = deterministic_metrics(dir.path);
  ASSERT_EQ(after.size(), 12u);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].dump(), before[i].dump()) << i;
}

TEST(Trainer, GradientAccumulationMatchesTheFullBatch) {
  TempDir one("mb-full"), four("mb-four");
  TrainConfig c = toy_config();
  c.steps = 5;
  BigramModel a(kByteVocabSize), b(kByteVocabSize);
  run_toy(c, a, one.path);
  c.micro_batch_size = 1;
  run_toy(c, b, four.path);
  const auto ra = read_jsonl((one.path / "metrics.jsonl").string());
  const auto rb = read_jsonl((four.path / "metrics.jsonl").string());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_NEAR(ra[i]["loss"].get<double>(), rb[i]["loss"].get<double>(), 1e-6);
    EXPECT_NEAR(ra[i]["grad_norm"].get<double>(), rb[i]["grad_norm"].get<double>(), 1e-5);
  }
  const std::vector<float> wa = a.weights(), wb = b.weights();
  for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(wa[i], wb[i], 1e-5) << i;
}

TEST(Trainer, BatchSizeWarmupChangesTokensPerStep) {
  TempDir dir("bsw");
  TrainConfig c = toy_config();
  c.steps = 6;
  c.batch_warmup_start = 1;
  c.batch_warmup_steps = 3;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, dir.path);
  const CheckpointMeta meta = read_checkpoint_meta((dir.path / "checkpoints" / "step-00000006").string());
  // batches 1, 2, 3, 4, 4, 4 sequences of 16 tokens
  EXPECT_EQ(meta.state.tokens_seen, (1 + 2 + 3 + 4 + 4 + 4) * 16);
  EXPECT_EQ(meta.state.sampler.windows_drawn, 1 + 2 + 3 + 4 + 4 + 4);
}

TEST(Trainer, NonFiniteStepsAreSkippedCountedAndStopTheRun) {
  TempDir dir("nan");
  TrainConfig c = toy_config();
  c.steps = 8;
  BigramModel a(kByteVocabSize);
  a.nan_at_steps = {2, 3};
  const TrainResult r = run_toy(c, a, dir.path);
  EXPECT_EQ(r.skipped_steps, 2);
  EXPECT_EQ(a.applied_, 6);
  for (float w : a.weights()) ASSERT_TRUE(std::isfinite(w));  // the poisoned gradients never reached the weights
  const auto rows = read_jsonl((dir.path / "metrics.jsonl").string());
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_TRUE(rows[2]["loss"].is_null());
  EXPECT_TRUE(rows[3]["loss"].is_null());
  const auto events = read_jsonl((dir.path / "events.jsonl").string());
  int skipped = 0;
  for (const auto& e : events) skipped += e["event"] == "skipped_nonfinite";
  EXPECT_EQ(skipped, 2);

  TempDir dir2("nan-stop");
  c.max_bad_steps = 3;
  BigramModel b(kByteVocabSize);
  b.nan_at_steps = {1, 2, 3, 4, 5};
  const std::string msg = error_of([&] { run_toy(c, b, dir2.path); });
  EXPECT_NE(msg.find("training stopped at step 4: 3 consecutive steps had a non-finite loss"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("train.max_bad_steps"), std::string::npos);
}

TEST(Checkpoint, RefusesTruncatedOrCorruptedFiles) {
  TempDir dir("corrupt");
  TrainConfig c = toy_config();
  c.steps = 2;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, dir.path);
  const fs::path step = dir.path / "checkpoints" / "step-00000002";
  EXPECT_EQ(resolve_checkpoint_dir(dir.path.string()), step.string());
  EXPECT_EQ(run_dir_of_checkpoint(step.string()), dir.path.string());
  EXPECT_NO_THROW(read_checkpoint_meta(step.string()));

  const std::string model = read_file((step / "model.safetensors").string());
  write_file_atomic((step / "model.safetensors").string(), model.substr(0, model.size() / 2));
  EXPECT_NE(error_of([&] { read_checkpoint_meta(step.string()); }).find("model.safetensors has"), std::string::npos);
  std::string flipped = model;
  flipped[flipped.size() - 3] ^= 0x10;
  write_file_atomic((step / "model.safetensors").string(), flipped);
  EXPECT_NE(error_of([&] { read_checkpoint_meta(step.string()); }).find("does not match its recorded checksum"),
            std::string::npos);
  write_file_atomic((step / "model.safetensors").string(), model);
  const std::string state = read_file((step / "state.json").string());
  write_file_atomic((step / "state.json").string(), state.substr(0, 40));
  EXPECT_NE(error_of([&] { read_checkpoint_meta(step.string()); }).find("state.json is not valid JSON"),
            std::string::npos);
  write_file_atomic((step / "state.json").string(), state);
  fs::remove(step / "optimizer.safetensors");
  EXPECT_NE(error_of([&] { read_checkpoint_meta(step.string()); }).find("optimizer.safetensors is missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_checkpoint_dir((dir.path / "nope").string()); }).find("does not exist"),
            std::string::npos);
  write_file_atomic((dir.path / "checkpoints" / "latest").string(), "step-00000099\n");
  EXPECT_NE(error_of([&] { resolve_checkpoint_dir(dir.path.string()); }).find("which does not exist"),
            std::string::npos);
}

TEST(Checkpoint, AKilledWriterNeverCorruptsLatest) {
  TempDir dir("killed");
  TrainConfig c = toy_config();
  c.steps = 3;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, dir.path);
  // A writer killed mid-save leaves a temporary folder with partial files, and "latest" untouched.
  const fs::path tmp = dir.path / "checkpoints" / "step-00000004.tmp-12345";
  fs::create_directories(tmp);
  std::ofstream(tmp / "model.safetensors") << "partial";
  EXPECT_EQ(resolve_checkpoint_dir(dir.path.string()), (dir.path / "checkpoints" / "step-00000003").string());
  EXPECT_NO_THROW(read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string())));
  // The next save sweeps the leftover away.
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string()));
  BigramModel b(kByteVocabSize);
  b.set_step(3);
  c.steps = 4;
  run_toy(c, b, dir.path, &meta);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(resolve_checkpoint_dir(dir.path.string()), (dir.path / "checkpoints" / "step-00000004").string());
}

TEST(Checkpoint, RefusesAModelOfAnotherShape) {
  TempDir dir("shape");
  TrainConfig c = toy_config();
  c.steps = 1;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, dir.path);
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string()));
  BigramModel bigger(300);
  const std::string msg = error_of([&] { load_checkpoint(meta, bigger, nullptr); });
  EXPECT_NE(msg.find("has shape [259, 259], the model's is [300, 300]"), std::string::npos) << msg;
}

TEST(Trainer, AStopRequestCheckpointsAndResumesCleanly) {
  TempDir dir("stop");
  TrainConfig c = toy_config();
  c.steps = 6;
  BigramModel a(kByteVocabSize);
  request_stop();  // as if Ctrl-C arrived during the first step
  const std::string msg = error_of([&] { run_toy(c, a, dir.path); });
  EXPECT_NE(msg.find("interrupted at step 1 of 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  EXPECT_FALSE(stop_requested());
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string()));
  EXPECT_EQ(meta.state.step, 1);
  BigramModel b(kByteVocabSize);
  b.set_step(1);
  const TrainResult r = run_toy(c, b, dir.path, &meta);
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_EQ(read_jsonl((dir.path / "metrics.jsonl").string()).size(), 6u);
}
