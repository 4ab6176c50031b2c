// The ordered host task thread (see host_worker.h).
#include "common/host_worker.h"

#include <utility>

namespace fp8train {

HostWorker::HostWorker() : thread_([this] { run(); }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostWorker::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      --unfinished_;
      if (error) {
        if (!error_) error_ = error;
        unfinished_ -= static_cast<int64_t>(tasks_.size());
        tasks_.clear();
      }
    }
    cv_.notify_all();
  }
}

void HostWorker::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    tasks_.push_back(std::move(task));
    ++unfinished_;
  }
  cv_.notify_all();
}

void HostWorker::wait_pending(int64_t n) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return unfinished_ <= n; });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace fp8train
