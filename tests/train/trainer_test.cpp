// The training loop on a bigram model (toy_model.h): loss falls; metrics.jsonl has exactly the documented
// keys; resume from step k reproduces the uninterrupted run bit for bit; gradient accumulation matches the
// full batch; non-finite steps are skipped, counted, logged, and stop the run after max_bad_steps in a row;
// checkpoints refuse truncation/corruption and survive a killed writer; the report is self-contained SVG; after a
// resume the summary covers the whole run; the final checkpoint is on disk before the final evaluation starts,
// and a run stopped during that evaluation (or by non-finite steps) is finished by resuming it; retention never
// deletes the checkpoint "latest" names; a report of a run without evaluations draws no empty panel; the MTP
// weight and router-bias speed schedules reach the model and metrics.jsonl at their steps, also after a resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "../common/error_of.h"
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

using test_util::error_of;

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

// A bigram model that asks the trainer to stop (as Ctrl-C does) after a given step, or once the final
// evaluation has begun; it records what "latest" named when the final evaluation started.
class StoppingModel : public BigramModel {
 public:
  using BigramModel::BigramModel;
  void after_step() override {
    BigramModel::after_step();
    if (++steps_done == stop_after_step) request_stop();
  }
  void discard_step() override {
    BigramModel::discard_step();
    ++steps_done;
  }
  double eval_loss_sum(const Token* inputs, const Token* targets, int64_t batch, int64_t seq_len) override {
    if (steps_done == final_step && latest_at_final_eval.empty()) {
      std::error_code ec;
      if (fs::exists(run_dir / "checkpoints" / "latest", ec))
        latest_at_final_eval = read_file((run_dir / "checkpoints" / "latest").string());
      else
        latest_at_final_eval = "(none)";
      if (stop_in_final_eval) request_stop();
    }
    return BigramModel::eval_loss_sum(inputs, targets, batch, seq_len);
  }
  int64_t steps_done = 0, stop_after_step = -1, final_step = -1;
  bool stop_in_final_eval = false;
  fs::path run_dir;
  std::string latest_at_final_eval;
};

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
  const std::vector<std::string> keys{"step",
                                      "loss",
                                      "loss_main",
                                      "loss_mtp",
                                      "loss_balance",
                                      "lr",
                                      "mtp_lambda",
                                      "bias_update_speed",
                                      "tokens_per_s",
                                      "grad_norm",
                                      "max_expert_load_ratio"};
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), keys.size()) << row.dump();
    for (const auto& k : keys) ASSERT_TRUE(row.contains(k)) << k;
    // No schedule given: the constant model keys, logged on every step.
    EXPECT_EQ(row["mtp_lambda"].get<double>(), c.model.mtp_lambda);
    EXPECT_EQ(row["bias_update_speed"].get<double>(), c.model.bias_update_speed);
  }
  ASSERT_EQ(model.scheduled.size(), 40u);
  EXPECT_EQ(model.scheduled.back(), std::make_pair(c.model.mtp_lambda, c.model.bias_update_speed));
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

TEST(Trainer, SchedulesSwitchAtTheirStepsAndAResumeRecomputesThem) {
  TempDir full("sched_full"), resumed("sched_resumed");
  TrainConfig c = toy_config();  // 12 steps
  c.save_every = 5;
  c.mtp_lambda_schedule = "0.3,0.1@0.5";          // 0-based steps 0..5: 0.3, from step 6 (row 7): 0.1
  c.bias_update_speed_schedule = "0.001,0@0.75";  // from step 9 (row 10): 0
  BigramModel a(kByteVocabSize);
  run_toy(c, a, full.path);
  const auto rows = read_jsonl((full.path / "metrics.jsonl").string());
  ASSERT_EQ(rows.size(), 12u);
  for (const auto& row : rows) {
    const int64_t step = row["step"].get<int64_t>();
    EXPECT_EQ(row["mtp_lambda"].get<double>(), step <= 6 ? 0.3 : 0.1) << row.dump();
    EXPECT_EQ(row["bias_update_speed"].get<double>(), step <= 9 ? 0.001 : 0.0) << row.dump();
  }
  // The model got the step's values before its forward, once per step.
  ASSERT_EQ(a.scheduled.size(), 12u);
  EXPECT_EQ(a.scheduled[5], std::make_pair(0.3, 0.001));
  EXPECT_EQ(a.scheduled[6], std::make_pair(0.1, 0.001));
  EXPECT_EQ(a.scheduled[9], std::make_pair(0.1, 0.0));

  // A resume from step 5 starts from the values of step 5 (nothing carried over) and logs the same rows.
  const CheckpointMeta meta = read_checkpoint_meta((full.path / "checkpoints" / "step-00000005").string());
  BigramModel b(kByteVocabSize, /*seed=*/999);
  b.set_step(5);
  run_toy(c, b, resumed.path, &meta);
  ASSERT_EQ(b.scheduled.size(), 7u);
  EXPECT_EQ(b.scheduled.front(), std::make_pair(0.3, 0.001));
  const auto rows_full = deterministic_metrics(full.path);
  const auto rows_resumed = deterministic_metrics(resumed.path);
  ASSERT_EQ(rows_resumed.size(), 7u);
  for (size_t i = 0; i < rows_resumed.size(); ++i) EXPECT_EQ(rows_resumed[i].dump(), rows_full[i + 5].dump());
}

