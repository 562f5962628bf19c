// A StreamSink for tests: collects a request's updates and lets the test wait for the end.
#ifndef LLM_TESTS_WORKER_LOOP_COLLECTING_SINK_H_
#define LLM_TESTS_WORKER_LOOP_COLLECTING_SINK_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "worker/loop/stream.h"

namespace llm::loop {

class CollectingSink : public StreamSink {
 public:
  void OnUpdate(StreamUpdate u) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++updates_;
    all_.Merge(std::move(u));
    if (all_.finished) {
      done_ = true;
      cv_.notify_all();
    }
  }
  void OnError(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = status;
    done_ = true;
    cv_.notify_all();
  }
  // Waits up to `timeout` for the end; false on timeout.
  bool Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }
  StreamUpdate result() {
    std::lock_guard<std::mutex> lock(mu_);
    return all_;
  }
  absl::Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  int updates() {
    std::lock_guard<std::mutex> lock(mu_);
    return updates_;
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  StreamUpdate all_;
  absl::Status error_;
  bool done_ = false;
  int updates_ = 0;
};

}  // namespace llm::loop

#endif  // LLM_TESTS_WORKER_LOOP_COLLECTING_SINK_H_
