// Tensor layer: shapes, strides and views, host round trips, the counting allocator (current/peak bytes per
// category, re-booking by Storage::set_category) and clear errors on bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace fp8train {
namespace {

TEST(Tensor, ContiguousShapeAndStrides) {
  const Tensor t = Tensor::zeros({2, 3, 4}, DType::F32);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.device(), Device::cpu());
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(Tensor, RoundTripAndViews) {
  std::vector<int32_t> v(12);
  for (int i = 0; i < 12; ++i) v[i] = i;
  const Tensor t = Tensor::from_vector(v, {3, 4});
  EXPECT_EQ(t.to_vector<int32_t>(), v);
  const Tensor cols = t.narrow(1, 1, 2);  // [[1,2],[5,6],[9,10]]
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_TRUE(cols.is_matrix());
  EXPECT_EQ(cols.ld(), 4);
  EXPECT_EQ(cols.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(cols.clone().to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(t.rows(1, 3).to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  const Tensor flat = t.view({-1});
  EXPECT_EQ(flat.shape(), (Shape{12}));
  EXPECT_EQ(t.view({2, -1, 2}).shape(), (Shape{2, 3, 2}));
  // views share storage: a write through one is seen by the other
  cols.data<int32_t>()[0] = 100;
  EXPECT_EQ(t.to_vector<int32_t>()[1], 100);
}

TEST(Tensor, BadInputThrowsWithASentence) {
  const Tensor t = Tensor::zeros({3, 4}, DType::F32);
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.narrow(1, 3, 2), Error);
  EXPECT_THROW(t.narrow(2, 0, 1), Error);
  EXPECT_THROW(t.narrow(1, 1, 2).view({6}), Error);
  EXPECT_THROW(Tensor::empty({2, -3}, DType::F32), Error);
  EXPECT_THROW(Tensor().storage(), Error);
  EXPECT_THROW(backend(Device::cuda(0)), Error);
  try {
    (void)t.data<int32_t>();
    FAIL() << "expected a dtype error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

TEST(Allocator, CountsCurrentAndPeakPerCategory) {
  Allocator& a = backend(Device::cpu()).allocator();
  a.reset_peaks();
  const MemoryStats before = a.stats();
  const int64_t w0 = before.current_of(MemCategory::Weights);
  const int64_t c0 = before.current_of(MemCategory::ActivationCache);
  {
    const Tensor w = Tensor::empty({256}, DType::F32, MemCategory::Weights);
    Tensor act = Tensor::empty({1000}, DType::F64, MemCategory::Workspace);
    EXPECT_EQ(a.stats().current_of(MemCategory::Weights) - w0, 1024);
    // the activation cache re-books what it keeps
    act.storage().set_category(MemCategory::ActivationCache);
    EXPECT_EQ(a.stats().current_of(MemCategory::ActivationCache) - c0, 8000);
    EXPECT_EQ(a.stats().peak_of(MemCategory::ActivationCache) - c0, 8000);
    {
      const Tensor more = Tensor::empty({500}, DType::F64, MemCategory::ActivationCache);
      EXPECT_EQ(a.stats().current_of(MemCategory::ActivationCache) - c0, 12000);
    }
    EXPECT_EQ(a.stats().current_of(MemCategory::ActivationCache) - c0, 8000);
    EXPECT_EQ(a.stats().peak_of(MemCategory::ActivationCache) - c0, 12000);
  }
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.current_of(MemCategory::Weights), w0);
  EXPECT_EQ(after.current_of(MemCategory::ActivationCache), c0);
  EXPECT_GE(after.total_peak, after.total_current + 12000);
  EXPECT_GT(after.allocations, before.allocations);
  a.reset_peaks();
  EXPECT_EQ(a.stats().peak_of(MemCategory::ActivationCache), c0);
}

TEST(Allocator, RecordsWhatTheTotalPeakIsMadeOf) {
  Allocator& a = backend(Device::cpu()).allocator();
  a.reset_peaks();
  const MemoryStats before = a.stats();
  EXPECT_EQ(before.at_total_peak, before.current);
  const int ws = static_cast<int>(MemCategory::Workspace), wt = static_cast<int>(MemCategory::Weights);
  { const Tensor big = Tensor::empty({1 << 14}, DType::F32, MemCategory::Workspace); }  // 64 KiB, freed again
  const Tensor small = Tensor::empty({1 << 10}, DType::F32, MemCategory::Weights);      // 4 KiB, kept
  const MemoryStats after = a.stats();
  // The peak was reached while the workspace tensor was live, before the weights tensor existed.
  EXPECT_EQ(after.at_total_peak[ws] - before.current[ws], 1 << 16);
  EXPECT_EQ(after.at_total_peak[wt], before.current[wt]);
  EXPECT_EQ(after.current[wt] - before.current[wt], 1 << 12);
  int64_t sum = 0;
  for (int64_t b : after.at_total_peak) sum += b;
  EXPECT_EQ(sum, after.total_peak);
}

TEST(Allocator, TracksTheLargestWorkspaceBlocksAtThePeak) {
  Allocator& a = backend(Device::cpu()).allocator();
  a.track_workspace_blocks(true);
  a.reset_peaks();
  {
    const Tensor w1 = Tensor::empty({1 << 12}, DType::F32, MemCategory::Workspace);  // 16 KiB
    const Tensor w2 = Tensor::empty({1 << 14}, DType::F32, MemCategory::Workspace);  // 64 KiB
    Tensor kept = Tensor::empty({1 << 13}, DType::F32, MemCategory::Workspace);      // 32 KiB, re-booked below
    kept.storage().set_category(MemCategory::ActivationCache);
    const Tensor w3 = Tensor::empty({1 << 10}, DType::F32, MemCategory::Workspace);  // 4 KiB: the peak
  }
  { const Tensor later = Tensor::empty({1 << 8}, DType::F32, MemCategory::Workspace); }  // below the peak
  const MemoryStats s = a.stats();
  a.track_workspace_blocks(false);
  // At the peak: 64, 16 and 4 KiB in the workspace; the 32 KiB block had become an activation-cache block.
  EXPECT_EQ(s.largest_workspace_at_peak[0], 1 << 16);
  EXPECT_EQ(s.largest_workspace_at_peak[1], 1 << 14);
  EXPECT_EQ(s.largest_workspace_at_peak[2], 1 << 12);
  EXPECT_EQ(s.largest_workspace_at_peak[3], 0);
  a.reset_peaks();
  EXPECT_EQ(a.stats().largest_workspace_at_peak[0], 0);
}

TEST(Allocator, AlignsTo64Bytes) {
  for (int64_t n : {1, 3, 17, 1000}) {
    const Tensor t = Tensor::empty({n}, DType::U8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  }
}

TEST(Tensor, CopyFromAndZero) {
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::empty({4}, DType::F64);
  b.copy_from(a);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));
  a.zero_();
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(b.to_vector<double>()[3], 4.0);
  EXPECT_THROW(b.copy_from(Tensor::empty({3}, DType::F64)), Error);
}

// The CPU's side queue is the calling thread: no stream, ordering calls that do nothing, and timestamps from the
// host clock, in order.
TEST(SideQueue, OnTheCpuTimestampsAreHostClockReadings) {
  std::unique_ptr<SideQueue> q = backend(Device::cpu()).side_queue();
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->side_stream(), nullptr);
  q->side_waits_for_compute();
  q->compute_waits_for(q->side_mark());
  const int a = q->time_mark();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  while (std::chrono::steady_clock::now() < until) {
  }
  const int b = q->time_mark();
  q->synchronize();
  EXPECT_GE(q->seconds_between(a, b), 0.002);
  EXPECT_LE(q->seconds_between(b, a), -0.002);
  EXPECT_THROW(q->seconds_between(a, b + 1), Error);
  q->reset();
  EXPECT_THROW(q->seconds_between(a, b), Error);  // forgotten
}

}  // namespace
}  // namespace fp8train
