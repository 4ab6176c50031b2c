// Allocator bookkeeping and the CPU allocator (see allocator.h).
#include "tensor/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <new>

#include "common/error.h"

namespace fp8train {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Weights: return "weights";
    case MemCategory::ComputeWeights:
      return "compute_weights";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerState: return "optimizer_state";
    case MemCategory::ActivationCache: return "activation_cache";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::kCount: break;
  }
  return "?";
}

void Allocator::add(MemCategory c, int64_t delta) {
  const int i = static_cast<int>(c);
  stats_.current[i] += delta;
  stats_.total_current += delta;
  if (stats_.current[i] > stats_.peak[i]) stats_.peak[i] = stats_.current[i];
  if (stats_.total_current > stats_.total_peak) {
    stats_.total_peak = stats_.total_current;
    stats_.at_total_peak = stats_.current;
    if (track_workspace_) {
      std::array<int64_t, 8>& top = stats_.largest_workspace_at_peak;
      top.fill(0);
      for (const auto& [ptr, size] : workspace_blocks_) {
        if (size <= top.back()) continue;
        top.back() = size;
        std::sort(top.begin(), top.end(), std::greater<>());
      }
    }
  }
}

void* Allocator::allocate(size_t bytes, MemCategory category) {
  FP8T_CHECK(category != MemCategory::kCount, "allocate: kCount is not a memory category");
  void* p = raw_allocate(bytes);
  std::lock_guard lock(mutex_);
  if (track_workspace_ && category == MemCategory::Workspace) workspace_blocks_[p] = static_cast<int64_t>(bytes);
  add(category, static_cast<int64_t>(bytes));
  ++stats_.allocations;
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, MemCategory category) {
  raw_deallocate(ptr, bytes);
  std::lock_guard lock(mutex_);
  if (category == MemCategory::Workspace) workspace_blocks_.erase(ptr);
  add(category, -static_cast<int64_t>(bytes));
}

void Allocator::move_bytes(const void* ptr, size_t bytes, MemCategory from, MemCategory to) {
  if (from == to) return;
  std::lock_guard lock(mutex_);
  if (from == MemCategory::Workspace) workspace_blocks_.erase(ptr);
  if (track_workspace_ && to == MemCategory::Workspace) workspace_blocks_[ptr] = static_cast<int64_t>(bytes);
  add(from, -static_cast<int64_t>(bytes));
  add(to, static_cast<int64_t>(bytes));
}

MemoryStats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Allocator::reset_peaks() {
  std::lock_guard lock(mutex_);
  stats_.peak = stats_.current;
  stats_.total_peak = stats_.total_current;
  stats_.at_total_peak = stats_.current;
  stats_.largest_workspace_at_peak.fill(0);
}

void Allocator::track_workspace_blocks(bool on) {
  std::lock_guard lock(mutex_);
  track_workspace_ = on;
  if (!on) workspace_blocks_.clear();
}

namespace {
constexpr size_t kCpuAlign = 64;
size_t rounded_size(size_t bytes) { return bytes == 0 ? kCpuAlign : (bytes + kCpuAlign - 1) / kCpuAlign * kCpuAlign; }
}  // namespace

CpuAllocator::~CpuAllocator() { release_cached(); }

void* CpuAllocator::raw_allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  {
    std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(size);
    if (it != cache_.end()) {
      void* p = it->second;
      cache_.erase(it);
      cached_ -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(kCpuAlign, size);
  FP8T_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
  return p;
}

void CpuAllocator::raw_deallocate(void* ptr, size_t bytes) {
  constexpr size_t kMaxCachedBytes = size_t{2} << 30;  // bound what sits idle (sizes that never repeat)
  const size_t size = rounded_size(bytes);
  {
    std::lock_guard lock(cache_mutex_);
    if (cached_ + size <= kMaxCachedBytes) {
      cache_.emplace(size, ptr);
      cached_ += size;
      return;
    }
  }
  std::free(ptr);
}

size_t CpuAllocator::cached_bytes() const {
  std::lock_guard lock(cache_mutex_);
  return cached_;
}

void CpuAllocator::release_cached() {
  std::lock_guard lock(cache_mutex_);
  for (auto& [size, p] : cache_) std::free(p);
  cache_.clear();
  cached_ = 0;
}

}  // namespace fp8train
