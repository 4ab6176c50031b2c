// ExecCtx: where and how an op runs. Every op entry point takes one; nothing below reaches for a global stream.
//   device  — the device every tensor of the op lives on (checked by the entry points)
//   stream  — the queue the op's kernels are launched on: a cudaStream_t on CUDA; null on the CPU, where an op
//             runs on the calling thread (and its OpenMP team) and has finished when it returns
//   seed    — the base of the counter-based random streams of stochastic ops (e.g. INT8 stochastic rounding);
//             an op derives its stream from this seed and its own identifiers, so results never depend on
//             scheduling
//   profile — optional: every op launched through the op table adds its wall time here (OpProfile), so a
//             benchmark can say where a step's time goes; null costs nothing
// Scratch memory comes from scratch(): the device's allocator under MemCategory::Workspace (the CPU and CUDA
// allocators both cache freed blocks, so a training step's repeated scratch requests cost no system calls).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "tensor/tensor.h"

namespace fp8train {

// Wall time per op (seconds, calls). On the CPU an op has finished when it returns, so the time is the op's;
// on a GPU it is the launch's, unless `synchronizing` is set: then each op launched through the op table waits
// for the device before and after it, so the time is the op's own (and the step runs slower: a breakdown, not a
// throughput).
class OpProfile {
 public:
  // `shapes`: the quantization ops record under "op ROWSxCOLS OUTPUTS" (e.g. "quantize 8192x2048 both"), so a
  // breakdown can tell which activations cost what.
  explicit OpProfile(bool synchronizing = false, bool shapes = false) : synchronizing_(synchronizing), shapes_(shapes) {}
  bool synchronizing() const { return synchronizing_; }
  bool shapes() const { return shapes_; }
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  void add(std::string_view op, double seconds);
  std::map<std::string, Entry> entries() const;
  void clear();

 private:
  bool synchronizing_ = false;
  bool shapes_ = false;
  mutable std::mutex mutex_;
  std::map<std::string, Entry, std::less<>> entries_;
};

struct ExecCtx {
  Device device = Device::cpu();
  void* stream = nullptr;  // cudaStream_t on CUDA devices
  uint64_t seed = 0;
  OpProfile* profile = nullptr;

  // The context of a device: its backend's stream (the CPU has none).
  static ExecCtx on(Device device);
  // The CPU context (no stream, seed 0): what tests and host-side tools use.
  static const ExecCtx& cpu();

  ExecCtx with_seed(uint64_t s) const {
    ExecCtx c = *this;
    c.seed = s;
    return c;
  }
  // The same context on another queue of its device, e.g. a side queue's stream; null keeps this context's (the
  // CPU's side queue is the calling thread itself).
  ExecCtx with_stream(void* s) const {
    ExecCtx c = *this;
    if (s != nullptr) c.stream = s;
    return c;
  }
  // A temporary on this context's device. On a GPU the caching allocator books every block to the device's compute
  // stream, whatever this context's stream: a block used by work queued on a side stream must stay alive until the
  // compute stream waits for that work (or be owned by the caller for as long as the side stream uses it, as ZeRO-1's
  // receive buffer is), else the compute stream may be handed it while the side stream still reads it.
  Tensor scratch(Shape shape, DType dtype) const {
    return Tensor::empty(std::move(shape), dtype, MemCategory::Workspace, device);
  }
  // Waits until everything queued on this context has finished (a no-op on the CPU).
  void synchronize() const;
};

}  // namespace fp8train
