// A caching CUDA device allocator: freed blocks go to a per-device cache and are handed out again, so a
// training step that repeats the same allocations calls cudaMalloc only in its first iteration.
//
// Policy (simple on purpose, deterministic, easy to reason about):
//  - Sizes are rounded up: to a multiple of 512 B below 1 MiB, to a multiple of 2 MiB above; every block is
//    256-byte aligned (cudaMalloc's guarantee), which covers every alignment the kernels and cuBLASLt need.
//  - A block remembers the stream it was allocated for and is reused only for requests on that stream, so
//    reuse needs no events: work on one stream runs in order. (Use on another stream is the caller's job
//    to order, as with any CUDA allocation.)
//  - Best fit among cached blocks of the same stream, taking a block at most twice the rounded request so a
//    small request never pins a huge block; blocks are not split.
//  - When cudaMalloc fails, every cached block of the device is released and the call retried once; if it
//    fails again the error says how much was requested, in use and cached.
// Statistics: bytes in use (current and peak), bytes reserved from CUDA (current and peak), and counts of
// cudaMalloc calls and cache hits; the steady-state test asserts the cudaMalloc count stops growing.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace fp8train::cuda {

struct AllocatorStats {
  size_t in_use_bytes = 0;       // rounded bytes held by callers now
  size_t peak_in_use_bytes = 0;  // highest in_use_bytes so far (reset_peak() restarts it)
  size_t reserved_bytes = 0;     // bytes obtained from cudaMalloc and not yet returned (in use + cached)
  size_t peak_reserved_bytes = 0;
  uint64_t device_mallocs = 0;   // cudaMalloc calls made
  uint64_t device_frees = 0;     // cudaFree calls made
  uint64_t cache_hits = 0;       // allocations served from the cache
  uint64_t allocations = 0;      // all allocate() calls with size > 0
  std::string describe() const;
};

class CachingDeviceAllocator {
 public:
  explicit CachingDeviceAllocator(int device);
  ~CachingDeviceAllocator();
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  // Device memory of at least `bytes` bytes for use on `stream`; nullptr for bytes == 0.
  void* allocate(size_t bytes, cudaStream_t stream);
  // Returns a block obtained from allocate() to the cache (nullptr is ignored; a foreign pointer throws).
  void deallocate(void* ptr);
  // Returns every cached (free) block to CUDA. Blocks in use are untouched.
  void release_cached();

  AllocatorStats stats() const;
  void reset_peak();
  int device() const { return device_; }

  static size_t round_size(size_t bytes);

 private:
  struct Block {
    size_t size;
    cudaStream_t stream;
  };
  void release_cached_locked();

  int device_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> in_use_;
  // Free blocks keyed by (stream, size) so best fit is one lower_bound.
  std::multimap<std::pair<uintptr_t, size_t>, void*> free_;
  AllocatorStats stats_;
};

// The process-wide allocator of `device` (created on first use, never destroyed before exit).
CachingDeviceAllocator& device_allocator(int device);

// Owned device memory from the caching allocator of the current device (RAII, move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, cudaStream_t stream);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void reset();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

// Page-locked host memory (cudaHostAlloc) for asynchronous copies (RAII, move-only).
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fp8train::cuda
