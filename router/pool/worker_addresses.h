// Where the relay connects for a worker named by host name (a static discovery.workers entry
// such as "worker-0.llm:50051"): the numeric addresses that name resolved to, looked up off the
// event loops (RouterServer resolves each such name at start and every discovery.dns_refresh_ms)
// so a slow or failing DNS server never stalls a loop's streams. A worker given as an IP
// address (every discovery.dns worker, and numeric static entries) needs no entry here.
//
// Thread-safe: written by the resolving threads, read by the loops when they open a connection.
#ifndef LLM_ROUTER_POOL_WORKER_ADDRESSES_H_
#define LLM_ROUTER_POOL_WORKER_ADDRESSES_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace llm::router {

class WorkerAddresses {
 public:
  // `name`'s addresses ("ip:port" or "[v6]:port"), replacing what it had. An empty list is
  // ignored: a name that resolves to nothing keeps its last addresses, as a failed lookup does.
  void Set(const std::string& name, std::vector<std::string> addresses);
  // The address of `name`'s next connection: each call takes the next of its addresses in turn,
  // so a name whose first address is down reaches the others on the connections that follow.
  // None when `name` has not resolved yet.
  std::optional<std::string> Next(const std::string& name);

 private:
  struct Entry {
    std::vector<std::string> addresses;
    size_t next = 0;
  };
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

// Whether `address`'s host part is a numeric IPv4 or IPv6 address (connecting to it needs no
// lookup). False for a malformed address.
bool IsNumericAddress(const std::string& address);

}  // namespace llm::router

#endif  // LLM_ROUTER_POOL_WORKER_ADDRESSES_H_
