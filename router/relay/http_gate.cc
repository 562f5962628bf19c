#include "router/relay/http_gate.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "router/openai/openai_api.h"

namespace llm::router::relay {

HttpGate::Verdict HttpGate::Admit(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limits_.max_connections > 0 && open_ >= limits_.max_connections) {
    ++counted_.refused;
    Log(0, absl::StrCat("HTTP connection from ", client, " refused: ", open_,
                        " open (router.http_max_connections)"));
    return Verdict::kOverCapacity;
  }
  int& mine = per_client_[client];
  if (limits_.max_connections_per_client > 0 && mine >= limits_.max_connections_per_client) {
    ++counted_.refused_per_client;
    Log(1, absl::StrCat("HTTP connection from ", client, " refused: it has ", mine,
                        " open (router.http_max_connections_per_client)"));
    return Verdict::kOverClientCapacity;
  }
  ++mine;
  ++open_;
  return Verdict::kAdmitted;
}

void HttpGate::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  --open_;
}

void HttpGate::TimedOut(Timeout kind, const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kind == Timeout::kRead) {
    ++counted_.read_timeouts;
    Log(2, absl::StrCat("HTTP connection from ", client, " closed: no complete request within ",
                        limits_.read_timeout_seconds, " s (router.http_read_timeout_seconds)"));
  } else {
    ++counted_.idle_timeouts;
    Log(3, absl::StrCat("HTTP connection from ", client, " closed: idle for ",
                        limits_.idle_timeout_seconds, " s (router.http_idle_timeout_seconds)"));
  }
}

HttpConnectionStats HttpGate::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  HttpConnectionStats s = counted_;
  s.open = open_;
  return s;
}

void HttpGate::Log(int kind, const std::string& message) {
  const auto now = std::chrono::steady_clock::now();
  if (last_log_[kind] != std::chrono::steady_clock::time_point{} &&
      now - last_log_[kind] < std::chrono::seconds(10)) {
    ++unlogged_[kind];
    return;
  }
  if (unlogged_[kind] > 0) {
    std::fprintf(stderr, "llm-router: %s (and %llu more like it in the last 10 s)\n",
                 message.c_str(), static_cast<unsigned long long>(unlogged_[kind]));
  } else {
    std::fprintf(stderr, "llm-router: %s\n", message.c_str());
  }
  last_log_[kind] = now;
  unlogged_[kind] = 0;
}

std::string RefusalResponse(HttpGate::Verdict verdict) {
  openai::ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.code = "connection_limit";
  e.message =
      verdict == HttpGate::Verdict::kOverClientCapacity
          ? "too many open connections from this address (router.http_max_connections_per_client)"
          : "too many open connections (router.http_max_connections); retry later";
  const std::string body = openai::OpenAiErrorBody(e);
  return absl::StrCat(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body);
}

}  // namespace llm::router::relay
