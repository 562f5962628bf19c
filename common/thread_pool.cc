#include "common/thread_pool.h"

#include <algorithm>
#include <string>

#include "common/thread_name.h"

namespace llm {

ThreadPool::ThreadPool(int num_threads) {
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
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    num_chunks_ = (n + chunk - 1) / chunk;
    next_chunk_ = 0;
    chunks_done_ = 0;
    ++generation_;
  }
  work_cv_.notify_all();
  RunChunks();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return chunks_done_ == num_chunks_; });
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
    bool all_done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all_done = ++chunks_done_ == num_chunks_;
    }
    if (all_done) done_cv_.notify_all();
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
  }
}

}  // namespace llm
