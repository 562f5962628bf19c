// A fixed pool of worker threads for data-parallel loops (CPU forward pass, batch encode).
#ifndef LLM_COMMON_THREAD_POOL_H_
#define LLM_COMMON_THREAD_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llm {

// ParallelFor splits [0, n) into chunks run by the pool's threads and the calling thread, and
// returns when all are done. One ParallelFor runs at a time per pool (calls from several
// threads are serialised); the work function must not call ParallelFor on the same pool.
// A pool of 1 thread runs everything on the caller.
//
// Waiting: a forward pass issues a ParallelFor every few tens of microseconds, about what it
// costs to wake a sleeping thread. So an idle worker, and a caller waiting for the last chunk,
// first poll for up to `spin` (yielding the core to any other runnable thread while they poll),
// and only then sleep on a condition variable. spin = 0 sleeps at once.
class ThreadPool {
 public:
  static constexpr std::chrono::microseconds kDefaultSpin{50};

  // `num_threads` counts the caller: 1 means no extra threads. 0 picks the hardware count.
  explicit ThreadPool(int num_threads, std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least `min_chunk` long
  // (except the last). The split is fixed by n, min_chunk and the thread count, never by timing.
  void ParallelFor(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks();
  // Polls `ready` for up to spin_; true once it holds.
  template <typename Ready>
  bool Spin(Ready ready) const;

  const std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises ParallelFor callers
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;  // guarded by mu_
  size_t n_ = 0;                                             // guarded by mu_
  size_t chunk_ = 0;                                         // guarded by mu_
  size_t num_chunks_ = 0;                                    // guarded by mu_
  size_t next_chunk_ = 0;                                    // guarded by mu_
  int sleeping_workers_ = 0;                                 // guarded by mu_
  bool caller_sleeping_ = false;                             // guarded by mu_
  // Written under mu_; read without it by the polling loops.
  std::atomic<size_t> chunks_done_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace llm

#endif  // LLM_COMMON_THREAD_POOL_H_
