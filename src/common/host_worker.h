// HostWorker: one host thread that runs submitted tasks in order, off the caller's thread (ZeRO-1's overlapped
// gradient reduction on CPU ranks, the host-side weight EMA). wait_pending(n) blocks until at most n submitted tasks
// have not finished, then rethrows the first task error; after an error the tasks still queued are dropped, and
// every later submit or wait rethrows it again (a worker whose task failed stays failed). One submitting thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace fp8train {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();  // finishes the running task; drops what is still queued (its owner no longer waits for it)
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Queues a task; rethrows an earlier task's error instead when there is one.
  void submit(std::function<void()> task);
  // Waits until at most `n` submitted tasks have not finished; rethrows a task's error.
  void wait_pending(int64_t n = 0);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  int64_t unfinished_ = 0;  // queued or running
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace fp8train
