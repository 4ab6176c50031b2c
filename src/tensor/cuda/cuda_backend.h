// The CUDA Backend (tensor/backend.h) of one device: its Allocator books every byte by category (the shared
// bookkeeping of tensor/allocator.h) and takes the bytes from the caching device allocator
// (caching_allocator.h), so a steady-state training step makes no cudaMalloc; copies, zero-fill and
// synchronization run on the backend's compute stream, which CUDA ops launch on too (compute_stream()).
// Start-up: init_cuda_backend(0) registers the backend (and, optionally, makes cuda:0 the default device).
#pragma once
#include <cuda_runtime_api.h>

#include <memory>

#include "tensor/backend.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/device.h"

namespace fp8train::cuda {

class CudaAllocator final : public Allocator {
 public:
  CudaAllocator(int device, cudaStream_t stream);
  CachingDeviceAllocator& cache() const { return cache_; }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* ptr, size_t bytes) override;

 private:
  CachingDeviceAllocator& cache_;
  cudaStream_t stream_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  Device device() const override { return Device::cuda(device_); }
  std::string name() const override;
  Allocator& allocator() override { return *allocator_; }
  // Host<->device copies wait for completion (the host buffer may be pageable and is reused at once);
  // device-to-device copies are queued on the compute stream.
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void synchronize() override;
  void synchronize_queue(void* queue) override;
  void* stream() const override { return stream_.get(); }
  // Pinned host memory (cudaMallocHost), copied into on a side stream of its own after an event on the compute
  // stream; order_before_compute makes the compute stream wait for the copy's event.
  std::unique_ptr<HostStaging> host_staging(size_t bytes) override;
  // A non-blocking stream beside the compute stream, ordered against it by events (SideQueue).
  std::unique_ptr<SideQueue> side_queue() override;
  cudaStream_t cuda_stream() const { return stream_.get(); }
  const DeviceInfo& info() const { return info_; }

 private:
  int device_;
  DeviceInfo info_;
  Stream stream_;
  std::unique_ptr<CudaAllocator> allocator_;
};

// Registers the CUDA backend of `ordinal` (once; later calls return the same device) and, when
// make_default, makes it the default device of new tensors. Throws when there is no such GPU.
Device init_cuda_backend(int ordinal = 0, bool make_default = false);
// The stream CUDA ops of `device` launch on: the registered backend's stream, else the legacy default stream.
cudaStream_t compute_stream(Device device);

}  // namespace fp8train::cuda
