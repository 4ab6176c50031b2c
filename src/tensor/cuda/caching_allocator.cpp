// The caching device allocator, device buffers and pinned host buffers (caching_allocator.h).
#include "tensor/cuda/caching_allocator.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"

namespace fp8train::cuda {
namespace {
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

// Makes `device` current for the scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FP8T_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FP8T_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};
}  // namespace

std::string AllocatorStats::describe() const {
  auto mib = [](size_t b) { return static_cast<double>(b) / (1 << 20); };
  return fmt::format(
      "in use {:.1f} MiB (peak {:.1f}), reserved {:.1f} MiB (peak {:.1f}), {} cudaMalloc, {} cudaFree, "
      "{} of {} allocations from the cache",
      mib(in_use_bytes), mib(peak_in_use_bytes), mib(reserved_bytes), mib(peak_reserved_bytes), device_mallocs,
      device_frees, cache_hits, allocations);
}

size_t CachingDeviceAllocator::round_size(size_t bytes) {
  if (bytes < kSmallLimit) return std::max(kSmallRound, (bytes + kSmallRound - 1) / kSmallRound * kSmallRound);
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

CachingDeviceAllocator::CachingDeviceAllocator(int device) : device_(device) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  // At process exit the driver may already be shutting down; free quietly.
  for (auto& [key, ptr] : free_) (void)cudaFree(ptr);
}

void* CachingDeviceAllocator::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.allocations;
  const uintptr_t skey = reinterpret_cast<uintptr_t>(stream);
  auto it = free_.lower_bound({skey, size});
  void* ptr = nullptr;
  size_t got = size;
  if (it != free_.end() && it->first.first == skey && it->first.second <= 2 * size) {
    ptr = it->second;
    got = it->first.second;
    free_.erase(it);
    ++stats_.cache_hits;
  } else {
    DeviceGuard guard(device_);
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached_locked();
      err = cudaMalloc(&ptr, size);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      FP8T_FAIL("out of GPU memory on device {}: could not allocate {:.1f} MiB ({}: {}); allocator: {}", device_,
                static_cast<double>(size) / (1 << 20), cudaGetErrorName(err), cudaGetErrorString(err),
                stats_.describe());
    }
    ++stats_.device_mallocs;
    stats_.reserved_bytes += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  in_use_.emplace(ptr, Block{got, stream});
  stats_.in_use_bytes += got;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return ptr;
}

void CachingDeviceAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  FP8T_CHECK(it != in_use_.end(), "pointer {} was not allocated by the caching allocator of device {}", ptr,
             device_);
  const Block b = it->second;
  in_use_.erase(it);
  stats_.in_use_bytes -= b.size;
  free_.emplace(std::make_pair(reinterpret_cast<uintptr_t>(b.stream), b.size), ptr);
}

void CachingDeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingDeviceAllocator::release_cached_locked() {
  if (free_.empty()) return;
  DeviceGuard guard(device_);
  // Cached blocks may still be read by queued work on their streams: wait for the device first.
  FP8T_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [key, ptr] : free_) {
    FP8T_CUDA_CHECK(cudaFree(ptr));
    stats_.reserved_bytes -= key.second;
    ++stats_.device_frees;
  }
  free_.clear();
}

AllocatorStats CachingDeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingDeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CachingDeviceAllocator& device_allocator(int device) {
  static std::mutex mutex;
  // Leaked on purpose: destroying allocators during static destruction races the CUDA runtime's own teardown.
  static auto* allocators = new std::vector<std::unique_ptr<CachingDeviceAllocator>>();
  std::lock_guard<std::mutex> lock(mutex);
  const int n = device_count();
  FP8T_CHECK(device >= 0 && device < n, "no CUDA device {} (this machine has {})", device, n);
  if (allocators->size() < static_cast<size_t>(n)) allocators->resize(n);
  auto& slot = (*allocators)[device];
  if (!slot) slot = std::make_unique<CachingDeviceAllocator>(device);
  return *slot;
}

DeviceBuffer::DeviceBuffer(size_t bytes, cudaStream_t stream) : bytes_(bytes), device_(current_device()) {
  ptr_ = device_allocator(device_).allocate(bytes, stream);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) {
    try {
      device_allocator(device_).deallocate(ptr_);
    } catch (...) {
      // Destructors must not throw; a failed return only leaks the block.
    }
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

PinnedHostBuffer::PinnedHostBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) FP8T_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault));
}
PinnedHostBuffer::~PinnedHostBuffer() {
  if (ptr_) (void)cudaFreeHost(ptr_);
}

}  // namespace fp8train::cuda
