#include "worker/model/load_progress.h"

#include <chrono>
#include <cstdio>
#include <utility>

namespace llm::model {

LoadProgress::LoadProgress(std::string label, std::string verb, uint64_t total_bytes,
                           size_t total_tensors, bool enabled)
    : label_(std::move(label)),
      verb_(std::move(verb)),
      total_bytes_(total_bytes),
      total_tensors_(total_tensors),
      enabled_(enabled),
      last_(NowNs()) {}

int64_t LoadProgress::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void LoadProgress::Add(uint64_t bytes, size_t tensors) {
  const uint64_t b = bytes_ += bytes;
  const size_t n = tensors_ += tensors;
  if (!enabled_) return;
  const int64_t now = NowNs();
  int64_t last = last_.load();
  if (now - last < 1'000'000'000 || !last_.compare_exchange_strong(last, now)) return;
  if (total_tensors_ > 0) {
    std::fprintf(stderr, "%s: %s %.0f of %.0f MiB, %zu of %zu tensors\n", label_.c_str(),
                 verb_.c_str(), b / 1048576.0, total_bytes_ / 1048576.0, n, total_tensors_);
  } else {
    std::fprintf(stderr, "%s: %s %.0f of %.0f MiB\n", label_.c_str(), verb_.c_str(), b / 1048576.0,
                 total_bytes_ / 1048576.0);
  }
}

}  // namespace llm::model
