// TensorBoard event files, read back independently of the writer: the TFRecord framing (length, masked
// CRC-32C of the length, payload, masked CRC-32C of the payload) checked with a bitwise CRC-32C written here,
// the Event / Summary protobuf records decoded with a wire-format reader written here (not the generated
// classes), and the values compared with what the trainer logged in metrics.jsonl and eval.jsonl. Also: a
// resumed run's event file holds every step once; the numerics-health counters become scalars.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "toy_model.h"
#include "train/atomic_file.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/tensorboard.h"
#include "train/trainer.h"

using namespace fp8train;
using namespace fp8train::train;
using fp8train::train::testing::BigramModel;
namespace fs = std::filesystem;

namespace {

// CRC-32C one bit at a time (reflected Castagnoli polynomial 0x82F63B78, initial and final XOR with ~0).
uint32_t reference_crc32c(std::string_view bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t reference_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t le(std::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<size_t>(i)]);
  return v;
}

// The protobuf wire format, just enough for Event and Summary.
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;   // wire 0
  uint64_t fixed = 0;    // wire 1 (64 bits) and 5 (32 bits)
  std::string bytes;     // wire 2
};
std::vector<Field> decode_fields(std::string_view m) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (i >= m.size() || shift > 63) throw std::runtime_error("truncated varint");
      const auto c = static_cast<unsigned char>(m[i++]);
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
  };
  while (i < m.size()) {
    Field f;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    if (f.wire == 0) {
      f.varint = varint();
    } else if (f.wire == 1 || f.wire == 5) {
      const int n = f.wire == 1 ? 8 : 4;
      if (i + static_cast<size_t>(n) > m.size()) throw std::runtime_error("truncated fixed field");
      f.fixed = le(m, i, n);
      i += static_cast<size_t>(n);
    } else if (f.wire == 2) {
      const uint64_t n = varint();
      if (i + n > m.size()) throw std::runtime_error("truncated length-delimited field");
      f.bytes = std::string(m.substr(i, n));
      i += n;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.wire));
    }
    out.push_back(std::move(f));
  }
  return out;
}

struct Scalar {
  int64_t step = 0;
  double wall_time = 0;
  std::string tag;
  float value = 0;
};
struct EventFile {
  std::string file_version;
  std::vector<Scalar> scalars;
  int records = 0;
};

