// WeightEma: an exponential moving average of the master weights, kept in host memory and updated off the
// training step's critical path (DeepSeek-V3 keeps its EMA in CPU memory, updated asynchronously).
//   ema ← d·ema + (1 − d)·w after each applied optimizer step (d = train.ema_decay), elementwise in FP32, starting
//   from the weights the EMA was created with. The values cover the whole flat F32 arena (its alignment padding
//   included); ArenaLayout views address the parameters in it.
// How it stays off the step:
//   update() is called right after the optimizer step and returns at once. One host thread applies the blends in
//   order. On the CPU it reads the weight arena in place, so the *next* optimizer step must not start before that
//   read is done: before_weights_change() blocks until it is (the blend of a few MB is far shorter than a forward
//   and backward, so it normally returns at once). On a GPU, update() queues the copy of the arena into pinned host
//   memory on a side stream (Backend::host_staging) that starts when the compute stream's optimizer step is done;
//   before_weights_change() makes the compute stream wait for that copy (a device-side wait, none on the host), so
//   the next optimizer step cannot overwrite weights still being copied while the forward and backward in between
//   overlap the copy. Two staging buffers alternate (double buffering): update() blocks only when the host thread
//   is still blending from the buffer it is about to refill, i.e. more than one update behind.
// Determinism: each element's blend is a fixed FP32 expression, so the EMA is a pure function of the weights'
// history; saved and restored exactly in checkpoints, a resumed run continues it bit for bit.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/host_worker.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace fp8train::train {

class WeightEma {
 public:
  // weights: the flat F32 master-weight arena (optim::ParamArenas::values.flat()), on any device; it must outlive
  // this object. decay in [0, 1).
  WeightEma(const Tensor& weights, double decay);
  ~WeightEma();
  WeightEma(const WeightEma&) = delete;
  WeightEma& operator=(const WeightEma&) = delete;

  double decay() const { return decay_; }
  // Call before anything overwrites the weights (the next optimizer step): see above.
  void before_weights_change();
  // Call after the weights changed (an applied optimizer step): queues ema ← d·ema + (1 − d)·w.
  void update();
  // Waits for every queued update, then returns the EMA ([weights.numel()] floats, host memory).
  const std::vector<float>& values();
  // Replaces the EMA (a checkpoint's); waits for the queued updates first. Size must match.
  void set_values(std::vector<float> values);
  // Its cost, in seconds so far: the host thread's blending (and waiting for the copies on a GPU), and the training
  // thread's time inside before_weights_change and update (what the steps actually waited for).
  double blend_seconds();
  double step_seconds() const { return step_seconds_; }

 private:
  void blend(int buffer);  // on the worker: ema <- d*ema + (1 - d)*w from a staging buffer (-1: the arena in place)

  Tensor weights_;
  float decay_f_, keep_f_;
  double decay_;
  std::vector<float> ema_;
  std::unique_ptr<HostStaging> staging_[2];  // null on the CPU (the arena is read in place)
  int next_buffer_ = 0, last_buffer_ = -1;

  std::mutex seconds_mutex_;  // blend_seconds_ is written on the worker
  double blend_seconds_ = 0, step_seconds_ = 0;
  HostWorker worker_;  // last: stopped before the buffers and values its tasks use go
};

}  // namespace fp8train::train
