// TensorBoard event files (see tensorboard.h).
#include "train/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/error.h"
#include "tensorboard_event.pb.h"
#include "train/metrics.h"

namespace fp8train::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kEventFilePrefix = "events.out.tfevents.";

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void add(Scalars& out, const std::string& tag, const nlohmann::json& v) {
  if (v.is_number()) out.emplace_back(tag, v.get<double>());
}

}  // namespace

// CRC-32C written here: Debian 12 packages no CRC-32C library (libcrc32c is absent; ISA-L has one but is not in
// the GPU machine's image), and the few records a run writes need no hardware speed. Reflected polynomial
// 0x82F63B78, initial value and final XOR 0xFFFFFFFF, one table lookup per byte.
uint32_t crc32c(std::string_view bytes) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view payload) {
  std::string header;
  put_le(header, payload.size(), 8);
  std::string out = header;
  put_le(out, masked_crc32c(header), 4);
  out.append(payload);
  put_le(out, masked_crc32c(payload), 4);
  return out;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  path_ = (fs::path(dir) / fmt::format("{}{}.{}.{}", kEventFilePrefix, static_cast<int64_t>(unix_now()), host,
                                        ::getpid()))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  FP8T_CHECK(file_ != nullptr, "cannot create the TensorBoard event file '{}': {}", path_, std::strerror(errno));
  tensorboard::Event e;
  e.set_wall_time(unix_now());
  e.set_file_version("brain.Event:2");
  write_record(e.SerializeAsString());
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::write_record(const std::string& payload) {
  const std::string record = tfrecord(payload);
  FP8T_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size() && std::fflush(file_) == 0,
             "cannot write to '{}': {}", path_, std::strerror(errno));
}

void EventFileWriter::scalars(int64_t step, const Scalars& values, double wall_time) {
  tensorboard::Event e;
  e.set_wall_time(wall_time >= 0 ? wall_time : unix_now());
  e.set_step(step);
  tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, x] : values) {
    if (!std::isfinite(x)) continue;
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(x));
  }
  write_record(e.SerializeAsString());
}

Scalars tensorboard_scalars(const nlohmann::json& row) {
  Scalars s;
  if (!row.is_object()) return s;
  if (row.contains("eval_loss")) {  // an eval.jsonl row
    add(s, "eval/loss", row["eval_loss"]);
    if (row.contains("eval_bpb")) add(s, "eval/bits_per_byte", row["eval_bpb"]);
    if (row.contains("eval_bits_per_token")) add(s, "eval/bits_per_token", row["eval_bits_per_token"]);
    return s;
  }
  const std::pair<const char*, const char*> keys[] = {{"loss", "train/loss"},
                                                      {"loss_main", "train/loss_next_token"},
                                                      {"loss_mtp", "train/loss_mtp"},
                                                      {"loss_balance", "train/loss_balance"},
                                                      {"lr", "train/learning_rate"},
                                                      {"mtp_lambda", "train/mtp_lambda"},
                                                      {"bias_update_speed", "train/bias_update_speed"},
                                                      {"grad_norm", "train/grad_norm"},
                                                      {"tokens_per_s", "train/tokens_per_s"},
                                                      {"max_expert_load_ratio", "train/max_expert_load_ratio"}};
  for (const auto& [key, tag] : keys)
    if (row.contains(key)) add(s, tag, row[key]);
  if (row.contains("gemm_error") && row["gemm_error"].is_object())
    for (const auto& [kind, v] : row["gemm_error"].items())
      if (v.is_object() && v.contains("mean")) add(s, "numerics/gemm_rel_error_" + kind, v["mean"]);
  if (row.contains("health")) {
    const nlohmann::ordered_json q = quantization_health_summary(row["health"]);
    if (q.is_object())
      for (const auto& [role, v] : q.items()) {
        add(s, "numerics/saturation_" + role, v["saturated_fraction"]);
        add(s, "numerics/underflow_" + role, v["underflow_fraction"]);
      }
  }
  if (row.contains("memory") && row["memory"].is_object())
    for (const auto& [key, v] : row["memory"].items()) add(s, "memory/" + key, v);
  return s;
}

std::unique_ptr<EventFileWriter> open_run_event_file(const std::string& run_dir, bool rebuild) {
  if (rebuild) {
    // The logs are the record; the earlier sessions' event files may hold steps past the checkpoint.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(run_dir))
      if (entry.is_regular_file() && entry.path().filename().string().rfind(kEventFilePrefix, 0) == 0)
        fs::remove(entry.path(), ec);
  }
  auto writer = std::make_unique<EventFileWriter>(run_dir);
  if (rebuild) {
    // Each step's training row, then its evaluation (the order the trainer writes them in).
    std::map<int64_t, std::vector<nlohmann::json>> by_step;
    for (const char* file : {"metrics.jsonl", "eval.jsonl"})
      for (const nlohmann::json& row : read_jsonl((fs::path(run_dir) / file).string()))
        if (row.is_object() && row.contains("step") && row["step"].is_number_integer())
          by_step[row["step"].get<int64_t>()].push_back(row);
    for (const auto& [step, rows] : by_step)
      for (const nlohmann::json& row : rows) writer->scalars(step, tensorboard_scalars(row));
  }
  return writer;
}

}  // namespace fp8train::train
