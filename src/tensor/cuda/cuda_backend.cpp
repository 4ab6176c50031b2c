// The CUDA Backend and its Allocator (cuda_backend.h).
#include "tensor/cuda/cuda_backend.h"

#include <algorithm>
#include <vector>

#include "tensor/cuda/cuda_check.h"

namespace fp8train::cuda {
namespace {

// HostStaging on a GPU: page-locked host memory (a device-to-host copy into pageable memory would be staged
// synchronously by the driver), a side stream of its own so the copy overlaps the next step's kernels, and two
// events: `ready` (recorded on the compute stream: the weights are final) and `copied` (recorded on the side stream).
class CudaHostStaging final : public HostStaging {
 public:
  CudaHostStaging(cudaStream_t compute, size_t bytes) : compute_(compute), bytes_(bytes) {
    FP8T_CUDA_CHECK(cudaMallocHost(&host_, bytes == 0 ? 1 : bytes));
  }
  ~CudaHostStaging() override {
    (void)cudaStreamSynchronize(side_.get());  // no copy may land in freed memory
    if (host_) (void)cudaFreeHost(host_);
  }
  CudaHostStaging(const CudaHostStaging&) = delete;
  CudaHostStaging& operator=(const CudaHostStaging&) = delete;

  void* data() override { return host_; }
  void copy_async(const void* src) override {
    ready_.record(compute_);
    FP8T_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), ready_.get(), 0));
    if (bytes_) FP8T_CUDA_CHECK(cudaMemcpyAsync(host_, src, bytes_, cudaMemcpyDeviceToHost, side_.get()));
    copied_.record(side_.get());
  }
  void wait_copied() override { copied_.synchronize(); }
  void order_before_compute() override { FP8T_CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_.get(), 0)); }

 private:
  cudaStream_t compute_;
  size_t bytes_;
  void* host_ = nullptr;
  Stream side_;
  Event ready_, copied_;
};

// SideQueue on a GPU: a non-blocking stream of its own beside the compute stream, ordered against it by events;
// timestamps are timing events recorded on the compute stream. Events are pooled and reused after reset().
class CudaSideQueue final : public SideQueue {
 public:
  explicit CudaSideQueue(cudaStream_t compute) : compute_(compute) {}
  ~CudaSideQueue() override { (void)cudaStreamSynchronize(side_.get()); }
  CudaSideQueue(const CudaSideQueue&) = delete;
  CudaSideQueue& operator=(const CudaSideQueue&) = delete;

  void* side_stream() const override { return side_.get(); }
  void side_waits_for_compute() override {
    Event& e = next(marks_, used_marks_);
    e.record(compute_);
    FP8T_CUDA_CHECK(cudaStreamWaitEvent(side_.get(), e.get(), 0));
  }
  int side_mark() override {
    next(marks_, used_marks_).record(side_.get());
    return static_cast<int>(used_marks_) - 1;
  }
  void compute_waits_for(int mark) override {
    FP8T_CHECK(mark >= 0 && static_cast<size_t>(mark) < used_marks_, "side queue: no marker {}", mark);
    FP8T_CUDA_CHECK(cudaStreamWaitEvent(compute_, marks_[static_cast<size_t>(mark)]->get(), 0));
  }
  int time_mark() override {
    next(stamps_, used_stamps_).record(compute_);
    return static_cast<int>(used_stamps_) - 1;
  }
  double seconds_between(int from, int to) override {
    FP8T_CHECK(from >= 0 && to >= 0 && static_cast<size_t>(std::max(from, to)) < used_stamps_,
               "side queue: no timestamps {} and {} ({} taken)", from, to, used_stamps_);
    return 1e-3 *
           static_cast<double>(stamps_[static_cast<size_t>(to)]->elapsed_ms_since(*stamps_[static_cast<size_t>(from)]));
  }
  void synchronize() override {
    FP8T_CUDA_CHECK(cudaStreamSynchronize(side_.get()));
    FP8T_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }
  void reset() override { used_marks_ = used_stamps_ = 0; }

 private:
  // The next event of a pool (a new one when every pooled event is in use).
  static Event& next(std::vector<std::unique_ptr<Event>>& pool, size_t& used) {
    if (used == pool.size()) pool.push_back(std::make_unique<Event>());
    return *pool[used++];
  }
  cudaStream_t compute_;
  Stream side_;
  std::vector<std::unique_ptr<Event>> marks_, stamps_;
  size_t used_marks_ = 0, used_stamps_ = 0;
};

}  // namespace

CudaAllocator::CudaAllocator(int device, cudaStream_t stream)
    : Allocator(Device::cuda(device)), cache_(device_allocator(device)), stream_(stream) {}

void* CudaAllocator::raw_allocate(size_t bytes) {
  // Allocator promises a unique pointer for 0 bytes too: take the smallest cached block.
  return cache_.allocate(bytes == 0 ? 1 : bytes, stream_);
}

void CudaAllocator::raw_deallocate(void* ptr, size_t) { cache_.deallocate(ptr); }

CudaBackend::CudaBackend(int device) : device_(device) {
  select_device(device);
  info_ = device_info(device);
  allocator_ = std::make_unique<CudaAllocator>(device, stream_.get());
}

std::string CudaBackend::name() const { return "cuda:" + std::to_string(device_) + " " + info_.name; }

void CudaBackend::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  FP8T_CHECK(dst_device == device() || src_device == device(), "CUDA backend {} asked to copy {} -> {}",
             device().str(), src_device.str(), dst_device.str());
  FP8T_CHECK(!(dst_device.type == DeviceType::CUDA && src_device.type == DeviceType::CUDA &&
               dst_device.index != src_device.index),
             "copy between two GPUs ({} -> {}) is not supported here", src_device.str(), dst_device.str());
  FP8T_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_.get()));
  if (dst_device.is_cpu() || src_device.is_cpu()) FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

void CudaBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes) FP8T_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_.get()));
}

void CudaBackend::synchronize() { FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }

void CudaBackend::synchronize_queue(void* queue) {
  FP8T_CUDA_CHECK(cudaStreamSynchronize(queue != nullptr ? static_cast<cudaStream_t>(queue) : stream_.get()));
}

std::unique_ptr<HostStaging> CudaBackend::host_staging(size_t bytes) {
  select_device(device_);  // the side stream and events belong to this backend's device
  return std::make_unique<CudaHostStaging>(stream_.get(), bytes);
}

std::unique_ptr<SideQueue> CudaBackend::side_queue() {
  select_device(device_);  // the side stream and events belong to this backend's device
  return std::make_unique<CudaSideQueue>(stream_.get());
}

Device init_cuda_backend(int ordinal, bool make_default) {
  const Device d = Device::cuda(ordinal);
  if (!has_backend(d)) {
    const int n = device_count();
    FP8T_CHECK(ordinal >= 0 && ordinal < n,
               "cannot start the CUDA backend on device {}: this machine has {} usable CUDA device(s)", ordinal, n);
    register_backend(std::make_unique<CudaBackend>(ordinal));
  }
  if (make_default) select_default_device(d);
  return d;
}

cudaStream_t compute_stream(Device device) {
  if (device.type != DeviceType::CUDA || !has_backend(device)) return nullptr;
  auto* b = dynamic_cast<CudaBackend*>(&backend(device));
  return b ? b->cuda_stream() : nullptr;
}

}  // namespace fp8train::cuda
