#include "router/policy/prefix_index.h"

namespace llm::router {

std::vector<uint64_t> PrefixIndex::Chain(std::string_view prompt) {
  std::vector<uint64_t> out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the whole prefix, sampled per chunk
  for (size_t i = 0; i < prompt.size(); ++i) {
    h = (h ^ static_cast<unsigned char>(prompt[i])) * 1099511628211ull;
    if ((i + 1) % kChunkBytes == 0) out.push_back(h);
  }
  return out;
}

size_t PrefixIndex::Match(const std::string& worker, std::span<const uint64_t> chain) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = workers_.find(worker);
  if (it == workers_.end()) return 0;
  size_t n = 0;
  while (n < chain.size() && it->second.where.count(chain[n]) > 0) ++n;
  return n;
}

void PrefixIndex::Record(const std::string& worker, std::span<const uint64_t> chain) {
  std::lock_guard<std::mutex> lock(mu_);
  Lru& lru = workers_[worker];
  for (const uint64_t h : chain) {
    if (const auto it = lru.where.find(h); it != lru.where.end()) {
      lru.order.splice(lru.order.end(), lru.order, it->second);
      continue;
    }
    lru.where[h] = lru.order.insert(lru.order.end(), h);
    if (lru.order.size() > capacity_) {
      lru.where.erase(lru.order.front());
      lru.order.pop_front();
    }
  }
}

}  // namespace llm::router
