// Device discovery, selection, properties, streams and events (device.h).
#include "tensor/cuda/device.h"

#include "tensor/cuda/cuda_check.h"

namespace fp8train::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error so later calls start clean
    return 0;
  }
  return n;
}

void select_device(int ordinal) {
  const int n = device_count();
  FP8T_CHECK(ordinal >= 0 && ordinal < n, "CUDA device {} requested but this machine has {} CUDA device(s)",
             ordinal, n);
  FP8T_CUDA_CHECK(cudaSetDevice(ordinal));
}

int current_device() {
  int d = 0;
  FP8T_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

DeviceInfo device_info(int ordinal) {
  cudaDeviceProp p{};
  FP8T_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = p.name;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.sm_count = p.multiProcessorCount;
  info.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  info.global_mem_bytes = p.totalGlobalMem;
  info.smem_per_block_optin = p.sharedMemPerBlockOptin;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, ordinal) == cudaSuccess) info.clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, ordinal) == cudaSuccess) info.memory_clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, ordinal) == cudaSuccess) info.memory_bus_bits = v;
  (void)cudaGetLastError();
  return info;
}

std::string DeviceInfo::describe() const {
  return fmt::format("{} (sm_{}{}, {} SMs, {} MiB L2, {:.1f} GiB)", name, cc_major, cc_minor, sm_count,
                     l2_bytes >> 20, static_cast<double>(global_mem_bytes) / (1ull << 30));
}

void require_hopper(const char* what) {
  const DeviceInfo info = device_info(current_device());
  FP8T_CHECK(info.cc_major == 9 && info.cc_minor == 0,
             "{} needs a Hopper GPU (sm_90, e.g. H100/H200): fp8train's kernels are built for sm_90a only, "
             "but device {} is {}",
             what, info.ordinal, info.describe());
}

Stream::Stream() { FP8T_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event() { FP8T_CUDA_CHECK(cudaEventCreate(&event_)); }
Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) { FP8T_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::synchronize() const { FP8T_CUDA_CHECK(cudaEventSynchronize(event_)); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  FP8T_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace fp8train::cuda
