#include "worker/frontend/stop_strings.h"

#include <algorithm>

namespace llm::frontend {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

StopStringMatcher::Result StopStringMatcher::Add(std::string_view delta) {
  Result r;
  if (stopped_) return r;
  pending_ += delta;
  if (stops_.empty()) {
    r.text.swap(pending_);
    return r;
  }
  // Earliest occurrence of any stop string; at equal positions the first listed wins.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos < best) {
      best = pos;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    r.text = pending_.substr(0, best + (include_stop_ ? best_stop->size() : 0));
    r.stopped = true;
    r.matched = *best_stop;
    stopped_ = true;
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Such a suffix
  // starts with a UTF-8 lead byte, so the emitted part ends on a character boundary.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  r.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace llm::frontend
