// The host-side weight EMA (see ema.h).
#include "train/ema.h"

#include <chrono>

#include "common/error.h"

namespace fp8train::train {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

WeightEma::WeightEma(const Tensor& weights, double decay) : weights_(weights), decay_(decay) {
  FP8T_CHECK(weights.defined() && weights.dtype() == DType::F32 && weights.is_contiguous(),
             "the weight EMA needs the contiguous F32 weight arena, got {}", weights.str());
  FP8T_CHECK(decay >= 0.0 && decay < 1.0, "the EMA decay must be in [0, 1), got {}", decay);
  decay_f_ = static_cast<float>(decay);
  keep_f_ = static_cast<float>(1.0 - decay);
  ema_ = weights.to_vector<float>();  // the starting point: the weights now
  if (!weights.device().is_cpu()) {
    const size_t bytes = weights.nbytes();
    for (auto& s : staging_) {
      s = backend(weights.device()).host_staging(bytes);
      FP8T_CHECK(s != nullptr, "the {} backend has no asynchronous host copies for the weight EMA",
                 weights.device().str());
    }
  }
}

WeightEma::~WeightEma() = default;  // the worker stops first (ema.h: its last member)

void WeightEma::blend(int buffer) {
  const auto start = Clock::now();
  const float* w = nullptr;
  if (buffer < 0) {
    w = weights_.data<float>();
  } else {
    staging_[buffer]->wait_copied();
    w = static_cast<const float*>(staging_[buffer]->data());
  }
  float* e = ema_.data();
  const size_t n = ema_.size();
  const float d = decay_f_, k = keep_f_;
  for (size_t i = 0; i < n; ++i) e[i] = d * e[i] + k * w[i];
  std::lock_guard lock(seconds_mutex_);
  blend_seconds_ += seconds_since(start);
}

void WeightEma::before_weights_change() {
  const auto start = Clock::now();
  if (staging_[0]) {
    // A device-side wait: the compute stream's next work (the optimizer step) follows the last copy.
    if (last_buffer_ >= 0) staging_[last_buffer_]->order_before_compute();
  } else {
    worker_.wait_pending(0);  // the host thread has finished reading the arena in place
  }
  step_seconds_ += seconds_since(start);
}

void WeightEma::update() {
  const auto start = Clock::now();
  int buffer = -1;
  if (staging_[0]) {
    buffer = next_buffer_;
    // The buffer about to be refilled was last used by the update before the previous one: wait until the host
    // thread is done blending from it (at most one update may still be pending).
    worker_.wait_pending(1);
    staging_[buffer]->copy_async(weights_.raw());
    last_buffer_ = buffer;
    next_buffer_ ^= 1;
  }
  worker_.submit([this, buffer] { blend(buffer); });
  step_seconds_ += seconds_since(start);
}

double WeightEma::blend_seconds() {
  std::lock_guard lock(seconds_mutex_);
  return blend_seconds_;
}

const std::vector<float>& WeightEma::values() {
  worker_.wait_pending(0);
  return ema_;
}

void WeightEma::set_values(std::vector<float> values) {
  worker_.wait_pending(0);
  FP8T_CHECK(values.size() == ema_.size(), "the EMA has {} values, {} were given", ema_.size(), values.size());
  ema_ = std::move(values);
}

}  // namespace fp8train::train