TEST(Trainer, AResumeWarnsOfAChangedScheduleButNotOfOneTheCheckpointPredates) {
  TempDir first("sched_first"), older("sched_older"), changed("sched_changed");
  TrainConfig c = toy_config();
  c.steps = 6;
  c.save_every = 3;
  BigramModel a(kByteVocabSize);
  run_toy(c, a, first.path);
  const std::string step3 = (first.path / "checkpoints" / "step-00000003").string();
  const auto schedule_warnings = [](const fs::path& run) {
    std::vector<std::string> out;
    for (const auto& e : read_jsonl((run / "events.jsonl").string()))
      if (e["event"] == "warning" && e["detail"].get<std::string>().find("_schedule'") != std::string::npos)
        out.push_back(e["detail"].get<std::string>());
    return out;
  };
  // A checkpoint written before the schedule keys existed, resumed with their empty default: the same computation.
  CheckpointMeta meta = read_checkpoint_meta(step3);
  meta.config["train"].erase("mtp_lambda_schedule");
  meta.config["train"].erase("bias_update_speed_schedule");
  BigramModel b(kByteVocabSize);
  b.set_step(3);
  run_toy(c, b, older.path, &meta);
  EXPECT_TRUE(schedule_warnings(older.path).empty());
  // A schedule other than the checkpoint's run had: warned, naming the key.
  TrainConfig other = c;
  other.mtp_lambda_schedule = "0.3,0.1@0.5";
  const CheckpointMeta meta2 = read_checkpoint_meta(step3);
  BigramModel d(kByteVocabSize);
  d.set_step(3);
  run_toy(other, d, changed.path, &meta2);
  const std::vector<std::string> warned = schedule_warnings(changed.path);
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find("'train.mtp_lambda_schedule' = 0.3,0.1@0.5"), std::string::npos) << warned[0];
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

TEST(Trainer, SummaryAfterAResumeCoversTheWholeRun) {
  TempDir full("sum-full"), parts("sum-parts");
  TrainConfig c = toy_config();  // 12 steps
  BigramModel a(kByteVocabSize);
  const TrainResult whole = run_toy(c, a, full.path);
  // The same run, interrupted after step 8 and resumed in place.
  StoppingModel b(kByteVocabSize);
  b.stop_after_step = 8;
  EXPECT_NE(error_of([&] { run_toy(c, b, parts.path); }).find("interrupted at step 8"), std::string::npos);
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(parts.path.string()));
  ASSERT_EQ(meta.state.step, 8);
  EXPECT_GT(meta.state.wall_seconds, 0.0) << "the checkpoint records the training time so far";
  // A memory maximum recorded before the resume carries over (edit the saved maximum to tell it apart).
  nlohmann::json state = nlohmann::json::parse(read_file((fs::path(meta.dir) / "state.json").string()));
  ASSERT_TRUE(state.contains("memory")) << state.dump();
  state["memory"]["workspace_peak_bytes"] = int64_t{1} << 40;
  write_file_atomic((fs::path(meta.dir) / "state.json").string(), state.dump(2));
  const CheckpointMeta edited = read_checkpoint_meta(meta.dir);
  BigramModel b2(kByteVocabSize);
  b2.set_step(8);
  const TrainResult resumed = run_toy(c, b2, parts.path, &edited);
  // Final train loss: the mean of steps 3..12, across the resume, bit for bit the uninterrupted run's.
  EXPECT_EQ(resumed.final_train_loss, whole.final_train_loss);
  const auto summary = nlohmann::json::parse(read_file((parts.path / "summary.json").string()));
  EXPECT_EQ(summary["final train loss (mean of last 10 steps)"].get<double>(), whole.final_train_loss);
  EXPECT_EQ(summary["memory (bytes, max over steps)"]["workspace_peak_bytes"].get<int64_t>(), int64_t{1} << 40);
  // Wall time: both sessions.
  EXPECT_NEAR(resumed.seconds, edited.state.wall_seconds + resumed.session_seconds, 1e-9);
  EXPECT_GT(resumed.seconds, resumed.session_seconds);
  EXPECT_TRUE(summary.contains("wall time (s)"));
  EXPECT_TRUE(summary.contains("wall time this session (s)"));
}

