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
  thread_ = std::thread([this] { worker(); });
}

WeightEma::~WeightEma() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WeightEma::worker() {
  const size_t n = ema_.size();
  for (;;) {
    int buffer = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      buffer = jobs_.front();
    }
    const auto start = Clock::now();
    try {
      const float* w = nullptr;
      if (buffer < 0) {
        w = weights_.data<float>();
      } else {
        staging_[buffer]->wait_copied();
        w = static_cast<const float*>(staging_[buffer]->data());
      }
      float* e = ema_.data();
      const float d = decay_f_, k = keep_f_;
      for (size_t i = 0; i < n; ++i) e[i] = d * e[i] + k * w[i];
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.pop_front();
      ++completed_;
      blend_seconds_ += seconds_since(start);
    }
    cv_.notify_all();
  }
}

void WeightEma::wait_idle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return completed_ == submitted_; });
  if (error_) std::rethrow_exception(error_);
}

void WeightEma::before_weights_change() {
  const auto start = Clock::now();
  if (staging_[0]) {
    // A device-side wait: the compute stream's next work (the optimizer step) follows the last copy.
    if (last_buffer_ >= 0) staging_[last_buffer_]->order_before_compute();
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    wait_idle(lock);  // the host thread has finished reading the arena in place
  }
  step_seconds_ += seconds_since(start);
}

void WeightEma::update() {
  const auto start = Clock::now();
  int buffer = -1;
  if (staging_[0]) {
    buffer = next_buffer_;
    {
      // The buffer about to be refilled was last used by the update before the previous one: wait until the host
      // thread is done blending from it (at most one update may still be pending).
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return completed_ + 1 >= submitted_; });
      if (error_) std::rethrow_exception(error_);
    }
    staging_[buffer]->copy_async(weights_.raw());
    last_buffer_ = buffer;
    next_buffer_ ^= 1;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    jobs_.push_back(buffer);
    ++submitted_;
  }
  cv_.notify_all();
  step_seconds_ += seconds_since(start);
}

double WeightEma::blend_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return blend_seconds_;
}

const std::vector<float>& WeightEma::values() {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  return ema_;
}

void WeightEma::set_values(std::vector<float> values) {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  FP8T_CHECK(values.size() == ema_.size(), "the EMA has {} values, {} were given", ema_.size(), values.size());
  ema_ = std::move(values);
}

}  // namespace fp8train::train
