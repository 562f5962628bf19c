#include "common/periodic_thread.h"

#include <utility>

#include "common/thread_name.h"

namespace llm {

PeriodicThread::PeriodicThread(std::string name, std::chrono::milliseconds interval,
                               std::function<void()> tick)
    : interval_(interval),
      tick_(std::move(tick)),
      thread_([this, name = std::move(name)] { Run(name); }) {}

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicThread::Run(const std::string& name) {
  SetCurrentThreadName(name);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [&] { return stop_; })) {
    lock.unlock();
    tick_();
    lock.lock();
  }
}

}  // namespace llm
