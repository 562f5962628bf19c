// The OpenAI front's connection accounting, shared by the relay loops (thread-safe): open
// connections in all and per client address, for the caps of HttpLimits, and what the limits did
// (HttpConnectionStats, for metrics). Refusals and timeouts are logged at most once per 10 s per
// kind, with how many went unlogged since.
#ifndef LLM_ROUTER_RELAY_HTTP_GATE_H_
#define LLM_ROUTER_RELAY_HTTP_GATE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "router/relay/relay_server.h"

namespace llm::router::relay {

class HttpGate {
 public:
  enum class Verdict { kAdmitted, kOverCapacity, kOverClientCapacity };
  enum class Timeout { kRead, kIdle };

  explicit HttpGate(const HttpLimits& limits) : limits_(limits) {}

  // Counts a connection from `client` (its address) unless a cap is reached.
  Verdict Admit(const std::string& client);
  // A counted connection closed.
  void Release(const std::string& client);
  // A connection was closed by a timeout.
  void TimedOut(Timeout kind, const std::string& client);

  HttpConnectionStats stats() const;
  const HttpLimits& limits() const { return limits_; }

 private:
  // Logs `message` unless this kind was logged in the last 10 s (then counts it).
  void Log(int kind, const std::string& message);

  const HttpLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> per_client_;
  int64_t open_ = 0;
  HttpConnectionStats counted_;
  static constexpr int kKinds = 4;
  std::chrono::steady_clock::time_point last_log_[kKinds]{};
  uint64_t unlogged_[kKinds]{};
};

// The answer a refused connection gets before it is closed: 503, Retry-After: 1, an OpenAI
// error body naming the limit.
std::string RefusalResponse(HttpGate::Verdict verdict);

}  // namespace llm::router::relay

#endif  // LLM_ROUTER_RELAY_HTTP_GATE_H_
