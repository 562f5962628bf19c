// The mean time between stream ends while every slot of a worker is taken: how fast a full
// worker frees a slot, which a refusal's retry hint (grpc-retry-pushback-ms, an HTTP client's
// Retry-After) multiplies. Pure logic; the Worker calls it under its lock.
//
// Only gaps while every slot was taken count. A gap with a slot free says how fast requests
// arrived, not how fast they finish: quiet time before a burst made the hint grow with it (a
// minute idle added about 6 s; an hour, minutes), and so did one long stream alone.
#ifndef LLM_WORKER_LOOP_END_INTERVAL_H_
#define LLM_WORKER_LOOP_END_INTERVAL_H_

#include <algorithm>
#include <chrono>

namespace llm::loop {

class EndInterval {
 public:
  using Clock = std::chrono::steady_clock;

  // Every slot is taken from `now` on (requests in flight reached the slot count).
  void OnSaturated(Clock::time_point now) {
    if (saturated_) return;
    saturated_ = true;
    since_ = now;
  }
  // A slot is free: ends from now on do not count.
  void OnUnsaturated() { saturated_ = false; }
  // A stream ended at `now`. While saturated, the gap since the later of the last end and the
  // moment every slot was taken counts.
  void OnEnd(Clock::time_point now) {
    if (!saturated_) return;
    const double gap = std::chrono::duration<double>(now - std::max(since_, last_end_)).count();
    mean_s_ = mean_s_ == 0.0 ? gap : 0.9 * mean_s_ + 0.1 * gap;  // exponentially weighted
    last_end_ = now;
  }

  // The mean gap in seconds; `fallback` until one has been seen.
  double seconds(double fallback) const { return mean_s_ > 0.0 ? mean_s_ : fallback; }

 private:
  bool saturated_ = false;
  Clock::time_point since_{};     // when every slot was last taken
  Clock::time_point last_end_{};  // the last end counted
  double mean_s_ = 0.0;
};

}  // namespace llm::loop

#endif  // LLM_WORKER_LOOP_END_INTERVAL_H_
