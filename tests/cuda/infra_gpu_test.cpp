// Device infrastructure on a real GPU: error checks that throw fp8train::Error with the CUDA error named,
// the checked launch, the caching allocator (no cudaMalloc in steady state, stream-tagged reuse, current /
// peak / reserved bytes, release), DeviceBuffer and PinnedHostBuffer, and the CUDA Backend behind Tensor
// (category bookkeeping, host<->device copies, zero-fill), and the side queue beside the compute stream.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/tensor.h"

namespace fp8train::gputest {
cudaError_t launch_oversized_block();  // infra_kernels.cu: a launch with 4096 threads per block
cudaError_t launch_fill_iota(float* out, int n, cudaStream_t stream);

namespace {

TEST(InfraGpu, CudaErrorsThrowWithTheErrorName) {
  try {
    FP8T_CUDA_CHECK(cudaSetDevice(1 << 20));
    FAIL() << "cudaSetDevice(huge) did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidDevice"), std::string::npos) << e.what();
  }
  (void)launch_oversized_block();
  // The launcher returned the error; a checked launch reports the sticky-free launch error too.
  (void)launch_oversized_block();
  try {
    FP8T_CHECK_LAUNCH("oversized_block_kernel", nullptr);
    FAIL() << "a launch with 4096 threads per block was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("oversized_block_kernel"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::select_device(cuda::device_count()), Error);
}

TEST(InfraGpu, CachingAllocatorReachesSteadyStateWithoutCudaMalloc) {
  cuda::CachingDeviceAllocator alloc(0);
  cuda::Stream stream;
  const size_t sizes[] = {1000, 4096, 1 << 20, (3 << 20) + 5, 64 << 20, 200};
  cuda::AllocatorStats after_first;
  for (int step = 0; step < 5; ++step) {
    std::vector<void*> ptrs;
    for (size_t s : sizes) ptrs.push_back(alloc.allocate(s, stream.get()));
    for (void* p : ptrs) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    for (void* p : ptrs) alloc.deallocate(p);
    if (step == 0) after_first = alloc.stats();
  }
  const cuda::AllocatorStats st = alloc.stats();
  EXPECT_EQ(st.device_mallocs, after_first.device_mallocs) << st.describe();
  EXPECT_EQ(st.device_mallocs, std::size(sizes));
  EXPECT_EQ(st.cache_hits, 4 * std::size(sizes));
  EXPECT_EQ(st.in_use_bytes, 0u);
  size_t expected_peak = 0;
  for (size_t s : sizes) expected_peak += cuda::CachingDeviceAllocator::round_size(s);
  EXPECT_EQ(st.peak_in_use_bytes, expected_peak);
  EXPECT_EQ(st.reserved_bytes, expected_peak);
  // Another stream does not reuse these blocks (no cross-stream reuse without events).
  cuda::Stream other;
  void* p = alloc.allocate(1000, other.get());
  EXPECT_EQ(alloc.stats().device_mallocs, st.device_mallocs + 1);
  alloc.deallocate(p);
  alloc.release_cached();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
  EXPECT_THROW(alloc.deallocate(reinterpret_cast<void*>(0x1234)), Error);
  // An impossible request is an Error naming the sizes, not an abort.
  try {
    alloc.allocate(size_t{1} << 50, stream.get());
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of GPU memory"), std::string::npos) << e.what();
  }
}

TEST(InfraGpu, DeviceAndPinnedBuffersRoundTrip) {
  cuda::Stream stream;
  const int n = 1 << 16;
  cuda::DeviceBuffer d(n * sizeof(float), stream.get());
  cuda::PinnedHostBuffer h(n * sizeof(float));
  ASSERT_EQ(launch_fill_iota(d.as<float>(), n, stream.get()), cudaSuccess);
  FP8T_CUDA_CHECK(cudaMemcpyAsync(h.get(), d.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream.get()));
  stream.synchronize();
  for (int i = 0; i < n; i += 997) EXPECT_EQ(h.as<float>()[i], static_cast<float>(i));
  cuda::DeviceBuffer moved = std::move(d);
  EXPECT_EQ(d.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
}

TEST(InfraGpu, TensorsLiveOnTheCudaBackend) {
  const Device gpu = cuda::init_cuda_backend(0);
  Allocator& alloc = backend(gpu).allocator();
  const MemoryStats before = alloc.stats();
  {
    std::vector<float> host(1000);
    for (int i = 0; i < 1000; ++i) host[i] = 0.5f * i - 7.0f;
    Tensor t = Tensor::from_vector(host, {10, 100}, MemCategory::ActivationCache, gpu);
    EXPECT_EQ(t.device(), gpu);
    EXPECT_EQ(alloc.stats().current_of(MemCategory::ActivationCache),
              before.current_of(MemCategory::ActivationCache) + 4000);
    EXPECT_EQ(t.to_vector<float>(), host);
    Tensor z = Tensor::zeros({10, 100}, DType::F32, MemCategory::Workspace, gpu);
    EXPECT_EQ(z.to_vector<float>(), std::vector<float>(1000, 0.0f));
    z.copy_from(t);
    EXPECT_EQ(z.to(Device::cpu()).to_vector<float>(), host);
  }
  EXPECT_EQ(alloc.stats().total_current, before.total_current);
  EXPECT_NE(cuda::compute_stream(gpu), nullptr);
}

// The side queue (Backend::side_queue): work on it starts after what the compute stream queued before
// side_waits_for_compute, and compute work queued after compute_waits_for(mark) starts after it. A 64 MB fill on
// the side stream between a zero-fill and a read-back on the compute stream: with either order missing, the read
// sees zeros or a partly filled buffer.
TEST(InfraGpu, SideQueueOrdersWorkBothWaysAndTimesTheComputeStream) {
  const Device gpu = cuda::init_cuda_backend(0);
  std::unique_ptr<SideQueue> q = backend(gpu).side_queue();
  ASSERT_NE(q->side_stream(), nullptr);
  EXPECT_NE(q->side_stream(), backend(gpu).stream());
  const int n = 1 << 24;
  for (int round = 0; round < 3; ++round) {  // the pooled events are reused after reset()
    Tensor t = Tensor::zeros({n}, DType::F32, MemCategory::Workspace, gpu);  // memset on the compute stream
    const int t0 = q->time_mark();
    q->side_waits_for_compute();
    ASSERT_EQ(launch_fill_iota(t.data<float>(), n, static_cast<cudaStream_t>(q->side_stream())), cudaSuccess);
    q->compute_waits_for(q->side_mark());
    const int t1 = q->time_mark();
    const std::vector<float> got = t.to_vector<float>();  // a copy on the compute stream
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i)] != static_cast<float>(i);
    EXPECT_EQ(wrong, 0) << "round " << round;
    q->synchronize();
    EXPECT_GT(q->seconds_between(t0, t1), 0.0);  // the compute stream waited for the fill
    EXPECT_THROW(q->seconds_between(t0, t1 + 1), Error);
    q->reset();
  }
  // Markers are spent once their waits are issued: resetting right after each wait, with no host wait in between
  // (as the expert exchange does), re-records the same events while the earlier fills may still be running.
  std::vector<Tensor> filled;
  for (int round = 0; round < 4; ++round) {
    Tensor t = Tensor::zeros({n}, DType::F32, MemCategory::Workspace, gpu);
    q->side_waits_for_compute();
    ASSERT_EQ(launch_fill_iota(t.data<float>(), n, static_cast<cudaStream_t>(q->side_stream())), cudaSuccess);
    q->compute_waits_for(q->side_mark());
    q->reset();
    filled.push_back(t.clone());  // a copy on the compute stream, ordered after the fill
  }
  for (size_t round = 0; round < filled.size(); ++round) {
    const std::vector<float> got = filled[round].to_vector<float>();
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i)] != static_cast<float>(i);
    EXPECT_EQ(wrong, 0) << "round " << round << " after resets";
  }
}

}  // namespace
}  // namespace fp8train::gputest
