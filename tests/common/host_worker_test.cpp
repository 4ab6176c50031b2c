// HostWorker: tasks in order on one other thread, waits by count, the first error rethrown and kept.
#include "common/host_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fp8train {
namespace {

TEST(HostWorker, RunsTasksInOrderOnAnotherThread) {
  HostWorker w;
  std::vector<int> order;
  std::thread::id where;
  for (int i = 0; i < 50; ++i)
    w.submit([&, i] {
      order.push_back(i);
      where = std::this_thread::get_id();
    });
  w.wait_pending(0);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_NE(where, std::this_thread::get_id());
}

TEST(HostWorker, WaitsUntilAtMostNAreUnfinished) {
  HostWorker w;
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  w.submit([&] {
    while (!release) std::this_thread::yield();
    ++done;
  });
  w.submit([&] { ++done; });
  release = true;
  w.wait_pending(1);  // the first has finished
  EXPECT_GE(done.load(), 1);
  w.wait_pending(0);
  EXPECT_EQ(done.load(), 2);
}

TEST(HostWorker, AnErrorDropsTheQueueAndStays) {
  HostWorker w;
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  w.submit([&] {
    while (!release) std::this_thread::yield();
    throw std::runtime_error("bucket 3 timed out");
  });
  w.submit([&] { ++ran; });  // queued behind the failing task: dropped
  release = true;
  EXPECT_THROW(w.wait_pending(0), std::runtime_error);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_THROW(w.wait_pending(0), std::runtime_error);  // still failed
  EXPECT_THROW(w.submit([&] { ++ran; }), std::runtime_error);
  EXPECT_EQ(ran.load(), 0);
}

}  // namespace
}  // namespace fp8train
