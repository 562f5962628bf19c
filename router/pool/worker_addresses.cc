#include "router/pool/worker_addresses.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <utility>

#include "router/pool/discovery.h"

namespace llm::router {

void WorkerAddresses::Set(const std::string& name, std::vector<std::string> addresses) {
  if (addresses.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[name];
  if (e.addresses != addresses) {
    e.addresses = std::move(addresses);
    e.next = 0;
  }
}

std::optional<std::string> WorkerAddresses::Next(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.addresses.empty()) return std::nullopt;
  Entry& e = it->second;
  const std::string& out = e.addresses[e.next % e.addresses.size()];
  e.next = (e.next + 1) % e.addresses.size();
  return out;
}

bool IsNumericAddress(const std::string& address) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) return false;
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace llm::router
