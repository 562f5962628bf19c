// What the router believes each worker has in its prefix cache: for every worker, the prompt
// prefixes it was recently sent, as chains of hashes over fixed-size chunks of the prompt's
// bytes (a chunk's hash covers everything before it). Approximate by design: the router never
// sees the workers' caches, only where it sent prompts; an entry unused for long falls out
// (least recently used) once a worker's index is full, as the worker's cache would evict it.
// Thread-safe.
#ifndef LLM_ROUTER_POLICY_PREFIX_INDEX_H_
#define LLM_ROUTER_POLICY_PREFIX_INDEX_H_

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llm::router {

class PrefixIndex {
 public:
  static constexpr size_t kChunkBytes = 64;

  // `capacity`: chunk hashes remembered per worker.
  explicit PrefixIndex(size_t capacity = 1 << 16) : capacity_(capacity) {}

  // The chain hashes of the full kChunkBytes chunks of `prompt`.
  static std::vector<uint64_t> Chain(std::string_view prompt);

  // How many leading hashes of `chain` were sent to `worker` (and are still remembered).
  size_t Match(const std::string& worker, std::span<const uint64_t> chain) const;
  // Remembers that `chain` was sent to `worker` (most recently used).
  void Record(const std::string& worker, std::span<const uint64_t> chain);

 private:
  struct Lru {
    std::list<uint64_t> order;  // least recently used first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::map<std::string, Lru> workers_;
};

}  // namespace llm::router

#endif  // LLM_ROUTER_POLICY_PREFIX_INDEX_H_
