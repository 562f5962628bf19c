#include "router/relay/idle_frame_filter.h"

#include <algorithm>

namespace llm::router::relay {

namespace {

constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kWindowUpdate = 0x8;

}  // namespace

bool IdleFrameFilter::ShouldDrop(Clock::time_point now, Outcome* outcome) {
  const uint32_t length = (uint32_t{header_[0]} << 16) | (uint32_t{header_[1]} << 8) | header_[2];
  const uint8_t type = header_[3];
  const int32_t id =
      static_cast<int32_t>(((uint32_t{header_[5]} & 0x7f) << 24) | (uint32_t{header_[6]} << 16) |
                           (uint32_t{header_[7]} << 8) | header_[8]);
  payload_left_ = length;
  if (type == kHeaders && id % 2 == 1 && id > highest_opened_) {
    highest_opened_ = id;
    const auto it = std::find(reset_unopened_.begin(), reset_unopened_.end(), id);
    if (it != reset_unopened_.end()) {
      reset_unopened_.erase(it);
      outcome->reset_before_open.push_back(id);
    }
    return false;
  }
  if (type != kData && type != kRstStream && type != kWindowUpdate) return false;
  const bool idle = id != 0 && (id % 2 == 0 || id > highest_opened_);
  if (!idle) return false;
  if (type == kData) outcome->dropped_data_bytes += length;
  if (type == kRstStream &&
      std::find(reset_unopened_.begin(), reset_unopened_.end(), id) == reset_unopened_.end() &&
      id % 2 == 1) {
    reset_unopened_.push_back(id);
    if (reset_unopened_.size() > limits_.remembered_resets) reset_unopened_.pop_front();
  }
  ++dropped_total_;
  if (dropped_in_window_ == 0 || now - window_start_ > limits_.window) {
    window_start_ = now;
    dropped_in_window_ = 0;
  }
  if (++dropped_in_window_ > limits_.max_dropped && !abusive_) {
    abusive_ = true;
    outcome->abusive = true;
  }
  return true;
}

bool IdleFrameFilter::Feed(const uint8_t* data, size_t n, Clock::time_point now,
                           absl::FunctionRef<bool(const uint8_t*, size_t)> pass, Outcome* outcome) {
  size_t i = 0;
  size_t run = 0;  // start of the range to pass that ends at i
  const auto flush = [&]() {
    const bool ok = i == run || pass(data + run, i - run);
    run = i;
    return ok;
  };
  while (i < n) {
    if (preface_left_ > 0) {
      const size_t take = std::min(preface_left_, n - i);
      preface_left_ -= take;
      i += take;
      continue;
    }
    if (payload_left_ > 0) {
      const size_t take = std::min<size_t>(payload_left_, n - i);
      if (dropping_) {
        if (!flush()) return false;
        i += take;
        run = i;
      } else {
        i += take;
      }
      payload_left_ -= static_cast<uint32_t>(take);
      continue;
    }
    // A frame header, possibly split across calls: held back until it is whole and decided.
    if (!flush()) return false;
    const size_t take = std::min(kFrameHeaderBytes - header_have_, n - i);
    std::copy(data + i, data + i + take, header_ + header_have_);
    header_have_ += take;
    i += take;
    run = i;
    if (header_have_ < kFrameHeaderBytes) break;
    header_have_ = 0;
    dropping_ = ShouldDrop(now, outcome);
    if (!dropping_ && !pass(header_, kFrameHeaderBytes)) return false;
  }
  return flush();
}

}  // namespace llm::router::relay
