// Allocator: hands out device memory and books every byte under a category, keeping the current and peak
// bytes per category and in total. Training reports "peak cached activation bytes" straight from these
// counters: the activation cache moves the storages it keeps into MemCategory::ActivationCache
// (Storage::set_category), so what is counted is what is actually allocated and kept, not an estimate.
// Device allocators (CPU here, CUDA in tensor/cuda/) implement raw_allocate/raw_deallocate only; the
// bookkeeping is shared and thread-safe.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

#include "tensor/device.h"

namespace fp8train {

enum class MemCategory : uint8_t {
  Weights,          // parameters (FP32 master weights) and non-trainable model state (router biases)
  ComputeWeights,   // the GEMMs' per-step copies of the weights (BF16, FP8 W and Wᵀ) and their scaling state
  Gradients,        // parameter gradients
  OptimizerState,   // AdamW moments and the like
  ActivationCache,  // tensors kept from forward for backward (booked by the activation cache)
  Workspace,        // everything else: temporaries, outputs not (yet) kept
  kCount
};
inline constexpr int kNumMemCategories = static_cast<int>(MemCategory::kCount);
std::string_view mem_category_name(MemCategory c);

struct MemoryStats {
  std::array<int64_t, kNumMemCategories> current{};  // bytes live now, per category
  std::array<int64_t, kNumMemCategories> peak{};     // highest `current` since the last reset_peaks()
  int64_t total_current = 0;
  int64_t total_peak = 0;
  std::array<int64_t, kNumMemCategories>
      at_total_peak{};      // `current` when total_peak was reached: what the peak is made of
  // With Allocator::track_workspace_blocks on: the sizes of the largest workspace blocks live when total_peak was
  // reached, largest first (zeros pad), so a peak's workspace can be traced to the tensors that make it.
  std::array<int64_t, 8> largest_workspace_at_peak{};
  int64_t allocations = 0;  // allocate() calls since construction
  int64_t current_of(MemCategory c) const { return current[static_cast<int>(c)]; }
  int64_t peak_of(MemCategory c) const { return peak[static_cast<int>(c)]; }
};

class Allocator {
 public:
  explicit Allocator(Device device) : device_(device) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  Device device() const { return device_; }
  // Returns memory aligned to at least 64 bytes; bytes == 0 gives a valid unique pointer too.
  void* allocate(size_t bytes, MemCategory category);
  void deallocate(void* ptr, size_t bytes, MemCategory category);
  // Re-books the block at `ptr` (`bytes`) from one category to another (the bytes stay where they are).
  void move_bytes(const void* ptr, size_t bytes, MemCategory from, MemCategory to);
  MemoryStats stats() const;
  // Sets every peak to the current value (e.g. at the start of a training step).
  void reset_peaks();
  // Keeps a map of the live workspace blocks so that a new total peak records its largest ones. Off by default:
  // every new peak then walks the map. Blocks allocated while it was off are not in the map.
  void track_workspace_blocks(bool on);

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) = 0;

 private:
  void add(MemCategory c, int64_t delta);  // caller holds mutex_
  Device device_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  bool track_workspace_ = false;
  std::map<const void*, int64_t> workspace_blocks_;  // live workspace blocks while tracked
};

// Host memory, 64-byte aligned (one cache line / one AVX-512 vector). Freed blocks are kept in a cache keyed
// by their (64-byte rounded) size and handed out again: a training step repeats the same allocations, and
// reusing blocks avoids the page faults and zero-fills of fresh memory every step. The counters above count
// live bytes only; cached_bytes() says how much is held for reuse, release_cached() gives it back.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : Allocator(Device::cpu()) {}
  ~CpuAllocator() override;
  size_t cached_bytes() const;
  void release_cached();

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* ptr, size_t bytes) override;

 private:
  mutable std::mutex cache_mutex_;
  std::multimap<size_t, void*> cache_;  // rounded size -> free block
  size_t cached_ = 0;
};

}  // namespace fp8train
