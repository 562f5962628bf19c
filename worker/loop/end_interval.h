// The mean time between stream ends while a worker is busy: what a refusal's retry hint
// (grpc-retry-pushback-ms, an HTTP client's Retry-After) multiplies. Pure logic; the Worker
// calls it under its lock.
//
// Only gaps within a busy period count. A gap that spans idle time says nothing about how soon
// a full worker frees a slot: it made the hint grow with the quiet time before a burst (a minute
// idle added about 6 s; an hour, minutes).
#ifndef LLM_WORKER_LOOP_END_INTERVAL_H_
#define LLM_WORKER_LOOP_END_INTERVAL_H_

#include <chrono>

namespace llm::loop {

class EndInterval {
 public:
  using Clock = std::chrono::steady_clock;

  // A stream ended at `now`.
  void OnEnd(Clock::time_point now) {
    if (counting_) {
      const double gap = std::chrono::duration<double>(now - last_end_).count();
      mean_s_ = mean_s_ == 0.0 ? gap : 0.9 * mean_s_ + 0.1 * gap;  // exponentially weighted
    }
    last_end_ = now;
    counting_ = true;
  }
  // Nothing is in flight any more: the time until the next end is not a gap between ends.
  void OnIdle() { counting_ = false; }

  // The mean gap in seconds; `fallback` until one gap within a busy period has been seen.
  double seconds(double fallback) const { return mean_s_ > 0.0 ? mean_s_ : fallback; }

 private:
  Clock::time_point last_end_{};
  bool counting_ = false;  // an end since the worker was last idle
  double mean_s_ = 0.0;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_END_INTERVAL_H_
