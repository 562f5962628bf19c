// Where the workers are: a static list ("host:port,host:port"), or a DNS name re-resolved
// periodically (a Kubernetes headless Service: one address per ready worker pod). Each
// resolution replaces the pool's worker set, so workers that appear or vanish are picked up
// without a restart. A failed resolution keeps the previous set.
#ifndef LLM_ROUTER_POOL_DISCOVERY_H_
#define LLM_ROUTER_POOL_DISCOVERY_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::router {

// Splits "a:1, b:2" into addresses; each must be host:port (IPv6 as [addr]:port).
// INVALID_ARGUMENT naming the entry otherwise.
absl::StatusOr<std::vector<std::string>> ParseWorkerList(const std::string& list);

// Every address `name` ("host:port") resolves to, as "ip:port" ("[ip6]:port"), sorted and
// without duplicates. NOT_FOUND / UNAVAILABLE with the resolver's message on failure.
absl::StatusOr<std::vector<std::string>> ResolveAll(const std::string& name);

// Splits "host:port" or "[v6]:port" (the brackets dropped); false when malformed: no host, or a
// port that is not a number in 1..65535.
bool SplitHostPort(const std::string& address, std::string* host, std::string* port);

// Re-resolves a DNS name every `interval` on its own thread and hands each successful result
// to `apply` (also on that thread). `resolve` is ResolveAll unless a test injects another. A
// failure is logged once per new message, after `key` (the setting the name came from).
class DnsDiscovery {
 public:
  using Apply = std::function<void(const std::vector<std::string>&)>;
  using Resolve = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;
  DnsDiscovery(std::string name, std::chrono::milliseconds interval, Apply apply,
               Resolve resolve = ResolveAll, std::string key = "discovery.dns");
  ~DnsDiscovery();
  DnsDiscovery(const DnsDiscovery&) = delete;
  DnsDiscovery& operator=(const DnsDiscovery&) = delete;

  // The last resolution's error, after the key (empty when it succeeded).
  std::string last_error() const;

 private:
  void Loop();

  const std::string key_;
  const std::string name_;
  const std::chrono::milliseconds interval_;
  const Apply apply_;
  const Resolve resolve_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace llm::router

#endif  // LLM_ROUTER_POOL_DISCOVERY_H_
