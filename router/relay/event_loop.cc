#include "router/relay/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace llm::router::relay {

namespace {

// The wake-up eventfd's handler: just drains it.
class WakeHandler : public FdHandler {
 public:
  explicit WakeHandler(int fd) : fd_(fd) {}
  void OnEvents(uint32_t) override {
    uint64_t v;
    while (::read(fd_, &v, sizeof(v)) > 0) {
    }
  }

 private:
  int fd_;
};

}  // namespace

EventLoop::EventLoop() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  wake_handler_ = std::make_unique<WakeHandler>(wake_fd_);
  Add(wake_fd_, EPOLLIN, wake_handler_.get());
}

EventLoop::~EventLoop() {
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void EventLoop::Add(int fd, uint32_t events, FdHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void EventLoop::Modify(int fd, uint32_t events, FdHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::Remove(int fd) { ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }

void EventLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_requested_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void EventLoop::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

uint64_t EventLoop::AddTimer(Clock::time_point when, std::function<void()> fn) {
  const uint64_t id = next_timer_++;
  auto it = timers_.emplace(when, id);
  timer_fns_.emplace(id, std::make_pair(it, std::move(fn)));
  return id;
}

void EventLoop::CancelTimer(uint64_t id) {
  auto it = timer_fns_.find(id);
  if (it == timer_fns_.end()) return;
  timers_.erase(it->second.first);
  timer_fns_.erase(it);
}

void EventLoop::MarkDirty(FdHandler* h) {
  if (std::find(dirty_.begin(), dirty_.end(), h) == dirty_.end()) dirty_.push_back(h);
}

void EventLoop::DeleteLater(std::unique_ptr<FdHandler> h) {
  dirty_.erase(std::remove(dirty_.begin(), dirty_.end(), h.get()), dirty_.end());
  graveyard_.push_back(std::move(h));
}

void EventLoop::RunTimers() {
  const Clock::time_point now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    const uint64_t id = timers_.begin()->second;
    timers_.erase(timers_.begin());
    auto it = timer_fns_.find(id);
    std::function<void()> fn = std::move(it->second.second);
    timer_fns_.erase(it);
    fn();
  }
}

void EventLoop::RunPosted() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(posted_);
    if (stop_requested_) stop_ = true;
  }
  for (auto& t : tasks) t();
}

void EventLoop::Run() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  while (!stop_) {
    int timeout_ms = -1;
    if (!timers_.empty()) {
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          timers_.begin()->first - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(wait.count() + 1, 0, 1000));
    }
    if (!dirty_.empty() || !graveyard_.empty()) timeout_ms = 0;
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    for (int i = 0; i < n; ++i) {
      static_cast<FdHandler*>(events[i].data.ptr)->OnEvents(events[i].events);
    }
    RunPosted();
    RunTimers();
    // Flushing may mark more handlers dirty (a stream's data moving between connections).
    for (int round = 0; round < 4 && !dirty_.empty(); ++round) {
      std::vector<FdHandler*> dirty;
      dirty.swap(dirty_);
      for (FdHandler* h : dirty) h->Flush();
    }
    graveyard_.clear();
  }
}

}  // namespace llm::router::relay
