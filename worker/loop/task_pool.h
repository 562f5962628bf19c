// A fixed set of threads running queued tasks in FIFO order (the tokenizer pool).
#ifndef LLM_WORKER_LOOP_TASK_POOL_H_
#define LLM_WORKER_LOOP_TASK_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llm::loop {

class TaskPool {
 public:
  // Threads are named NAME-0, NAME-1, ...
  TaskPool(int num_threads, const std::string& name);
  ~TaskPool();  // runs the tasks already queued, then joins

  void Post(std::function<void()> task);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_TASK_POOL_H_
