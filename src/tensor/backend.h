// Backend: one per device kind — its allocator, copies between host and device, zero-fill and a
// synchronization point. The CPU backend always exists; the CUDA backend (tensor/cuda/) registers itself
// with register_backend() at start-up. `select_default_device` is called once at start-up: every tensor
// created without an explicit device lands there, so model code never branches on the device — it creates
// tensors and calls ops (ops/kernels.h dispatches each op to the implementation of its tensors' device).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "tensor/allocator.h"
#include "tensor/device.h"

namespace fp8train {

// Host memory that device memory is copied into on a side queue, for work done on host threads (the weight EMA,
// train/ema.h): page-locked on CUDA, so the copy is a true asynchronous DMA that the compute stream never waits for.
class HostStaging {
 public:
  virtual ~HostStaging() = default;
  // The staging buffer: the `bytes` given to Backend::host_staging.
  virtual void* data() = 0;
  // Queues a copy of the buffer's bytes from device memory `src` on a side queue, to start once everything queued
  // so far on the compute stream has finished; returns at once.
  virtual void copy_async(const void* src) = 0;
  // Blocks the calling host thread until the last copy_async has landed in data().
  virtual void wait_copied() = 0;
  // Makes the work queued next on the compute stream wait for the last copy_async, without a host wait: called
  // before that work overwrites the copy's source.
  virtual void order_before_compute() = 0;
};

// A second work queue beside a device's compute stream, with markers that order the two and timestamps on the
// compute stream: what lets a pipeline stage send and receive while it computes (dist/pipeline_executor.cpp).
// Markers are indices handed out in order and valid until reset(), which their user calls once they are spent.
// On the CPU there are no queues: work has finished when its call returns, so the ordering calls do nothing,
// side_stream() is null (the CPU context) and a timestamp reads the host clock.
class SideQueue {
 public:
  virtual ~SideQueue() = default;
  // ExecCtx::stream for work on the side queue.
  virtual void* side_stream() const = 0;
  // Work queued next on the side queue starts after everything queued so far on the compute stream.
  virtual void side_waits_for_compute() = 0;
  // A marker after everything queued so far on the side queue ...
  virtual int side_mark() = 0;
  // ... and work queued next on the compute stream starts after it (no host wait).
  virtual void compute_waits_for(int mark) = 0;
  // A timestamp on the compute stream, taken when the stream reaches it (after its work queued so far).
  virtual int time_mark() = 0;
  // Seconds between two timestamps; after synchronize().
  virtual double seconds_between(int from, int to) = 0;
  // Waits until both queues have finished everything queued.
  virtual void synchronize() = 0;
  // Forgets every marker and timestamp, and reuses their resources: a marker may be forgotten once the waits for
  // it are issued (they keep what it marked), a timestamp once it has been read (after synchronize()). Without a
  // reset the markers pile up.
  virtual void reset() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  virtual Allocator& allocator() = 0;
  // Copies `bytes` between two buffers, at least one of them on this backend's device (the other may be host).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // Waits until every queued operation on the device has finished (a no-op on the CPU).
  virtual void synchronize() = 0;
  // Waits until everything queued on `queue` (a queue of this device, e.g. a side queue's stream; null: the default
  // one) has finished.
  virtual void synchronize_queue(void* queue) {
    (void)queue;
    synchronize();
  }
  // The queue ops launch on by default (ExecCtx::on): a cudaStream_t on CUDA, null on the CPU.
  virtual void* stream() const { return nullptr; }
  // A staging buffer of `bytes` for asynchronous device-to-host copies (HostStaging); null where the device's
  // memory is host memory already (the CPU) and a consumer reads it in place.
  virtual std::unique_ptr<HostStaging> host_staging(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // A side queue beside the compute stream (SideQueue); the CPU's runs everything in place.
  virtual std::unique_ptr<SideQueue> side_queue();
};

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }
  Allocator& allocator() override { return allocator_; }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override {}

 private:
  CpuAllocator allocator_;
};

// The backend of a device; throws when that device kind has no registered backend.
Backend& backend(Device device);
// Installs the backend for backend->device() (one per device; replacing one that owns live tensors is an error
// the caller must avoid, so this is meant for start-up).
void register_backend(std::unique_ptr<Backend> backend);
bool has_backend(Device device);

// The side queues of a device, one per use, made on first use and kept for the process (their streams and pooled
// events are reused): the pipeline's transfers and the experts' exchanges each run on their own, so a transfer
// blocked on a peer never holds up the other's.
enum class SideQueueUse : uint8_t { Pipeline, Experts };
SideQueue& side_queue(Device device, SideQueueUse use);

// Where tensors go when no device is named (CPU until a start-up call changes it).
Device default_device();
void select_default_device(Device device);

}  // namespace fp8train
