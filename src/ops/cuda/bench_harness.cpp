// GPU timing, random fills and the read-only floor kernel's host side for benchmarks (bench_harness.h).
#include "ops/cuda/bench_harness.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/error.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"

namespace fp8train::ops::cuda {
namespace detail {
cudaError_t launch_fill_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t s);
cudaError_t launch_fill_f32(float* out, int64_t n, uint64_t seed, float scale, cudaStream_t s);
cudaError_t launch_fill_fp8(uint8_t* out, int64_t n, uint64_t seed, bool e5m2, cudaStream_t s);
cudaError_t launch_fill_positive(float* out, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t s);
cudaError_t launch_read_only(const void* p, size_t bytes, unsigned* sink, cudaStream_t s);
}  // namespace detail

GpuTimer::GpuTimer(cudaStream_t stream) : stream_(stream) {
  const auto info = fp8train::cuda::device_info(fp8train::cuda::current_device());
  flush_ = fp8train::cuda::DeviceBuffer(std::max<size_t>(2 * info.l2_bytes, size_t{64} << 20), stream);
  sink_ = fp8train::cuda::DeviceBuffer(16, stream);
}

void GpuTimer::flush(int round, const TimingConfig& config) {
  if (!config.flush_l2) return;
  FP8T_CUDA_CHECK(cudaMemsetAsync(flush_.get(), round & 0xFF, flush_.bytes(), stream_));
  if (config.clean_flush) read_only(flush_.get(), flush_.bytes() / 16 * 16, sink_.as<unsigned>(), stream_);
}

namespace {
Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  Timing t;
  t.repeats = static_cast<int>(n);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return t;
}
}  // namespace

Timing GpuTimer::time(const std::function<void(cudaStream_t)>& launch, const TimingConfig& config) {
  FP8T_CHECK(config.repeats >= 1 && config.warmup >= 0, "benchmark: repeats must be >= 1 and warmup >= 0");
  for (int i = 0; i < config.warmup; ++i) launch(stream_);
  std::vector<fp8train::cuda::Event> start(config.repeats), stop(config.repeats);
  for (int i = 0; i < config.repeats; ++i) {
    flush(i, config);
    start[i].record(stream_);
    launch(stream_);
    stop[i].record(stream_);
  }
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<double> ms(config.repeats);
  for (int i = 0; i < config.repeats; ++i) ms[i] = stop[i].elapsed_ms_since(start[i]);
  return summarize(std::move(ms));
}

std::pair<Timing, Timing> GpuTimer::time_pair(const std::function<void(cudaStream_t)>& a,
                                              const std::function<void(cudaStream_t)>& b, const TimingConfig& config) {
  FP8T_CHECK(config.repeats >= 1 && config.warmup >= 0, "benchmark: repeats must be >= 1 and warmup >= 0");
  for (int i = 0; i < config.warmup; ++i) {
    a(stream_);
    b(stream_);
  }
  const int n = config.repeats;
  std::vector<fp8train::cuda::Event> start(2 * n), stop(2 * n);
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < 2; ++h) {
      const bool run_a = (h == 0) == (i % 2 == 0);  // a, b on even repeats; b, a on odd ones
      const int slot = run_a ? i : n + i;
      flush(2 * i + h, config);
      start[slot].record(stream_);
      (run_a ? a : b)(stream_);
      stop[slot].record(stream_);
    }
  }
  FP8T_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<double> ma(n), mb(n);
  for (int i = 0; i < n; ++i) {
    ma[i] = stop[i].elapsed_ms_since(start[i]);
    mb[i] = stop[n + i].elapsed_ms_since(start[n + i]);
  }
  return {summarize(ma), summarize(mb)};
}

namespace {
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) FP8T_FAIL("{} failed: {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
}
}  // namespace

void fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  check(detail::launch_fill_bf16(out, n, seed, scale, stream), "fill_random_bf16");
}
void fill_random_f32(float* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  check(detail::launch_fill_f32(out, n, seed, scale, stream), "fill_random_f32");
}
void fill_random_fp8(uint8_t* out, int64_t n, uint64_t seed, bool e5m2, cudaStream_t stream) {
  check(detail::launch_fill_fp8(out, n, seed, e5m2, stream), "fill_random_fp8");
}
void fill_random_positive(float* out, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  check(detail::launch_fill_positive(out, n, seed, lo, hi, stream), "fill_random_positive");
}
void read_only(const void* p, size_t bytes, unsigned* sink, cudaStream_t stream) {
  FP8T_CHECK(bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0,
             "read_only: {} bytes at {} must be a multiple of 16, 16-byte aligned", bytes, p);
  check(detail::launch_read_only(p, bytes, sink, stream), "read_only");
}

}  // namespace fp8train::ops::cuda
