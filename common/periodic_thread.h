// A named thread that calls a function every interval until it is stopped: the shape of the
// worker's engine watchdog, the router's TLS reload and the TLS file watcher.
#ifndef LLM_COMMON_PERIODIC_THREAD_H_
#define LLM_COMMON_PERIODIC_THREAD_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace llm {

class PeriodicThread {
 public:
  // Starts a thread named `name` (at most 15 characters) that calls `tick` once per `interval`,
  // the first time one interval after now. `tick` runs with no lock held.
  PeriodicThread(std::string name, std::chrono::milliseconds interval, std::function<void()> tick);
  // Stop().
  ~PeriodicThread();

  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Wakes the thread and waits for it to end (a tick under way finishes first). Idempotent;
  // never from within `tick`.
  void Stop();

 private:
  void Run(const std::string& name);

  const std::chrono::milliseconds interval_;
  const std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace llm

#endif  // LLM_COMMON_PERIODIC_THREAD_H_
