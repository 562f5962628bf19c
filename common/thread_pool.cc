#include "common/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <string>

#include "common/thread_name.h"

namespace llm {

ThreadPool::ThreadPool(int num_threads, std::chrono::microseconds spin) : spin_(spin) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this, i] {
      SetCurrentThreadName("pool-" + std::to_string(i));
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

template <typename Ready>
bool ThreadPool::Spin(Ready ready) const {
  if (spin_.count() <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + spin_;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (i % 16 == 15) {
      if (std::chrono::steady_clock::now() >= deadline) return ready();
      // Hands the core to another runnable thread, if any (returns at once otherwise), so a
      // polling thread never delays the serving threads it shares the machine with.
      sched_yield();
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

void ThreadPool::ParallelFor(size_t n, size_t min_chunk,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(1, min_chunk);
  const size_t threads = workers_.size() + 1;
  if (threads == 1 || n <= min_chunk) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven work without making chunks tiny.
  size_t chunk = std::max(min_chunk, (n + threads * 4 - 1) / (threads * 4));
  std::lock_guard<std::mutex> call_lock(call_mu_);
  bool wake;
  size_t num_chunks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    num_chunks = num_chunks_ = (n + chunk - 1) / chunk;
    next_chunk_ = 0;
    chunks_done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleeping_workers_ > 0;
  }
  if (wake) work_cv_.notify_all();
  RunChunks();
  auto all_done = [&] { return chunks_done_.load(std::memory_order_acquire) == num_chunks; };
  if (!Spin(all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_ = true;
    done_cv_.wait(lock, all_done);
    caller_sleeping_ = false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  fn_ = nullptr;
}

void ThreadPool::RunChunks() {
  for (;;) {
    size_t begin, end;
    const std::function<void(size_t, size_t)>* fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fn_ == nullptr || next_chunk_ >= num_chunks_) return;
      begin = next_chunk_++ * chunk_;
      end = std::min(n_, begin + chunk_);
      fn = fn_;
    }
    (*fn)(begin, end);
    bool wake_caller;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t done = chunks_done_.load(std::memory_order_relaxed) + 1;
      chunks_done_.store(done, std::memory_order_release);
      wake_caller = done == num_chunks_ && caller_sleeping_;
    }
    if (wake_caller) done_cv_.notify_all();
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    auto has_work = [&] {
      return stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!Spin(has_work)) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_workers_;
      work_cv_.wait(lock, has_work);
      --sleeping_workers_;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    RunChunks();
  }
}

}  // namespace llm
