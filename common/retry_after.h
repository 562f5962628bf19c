// How long an overloaded server suggests waiting before a retry, carried on the RESOURCE_EXHAUSTED
// status that refuses a request (an absl::Status payload) until the edge turns it into the
// protocol's hint: the `grpc-retry-pushback-ms` trailer (gRPC) or `Retry-After` (HTTP 429).
#ifndef LLM_COMMON_RETRY_AFTER_H_
#define LLM_COMMON_RETRY_AFTER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace llm {

inline constexpr char kRetryAfterMsPayload[] = "llm.retry_after_ms";
// The range a hint is clamped to.
inline constexpr int64_t kMinRetryAfterMs = 10;
inline constexpr int64_t kMaxRetryAfterMs = 30000;

inline void SetRetryAfterMs(absl::Status& status, int64_t ms) {
  if (ms < kMinRetryAfterMs) ms = kMinRetryAfterMs;
  if (ms > kMaxRetryAfterMs) ms = kMaxRetryAfterMs;
  status.SetPayload(kRetryAfterMsPayload, absl::Cord(std::to_string(ms)));
}

inline std::optional<int64_t> RetryAfterMs(const absl::Status& status) {
  const auto p = status.GetPayload(kRetryAfterMsPayload);  // absl::optional<absl::Cord>
  int64_t ms = 0;
  if (!p || !absl::SimpleAtoi(std::string(*p), &ms)) return std::nullopt;
  return ms;
}

}  // namespace llm

#endif  // LLM_COMMON_RETRY_AFTER_H_
