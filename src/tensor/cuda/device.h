// CUDA device infrastructure: device discovery and selection, device properties, RAII streams and events.
// Everything throws fp8train::Error on failure; device_count() alone never throws (0 = no usable GPU), so a
// CPU-only machine can ask whether CUDA is there.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace fp8train::cuda {

// Number of CUDA devices usable by this process; 0 when there is no driver or no device.
int device_count();

// Makes `ordinal` the current device of the calling thread (checked against device_count()).
void select_device(int ordinal);
int current_device();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t global_mem_bytes = 0;
  size_t smem_per_block_optin = 0;  // largest dynamic shared memory a block may request
  int clock_khz = 0, memory_clock_khz = 0, memory_bus_bits = 0;
  std::string describe() const;  // "NVIDIA H200 (sm_90, 132 SMs, 60 MiB L2, 139.8 GiB)"
};
DeviceInfo device_info(int ordinal);

// Throws unless the current device is a Hopper (sm_90) GPU: the kernels are built for sm_90a only.
void require_hopper(const char* what);

// An owned, non-blocking CUDA stream on the current device.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An owned CUDA event with timing enabled.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace fp8train::cuda
