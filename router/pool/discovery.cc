#include "router/pool/discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/thread_name.h"

namespace llm::router {

bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  size_t colon;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return false;
    }
    *host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos) return false;
    *host = address.substr(0, colon);
  }
  *port = address.substr(colon + 1);
  if (host->empty() || port->empty()) return false;
  for (char c : *port) {
    if (c < '0' || c > '9') return false;
  }
  const long p = std::strtol(port->c_str(), nullptr, 10);
  return p > 0 && p < 65536;
}

absl::StatusOr<std::vector<std::string>> ParseWorkerList(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    const std::string entry(absl::StripAsciiWhitespace(part));
    std::string host, port;
    if (!SplitHostPort(entry, &host, &port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("discovery.workers: '", entry, "' is not host:port"));
    }
    if (std::find(out.begin(), out.end(), entry) == out.end()) out.push_back(entry);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveAll(const std::string& name) {
  std::string host, port;
  if (!SplitHostPort(name, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not host:port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    const std::string msg = absl::StrCat("cannot resolve ", name, ": ", gai_strerror(rc));
    return rc == EAI_NONAME ? absl::NotFoundError(msg) : absl::UnavailableError(msg);
  }
  std::vector<std::string> out;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {0};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof(ip));
      out.push_back(absl::StrCat(ip, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof(ip));
      out.push_back(absl::StrCat("[", ip, "]:", port));
    }
  }
  freeaddrinfo(result);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

DnsDiscovery::DnsDiscovery(std::string name, std::chrono::milliseconds interval, Apply apply,
                           Resolve resolve, std::string key)
    : key_(std::move(key)),
      name_(std::move(name)),
      interval_(interval),
      apply_(std::move(apply)),
      resolve_(std::move(resolve)) {
  thread_ = std::thread([this] {
    SetCurrentThreadName("discovery");
    Loop();
  });
}

DnsDiscovery::~DnsDiscovery() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string DnsDiscovery::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void DnsDiscovery::Loop() {
  for (;;) {
    auto addresses = resolve_(name_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (!addresses.ok()) {
        const std::string err = absl::StrCat(key_, ": ", addresses.status().message());
        if (err != last_error_) std::fprintf(stderr, "llm-router: %s\n", err.c_str());
        last_error_ = err;
      } else {
        last_error_.clear();
      }
    }
    // NOTE: a name that resolves to nothing (no ready pods) empties the pool; a failed lookup
    // keeps what was there.
    if (addresses.ok()) apply_(*addresses);
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, interval_, [&] { return stop_; })) return;
  }
}

}  // namespace llm::router
