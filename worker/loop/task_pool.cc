#include "worker/loop/task_pool.h"

#include <algorithm>
#include <string>

#include "common/thread_name.h"

namespace llm::loop {

TaskPool::TaskPool(int num_threads, const std::string& name) {
  for (int i = 0; i < std::max(1, num_threads); ++i) {
    threads_.emplace_back([this, i, name] {
      SetCurrentThreadName(name + "-" + std::to_string(i));
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
          if (tasks_.empty()) return;
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    });
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void TaskPool::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

}  // namespace llm::loop
