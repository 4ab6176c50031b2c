// GPU timing for benchmarks (fp8train bench): warm-up launches, an L2 flush before every timed launch (a
// memset of twice the L2 size, so no operand is served from cache), CUDA events around each launch, and the
// median of the repeats. Also device-side random fills, so benchmarks never run on zeros, and a read-only
// kernel for the memory floor of a bandwidth-bound GEMM.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "tensor/cuda/caching_allocator.h"

namespace fp8train::ops::cuda {

struct TimingConfig {
  int warmup = 5;
  int repeats = 30;
  bool flush_l2 = true;
  // After the flush's memset, read the flush buffer back, so L2 holds clean lines: otherwise the timed kernel
  // pays for writing back the memset's dirty ones (tens of MB), which shows on kernels of a few microseconds.
  bool clean_flush = false;
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int repeats = 0;
};

class GpuTimer {
 public:
  explicit GpuTimer(cudaStream_t stream);
  // Times `launch` (which enqueues work on the stream it is given) per TimingConfig.
  Timing time(const std::function<void(cudaStream_t)>& launch, const TimingConfig& config);
  // Times two launches interleaved: each repeat flushes (if asked) and times `a`, then flushes and times `b`
  // (odd repeats: b first), so both see the same clock and power state -- a fair ratio on a board that
  // throttles under sustained load, where timing one case after the other favours whichever runs first.
  std::pair<Timing, Timing> time_pair(const std::function<void(cudaStream_t)>& a,
                                      const std::function<void(cudaStream_t)>& b, const TimingConfig& config);
  cudaStream_t stream() const { return stream_; }

 private:
  void flush(int round, const TimingConfig& config);

  cudaStream_t stream_;
  fp8train::cuda::DeviceBuffer flush_;
  fp8train::cuda::DeviceBuffer sink_;
};

// Reads `bytes` (a multiple of 16, 16-byte aligned) from device memory `p` through L2 with 16-byte loads on
// every SM and discards them (`sink`: 4 bytes of device memory the kernel may write): the time a GEMM would
// need if it did nothing but read its operands once. Launches on `stream`; throws on a launch error.
void read_only(const void* p, size_t bytes, unsigned* sink, cudaStream_t stream);

// Deterministic pseudo-random fills (num::counter_random_u32 of (seed, index)), on `stream`:
//   bf16 / f32: normal-like values (sum of two uniforms) times `scale`;
//   fp8 codes: E4M3 or E5M2 encodings of such values, never NaN or Inf;
//   positive floats in [lo, hi) for scales.
void fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_random_f32(float* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_random_fp8(uint8_t* out, int64_t n, uint64_t seed, bool e5m2, cudaStream_t stream);
void fill_random_positive(float* out, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace fp8train::ops::cuda