// Reads an event file record by record, checking the framing and both CRCs of every record.
EventFile read_event_file(const fs::path& path) {
  const std::string b = read_file(path.string());
  EventFile ef;
  size_t at = 0;
  while (at < b.size()) {
    EXPECT_LE(at + 12, b.size()) << "torn record header";
    if (at + 12 > b.size()) break;
    const uint64_t n = le(b, at, 8);
    EXPECT_EQ(le(b, at + 8, 4), reference_mask(reference_crc32c(std::string_view(b).substr(at, 8))))
        << "length CRC of record " << ef.records;
    EXPECT_LE(at + 12 + n + 4, b.size()) << "torn record";
    if (at + 12 + n + 4 > b.size()) break;
    const std::string_view payload = std::string_view(b).substr(at + 12, n);
    EXPECT_EQ(le(b, at + 12 + n, 4), reference_mask(reference_crc32c(payload))) << "data CRC of record " << ef.records;
    at += 12 + n + 4;
    ++ef.records;
    double wall = 0;
    int64_t step = 0;
    std::vector<std::pair<std::string, float>> values;
    for (const Field& f : decode_fields(payload)) {
      if (f.number == 1 && f.wire == 1) std::memcpy(&wall, &f.fixed, sizeof wall);
      if (f.number == 2 && f.wire == 0) step = static_cast<int64_t>(f.varint);
      if (f.number == 3 && f.wire == 2) ef.file_version = f.bytes;
      if (f.number == 5 && f.wire == 2)  // Summary
        for (const Field& v : decode_fields(f.bytes)) {
          EXPECT_EQ(v.number, 1u);  // repeated Value value = 1
          std::string tag;
          float x = std::nanf("");
          for (const Field& g : decode_fields(v.bytes)) {
            if (g.number == 1 && g.wire == 2) tag = g.bytes;
            if (g.number == 2 && g.wire == 5) {
              const auto bits = static_cast<uint32_t>(g.fixed);
              std::memcpy(&x, &bits, sizeof x);
            }
          }
          values.emplace_back(tag, x);
        }
    }
    EXPECT_GT(wall, 1.5e9) << "wall_time is seconds since 1970";
    for (const auto& [tag, x] : values) ef.scalars.push_back({step, wall, tag, x});
  }
  return ef;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  return files;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("fp8train-tb-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(TensorBoard, Crc32cIsCastagnoliAndMaskedAsTfRecordExpects) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);  // the standard check value of CRC-32C
  EXPECT_EQ(reference_crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  std::mt19937 rng(7);
  for (int len : {1, 7, 8, 63, 64, 1000, 4099}) {
    std::string s(static_cast<size_t>(len), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    EXPECT_EQ(crc32c(s), reference_crc32c(s)) << len;
    EXPECT_EQ(masked_crc32c(s), reference_mask(reference_crc32c(s))) << len;
  }
  const std::string r = tfrecord("abc");
  ASSERT_EQ(r.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(le(r, 0, 8), 3u);
  EXPECT_EQ(r.substr(12, 3), "abc");
}

TEST(TensorBoard, EventFileRoundTrips) {
  TempDir dir("roundtrip");
  std::string path;
  {
    EventFileWriter w(dir.path.string());
    path = w.path();
    w.scalars(1, {{"train/loss", 2.5}, {"train/learning_rate", 3e-3}, {"skipped", std::nan("")}});
    w.scalars(2, {{"train/loss", 2.25}, {"numerics/saturation_weights", 0.0}});
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir.path);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  const EventFile ef = read_event_file(path);
  EXPECT_EQ(ef.file_version, "brain.Event:2");
  EXPECT_EQ(ef.records, 3);
  ASSERT_EQ(ef.scalars.size(), 4u) << "a non-finite value is left out, like a null in metrics.jsonl";
  EXPECT_EQ(ef.scalars[0].tag, "train/loss");
  EXPECT_EQ(ef.scalars[0].step, 1);
  EXPECT_EQ(ef.scalars[0].value, 2.5f);
  EXPECT_EQ(ef.scalars[1].tag, "train/learning_rate");
  EXPECT_EQ(ef.scalars[1].value, 3e-3f);
  EXPECT_EQ(ef.scalars[2].step, 2);
  EXPECT_EQ(ef.scalars[2].value, 2.25f);
  // A zero is written explicitly (TensorBoard ignores a value without its simple_value field).
  EXPECT_EQ(ef.scalars[3].tag, "numerics/saturation_weights");
  EXPECT_EQ(ef.scalars[3].value, 0.0f);
  // A flipped bit is caught by the data CRC (the check above is real).
  std::string bytes = read_file(path);
  bytes[bytes.size() - 6] ^= 0x01;
  write_file_atomic(path, bytes);
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    (void)read_event_file(path);
  }
  EXPECT_GE(failures.size(), 1) << "the corrupted record passed the CRC check";
}

TEST(TensorBoard, HealthCountersBecomeScalars) {
  const nlohmann::json row = nlohmann::json::parse(R"({
    "step": 4, "loss": 2.0, "loss_main": 1.5, "loss_mtp": 0.4, "loss_balance": 0.1, "lr": 0.001,
    "mtp_lambda": 0.3, "bias_update_speed": 0.0005, "tokens_per_s": 1000.0, "grad_norm": 0.5, "max_expert_load_ratio": 1.25,
    "memory": {"master_weights_bytes": 100},
    "health": [
      {"linear": "l0", "gemm": "fprop", "rel_error": 0.01, "err_sq": 1, "ref_sq": 10000,
       "a": {"elements": 100, "nonzero": 80, "saturated": 1, "underflow": 4},
       "b": {"elements": 50, "nonzero": 50, "saturated": 0, "underflow": 5}},
      {"linear": "l0", "gemm": "dgrad", "rel_error": 0.02, "err_sq": 4, "ref_sq": 10000,
       "a": {"elements": 100, "nonzero": 100, "saturated": 3, "underflow": 10},
       "b": {"elements": 50, "nonzero": 50, "saturated": 0, "underflow": 0}},
      {"linear": "l0", "gemm": "wgrad", "rel_error": 0.03, "err_sq": 9, "ref_sq": 10000,
       "a": {"elements": 100, "nonzero": 100, "saturated": 0, "underflow": 10},
       "b": {"elements": 100, "nonzero": 80, "saturated": 0, "underflow": 4}}],
    "gemm_error": {"fprop": {"mean": 0.01}, "dgrad": {"mean": 0.02}, "wgrad": {"mean": 0.03}}})");
  std::map<std::string, double> s;
  for (const auto& [tag, v] : tensorboard_scalars(row)) s[tag] = v;
  EXPECT_EQ(s.at("train/loss"), 2.0);
  EXPECT_EQ(s.at("train/loss_next_token"), 1.5);
  EXPECT_EQ(s.at("train/learning_rate"), 0.001);
  EXPECT_EQ(s.at("train/mtp_lambda"), 0.3);
  EXPECT_EQ(s.at("train/bias_update_speed"), 0.0005);
  EXPECT_EQ(s.at("train/grad_norm"), 0.5);
  EXPECT_EQ(s.at("train/tokens_per_s"), 1000.0);
  EXPECT_EQ(s.at("numerics/gemm_rel_error_wgrad"), 0.03);
  // activations: fprop a + wgrad b = 200 elements, 160 nonzero, 1 saturated, 8 underflow
  EXPECT_DOUBLE_EQ(s.at("numerics/saturation_activations"), 1.0 / 200);
  EXPECT_DOUBLE_EQ(s.at("numerics/underflow_activations"), 8.0 / 160);
  // gradients: dgrad a + wgrad a; weights: fprop b + dgrad b
  EXPECT_DOUBLE_EQ(s.at("numerics/saturation_gradients"), 3.0 / 200);
  EXPECT_DOUBLE_EQ(s.at("numerics/underflow_gradients"), 20.0 / 200);
  EXPECT_DOUBLE_EQ(s.at("numerics/underflow_weights"), 5.0 / 100);
  EXPECT_EQ(s.at("memory/master_weights_bytes"), 100);
  std::map<std::string, double> e;
  for (const auto& [tag, v] : tensorboard_scalars(nlohmann::json::parse(R"({"step": 4, "eval_loss": 1.2, "eval_bpb": 1.7})")))
    e[tag] = v;
  EXPECT_EQ(e.at("eval/loss"), 1.2);
  EXPECT_EQ(e.at("eval/bits_per_byte"), 1.7);
}

TEST(TensorBoard, TheTrainerWritesTheCurvesAndAResumeKeepsEachStepOnce) {
  TempDir dir("trainer");
  TrainConfig c = preset_config("tiny");
  c.steps = 12;
  c.batch_size = 4;
  c.seq_len = 16;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.save_every = 4;
  c.keep_last = 0;
  c.warmup_steps = 2;
  static const TokenData data = embedded_corpus_data(3, 30000);
  auto run = [&](BigramModel& m, const CheckpointMeta* resume) {
    TrainOptions o;
    o.run_dir = dir.path.string();
    o.resume = resume;
    o.out = std::tmpfile();
    run_training(c, m, data, o);
    std::fclose(o.out);
  };
  BigramModel a(kByteVocabSize);
  run(a, nullptr);
  ASSERT_EQ(event_files(dir.path).size(), 1u);
  const auto check = [&](const EventFile& ef) {
    std::map<std::pair<std::string, int64_t>, float> by_tag_step;
    for (const Scalar& s : ef.scalars)
      EXPECT_TRUE(by_tag_step.emplace(std::make_pair(s.tag, s.step), s.value).second)
          << s.tag << " at step " << s.step << " appears twice";
    for (const auto& m : read_jsonl((dir.path / "metrics.jsonl").string())) {
      const int64_t step = m["step"];
      EXPECT_EQ(by_tag_step.at({"train/loss", step}), static_cast<float>(m["loss"].get<double>()));
      EXPECT_EQ(by_tag_step.at({"train/learning_rate", step}), static_cast<float>(m["lr"].get<double>()));
      EXPECT_EQ(by_tag_step.at({"train/grad_norm", step}), static_cast<float>(m["grad_norm"].get<double>()));
      EXPECT_EQ(by_tag_step.at({"train/tokens_per_s", step}), static_cast<float>(m["tokens_per_s"].get<double>()));
    }
    int evals = 0;
    for (const auto& e : read_jsonl((dir.path / "eval.jsonl").string())) {
      EXPECT_EQ(by_tag_step.at({"eval/loss", e["step"].get<int64_t>()}), static_cast<float>(e["eval_loss"].get<double>()));
      EXPECT_EQ(by_tag_step.at({"eval/bits_per_byte", e["step"].get<int64_t>()}),
                static_cast<float>(e["eval_bpb"].get<double>()));
      ++evals;
    }
    EXPECT_EQ(evals, 3);
    std::set<int64_t> steps;
    for (const Scalar& s : ef.scalars)
      if (s.tag == "train/loss") steps.insert(s.step);
    EXPECT_EQ(steps.size(), 12u);
  };
  check(read_event_file(event_files(dir.path).front()));
  // Resume in place from step 8: the steps after it are logged again; TensorBoard sees each step once.
  const CheckpointMeta meta = read_checkpoint_meta((dir.path / "checkpoints" / "step-00000008").string());
  BigramModel b(kByteVocabSize);
  b.set_step(8);
  run(b, &meta);
  const auto files = event_files(dir.path);
  ASSERT_EQ(files.size(), 1u) << "the earlier session's file is replaced by one rebuilt from the logs";
  check(read_event_file(files.front()));
}
