// Tolerance for frames that name a stream the client never opened (an "idle" stream), between a
// client's bytes and the server session that parses them.
//
// RFC 9113 makes RST_STREAM, WINDOW_UPDATE and DATA on an idle stream a connection error, and
// nghttp2 answers one with GOAWAY, killing every call on the connection. Real clients send them:
// Python grpcio may reset a call before it has sent the call's HEADERS. gRPC servers shrug such
// frames off, so the router must too. This filter walks the frame boundaries of the client's
// byte stream (after the 24-byte preface) and drops exactly those frames:
//   - RST_STREAM, WINDOW_UPDATE and DATA on an odd stream id above the highest one a HEADERS
//     frame has opened, or on any even id (the router never pushes, so no even stream exists);
//   - everything else passes, HEADERS and CONTINUATION always (the HPACK state depends on them).
// What the caller does with what was dropped:
//   - DATA bytes still counted against the connection's flow-control window at the client:
//     `dropped_data_bytes` is credited back (a WINDOW_UPDATE on stream 0);
//   - a stream reset before its HEADERS that then opens anyway: `reset_before_open` lists it, to
//     be reset (CANCEL), since the client has already given the call up;
//   - more than `max_dropped` dropped frames within `window` is abuse: `abusive` is set once,
//     and the caller ends the connection (GOAWAY ENHANCE_YOUR_CALM).
// Pure logic: no socket, no session.
#ifndef LLM_ROUTER_RELAY_IDLE_FRAME_FILTER_H_
#define LLM_ROUTER_RELAY_IDLE_FRAME_FILTER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/functional/function_ref.h"

namespace llm::router::relay {

class IdleFrameFilter {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    int64_t max_dropped = 10000;
    Clock::duration window = std::chrono::seconds(10);
    size_t remembered_resets = 1024;  // resets of unopened streams kept for reset_before_open
  };
  struct Outcome {
    uint64_t dropped_data_bytes = 0;
    std::vector<int32_t> reset_before_open;
    bool abusive = false;
  };

  IdleFrameFilter() : IdleFrameFilter(Limits{}) {}
  explicit IdleFrameFilter(const Limits& limits) : limits_(limits) {}

  // Feeds the next `n` bytes from the client. `pass` receives, in order, every byte range the
  // session must see (possibly several per call, possibly none); it returns false to stop (the
  // connection closed), and then Feed returns false. What was dropped accumulates in `outcome`.
  bool Feed(const uint8_t* data, size_t n, Clock::time_point now,
            absl::FunctionRef<bool(const uint8_t*, size_t)> pass, Outcome* outcome);

  int64_t dropped_frames() const { return dropped_total_; }

 private:
  static constexpr size_t kPrefaceBytes = 24;
  static constexpr size_t kFrameHeaderBytes = 9;

  // Decides on the frame whose header is in header_: drop or pass its payload.
  bool ShouldDrop(Clock::time_point now, Outcome* outcome);

  Limits limits_;
  size_t preface_left_ = kPrefaceBytes;
  uint8_t header_[kFrameHeaderBytes];
  size_t header_have_ = 0;
  uint32_t payload_left_ = 0;
  bool dropping_ = false;  // the current frame's payload is dropped
  int32_t highest_opened_ = 0;
  std::deque<int32_t> reset_unopened_;  // oldest first
  int64_t dropped_total_ = 0;
  int64_t dropped_in_window_ = 0;
  Clock::time_point window_start_{};
  bool abusive_ = false;
};

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_IDLE_FRAME_FILTER_H_