TEST(Trainer, TheFinalCheckpointIsOnDiskBeforeTheFinalEvaluation) {
  TempDir dir("final-order"), ref("final-ref");
  TrainConfig c = toy_config();
  BigramModel plain(kByteVocabSize);
  const TrainResult uninterrupted = run_toy(c, plain, ref.path);
  StoppingModel m(kByteVocabSize);
  m.final_step = 12;
  m.run_dir = dir.path;
  m.stop_in_final_eval = true;  // as if the user pressed Ctrl-C (or the machine went down) during it
  const std::string msg = error_of([&] { run_toy(c, m, dir.path); });
  EXPECT_EQ(m.latest_at_final_eval, "step-00000012\n");
  EXPECT_NE(msg.find("during the final evaluation"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  EXPECT_FALSE(stop_requested());
  EXPECT_FALSE(fs::exists(dir.path / "summary.json"));
  // Resuming finishes the run: the final evaluation and the summary, no more steps.
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string()));
  EXPECT_EQ(meta.state.step, 12);
  BigramModel b(kByteVocabSize);
  b.set_step(12);
  const TrainResult finished = run_toy(c, b, dir.path, &meta);
  EXPECT_EQ(b.applied_, 0);
  EXPECT_EQ(finished.final_eval_loss, uninterrupted.final_eval_loss);
  EXPECT_EQ(finished.final_train_loss, uninterrupted.final_train_loss);
  EXPECT_TRUE(fs::exists(dir.path / "summary.json"));
  EXPECT_EQ(read_jsonl((dir.path / "metrics.jsonl").string()).size(), 12u);
  // Now it is complete.
  BigramModel again(kByteVocabSize);
  const CheckpointMeta done = read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string()));
  EXPECT_NE(error_of([&] { run_toy(c, again, dir.path, &done); }).find("is complete (12 of 12 steps)"), std::string::npos);
}

TEST(Trainer, TheFinalEvaluationSizeIsASetting) {
  TempDir dir("final-size");
  TrainConfig c = toy_config();
  c.steps = 2;
  c.final_eval_windows = 3;
  BigramModel m(kByteVocabSize);
  run_toy(c, m, dir.path);
  const std::string log = read_file((dir.path / "train.log").string());
  EXPECT_NE(log.find("step 2: held-out loss"), std::string::npos) << log;
  EXPECT_NE(log.find("(3 windows of 16 tokens)"), std::string::npos) << log;
}

TEST(Trainer, ARunStoppedByNonFiniteStepsIsResumedInPlace) {
  TempDir dir("nan-resume");
  TrainConfig c = toy_config();
  c.steps = 8;
  c.max_bad_steps = 2;
  BigramModel a(kByteVocabSize);
  a.nan_at_steps = {3, 4};  // the 4th and 5th steps
  const std::string msg = error_of([&] { run_toy(c, a, dir.path); });
  EXPECT_NE(msg.find("training stopped at step 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  const CheckpointMeta meta = read_checkpoint_meta(resolve_checkpoint_dir(dir.path.string()));
  EXPECT_EQ(meta.state.step, 5);
  EXPECT_EQ(meta.state.skipped_steps, 2);
  EXPECT_EQ(meta.state.bad_in_row, 0) << "a resumed run gets a fresh allowance of non-finite steps";
  EXPECT_TRUE(fs::exists(dir.path / "report.html"));
  BigramModel b(kByteVocabSize);
  b.set_step(5);
  const TrainResult r = run_toy(c, b, dir.path, &meta);
  EXPECT_EQ(r.steps_done, 8);
  EXPECT_EQ(r.skipped_steps, 2);
  EXPECT_EQ(read_jsonl((dir.path / "metrics.jsonl").string()).size(), 8u);
}

TEST(Checkpoint, RetentionKeepsTheLastNEveryKthAndAlwaysLatest) {
  TempDir dir("retention");
  TrainConfig c = toy_config();
  c.save_every = 1;
  c.keep_last = 0;  // keep all
  BigramModel a(kByteVocabSize);
  run_toy(c, a, dir.path);
  const auto names = [&] {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir.path / "checkpoints"))
      if (e.is_directory()) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_EQ(names().size(), 12u);
  // "latest" names an older checkpoint (as after resuming from it): retention never deletes it.
  write_file_atomic((dir.path / "checkpoints" / "latest").string(), "step-00000004\n");
  const std::vector<std::string> removed = prune_checkpoints(dir.path.string(), 2, 5);
  EXPECT_EQ(names(), (std::vector<std::string>{"step-00000004", "step-00000005", "step-00000010", "step-00000011",
                                               "step-00000012"}));
  EXPECT_EQ(removed.size(), 7u);
  EXPECT_EQ(resolve_checkpoint_dir(dir.path.string()), (dir.path / "checkpoints" / "step-00000004").string());
  EXPECT_TRUE(prune_checkpoints(dir.path.string(), 0, 0).empty()) << "keep_last 0: keep everything";
}

TEST(Report, ARunWithoutEvaluationsDrawsNoEmptyHeldOutPanel) {
  TempDir dir("report-noeval");
  TrainConfig c = toy_config();
  c.steps = 6;
  c.eval_every = 0;
  BigramModel a(kByteVocabSize);
  request_stop();  // stopped after step 1: no evaluation yet, the report is written at the stop
  EXPECT_NE(error_of([&] { run_toy(c, a, dir.path); }).find("interrupted"), std::string::npos);
  const std::string html = read_file((dir.path / "report.html").string());
  EXPECT_EQ(html.find("Held-out bits per token"), std::string::npos) << "an empty panel, and the wrong unit for bytes";
  EXPECT_EQ(html.find("Held-out bits per"), std::string::npos);
}
