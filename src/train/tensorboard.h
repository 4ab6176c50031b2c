// TensorBoard event files beside metrics.jsonl, so `tensorboard --logdir runs/` shows every run's loss, learning
// rate, gradient norm, throughput, held-out loss and numerics health (saturation, underflow, GEMM error).
//
// Format: RUN/events.out.tfevents.<unix seconds>.<host>.<pid> is a sequence of TFRecords
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | payload | uint32 masked CRC-32C of it
// (masked crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8), each payload an Event protobuf (tensorboard_event.proto):
// first the file version "brain.Event:2", then one Event per logged row with a Summary of scalar values. The
// protobuf encoding comes from Debian's protobuf (generated lite classes); the CRC-32C is computed here (no
// CRC-32C library is packaged on both the development and the GPU machine).
//
// The event file is derived data: metrics.jsonl and eval.jsonl stay the record of a run. On a resume the logs are
// cut back to the checkpoint's step and the event files are rebuilt from them (open_run_event_file), so
// TensorBoard never shows a step twice or a step the resumed run discarded.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8train::train {

// CRC-32C (Castagnoli) of `bytes`, and the masked form TFRecord stores.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);
// One TFRecord around `payload`.
std::string tfrecord(std::string_view payload);

using Scalars = std::vector<std::pair<std::string, double>>;

// Appends Events to a new event file in `dir` (which must exist); each record is flushed as it is written.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event at `step` with a Summary of the finite values (a non-finite value is left out, as metrics.jsonl
  // writes null for it); wall_time < 0: now.
  void scalars(int64_t step, const Scalars& values, double wall_time = -1);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::FILE* file_ = nullptr;
  std::string path_;
};

// What a metrics.jsonl row or an eval.jsonl row shows in TensorBoard (tag, value):
//   train/loss (total: next-token + MTP + balance), train/loss_next_token, train/loss_mtp, train/loss_balance,
//   train/learning_rate, train/mtp_lambda, train/bias_update_speed, train/grad_norm, train/tokens_per_s,
//   train/max_expert_load_ratio;
//   on health-sampled steps numerics/gemm_rel_error_<fprop|dgrad|wgrad> (mean over the Linears),
//   numerics/saturation_<activations|weights|gradients> (fraction of the quantized elements clamped),
//   numerics/underflow_<...> (fraction of the nonzero elements flushed to zero), memory/<category>_bytes;
//   eval rows: eval/loss and eval/bits_per_byte (or eval/bits_per_token).
Scalars tensorboard_scalars(const nlohmann::json& row);

// The event file of a training session in RUN: a fresh run gets a new file; a resumed one (`rebuild`) first
// deletes the earlier sessions' event files and writes one rebuilt from RUN/metrics.jsonl and RUN/eval.jsonl.
std::unique_ptr<EventFileWriter> open_run_event_file(const std::string& run_dir, bool rebuild);

}  // namespace fp8train::train
