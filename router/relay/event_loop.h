// A single-threaded epoll loop: file-descriptor handlers, timers, tasks posted from other
// threads, and an end-of-iteration pass in which connections flush what they queued, so each
// connection makes at most one write per wake-up however many streams produced data.
// Everything but Post and Stop is called on the loop's own thread.
#ifndef LLM_ROUTER_RELAY_EVENT_LOOP_H_
#define LLM_ROUTER_RELAY_EVENT_LOOP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace llm::router::relay {

using Clock = std::chrono::steady_clock;

class EventLoop;

// Receives a file descriptor's events. Deleted through EventLoop::DeleteLater, so an event
// already fetched for a closed handler finds it alive (and closed).
class FdHandler {
 public:
  virtual ~FdHandler() = default;
  virtual void OnEvents(uint32_t events) = 0;
  // Called at the end of the loop iteration in which MarkDirty was called.
  virtual void Flush() {}
};

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void Add(int fd, uint32_t events, FdHandler* handler);
  void Modify(int fd, uint32_t events, FdHandler* handler);
  void Remove(int fd);

  // Runs until Stop(); returns after the current iteration.
  void Run();
  void Stop();                            // any thread
  void Post(std::function<void()> task);  // any thread: runs `task` on the loop

  uint64_t AddTimer(Clock::time_point when, std::function<void()> fn);
  void CancelTimer(uint64_t id);

  // `h` is flushed once at the end of this iteration.
  void MarkDirty(FdHandler* h);
  // Deletes `h` at the end of this iteration.
  void DeleteLater(std::unique_ptr<FdHandler> h);

 private:
  void RunTimers();
  void RunPosted();

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  bool stop_ = false;
  std::mutex mu_;  // guards posted_ and stop_ requests from other threads
  std::vector<std::function<void()>> posted_;
  bool stop_requested_ = false;
  std::multimap<Clock::time_point, uint64_t> timers_;
  std::map<uint64_t,
           std::pair<std::multimap<Clock::time_point, uint64_t>::iterator, std::function<void()>>>
      timer_fns_;
  uint64_t next_timer_ = 1;
  std::vector<FdHandler*> dirty_;
  std::vector<std::unique_ptr<FdHandler>> graveyard_;
  std::unique_ptr<FdHandler> wake_handler_;
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_EVENT_LOOP_H_
