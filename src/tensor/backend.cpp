// Backend registry and the CPU backend (see backend.h).
#include "tensor/backend.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/error.h"

namespace fp8train {

void CpuBackend::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  FP8T_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "CPU backend asked to copy {} -> {}", src_device.str(),
             dst_device.str());
  if (bytes) std::memmove(dst, src, bytes);
}

void CpuBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}

namespace {

// The CPU has one queue, the calling thread: nothing to order, and timestamps are host-clock readings.
class HostSideQueue final : public SideQueue {
 public:
  void* side_stream() const override { return nullptr; }
  void side_waits_for_compute() override {}
  int side_mark() override { return 0; }
  void compute_waits_for(int) override {}
  int time_mark() override {
    stamps_.push_back(std::chrono::steady_clock::now());
    return static_cast<int>(stamps_.size()) - 1;
  }
  double seconds_between(int from, int to) override {
    FP8T_CHECK(from >= 0 && to >= 0 && static_cast<size_t>(std::max(from, to)) < stamps_.size(),
               "side queue: no timestamps {} and {} ({} taken)", from, to, stamps_.size());
    return std::chrono::duration<double>(stamps_[static_cast<size_t>(to)] - stamps_[static_cast<size_t>(from)]).count();
  }
  void synchronize() override {}
  void reset() override { stamps_.clear(); }

 private:
  std::vector<std::chrono::steady_clock::time_point> stamps_;
};

}  // namespace

std::unique_ptr<SideQueue> Backend::side_queue() { return std::make_unique<HostSideQueue>(); }

SideQueue& side_queue(Device device, SideQueueUse use) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, std::unique_ptr<SideQueue>> queues;
  std::lock_guard lock(mutex);
  std::unique_ptr<SideQueue>& q = queues[{static_cast<int>(device.type), device.index, static_cast<int>(use)}];
  if (!q) q = backend(device).side_queue();
  return *q;
}

namespace {
struct Registry {
  std::mutex mutex;
  CpuBackend cpu;
  std::array<std::unique_ptr<Backend>, 16> cuda;  // by device index
  Device default_device = Device::cpu();
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

Backend& backend(Device device) {
  Registry& r = registry();
  if (device.is_cpu()) return r.cpu;
  FP8T_CHECK(device.index >= 0 && device.index < static_cast<int>(r.cuda.size()), "device index {} out of range",
             device.index);
  std::lock_guard lock(r.mutex);
  Backend* b = r.cuda[device.index].get();
  FP8T_CHECK(b != nullptr, "no backend registered for {} (was the CUDA backend initialized at start-up?)",
             device.str());
  return *b;
}

void register_backend(std::unique_ptr<Backend> b) {
  FP8T_CHECK(b != nullptr, "register_backend: null backend");
  const Device d = b->device();
  FP8T_CHECK(!d.is_cpu(), "the CPU backend is built in and cannot be replaced");
  FP8T_CHECK(d.index >= 0 && d.index < 16, "device index {} out of range", d.index);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.cuda[d.index] = std::move(b);
}

bool has_backend(Device device) {
  if (device.is_cpu()) return true;
  if (device.index < 0 || device.index >= 16) return false;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.cuda[device.index] != nullptr;
}

Device default_device() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.default_device;
}

void select_default_device(Device device) {
  FP8T_CHECK(has_backend(device), "cannot select {}: no backend registered for it", device.str());
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.default_device = device;
}

}  // namespace fp8train
