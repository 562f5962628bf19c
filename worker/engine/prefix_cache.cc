#include "worker/engine/prefix_cache.h"

namespace llm::engine {

namespace {

// SplitMix64's finaliser: a well-mixed 64-bit value.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixCache::PrefixCache(int32_t num_blocks, int32_t block_tokens, bool enabled, uint64_t salt)
    : allocator_(num_blocks),
      block_tokens_(block_tokens),
      enabled_(enabled),
      salt_(salt),
      blocks_(static_cast<size_t>(num_blocks)) {}

uint64_t PrefixCache::Hash(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = Mix(parent ^ salt_);
  for (const int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return h;
}

std::vector<uint64_t> PrefixCache::ChainHashes(std::span<const int32_t> tokens, int32_t n,
                                               uint64_t parent) const {
  std::vector<uint64_t> out;
  for (int32_t b = 0; b < n && (b + 1) * block_tokens_ <= static_cast<int32_t>(tokens.size());
       ++b) {
    parent = Hash(parent, tokens.subspan(static_cast<size_t>(b * block_tokens_),
                                         static_cast<size_t>(block_tokens_)));
    out.push_back(parent);
  }
  return out;
}

std::vector<int32_t> PrefixCache::Match(std::span<const uint64_t> hashes,
                                        std::span<const int32_t> tokens) const {
  std::vector<int32_t> out;
  if (!enabled_) return out;
  uint64_t parent = 0;
  for (size_t b = 0; b < hashes.size(); ++b) {
    const auto it = by_hash_.find(hashes[b]);
    if (it == by_hash_.end()) break;
    const Block& blk = blocks_[static_cast<size_t>(it->second)];
    const auto want =
        tokens.subspan(b * static_cast<size_t>(block_tokens_), static_cast<size_t>(block_tokens_));
    if (blk.parent != parent ||
        !std::equal(want.begin(), want.end(), blk.tokens.begin(), blk.tokens.end())) {
      break;  // a collision: not the same prefix
    }
    out.push_back(it->second);
    parent = hashes[b];
  }
  return out;
}

int32_t PrefixCache::CountUnreferenced(std::span<const int32_t> blocks) const {
  int32_t n = 0;
  for (const int32_t b : blocks) n += blocks_[static_cast<size_t>(b)].refs == 0 ? 1 : 0;
  return n;
}

void PrefixCache::Acquire(std::span<const int32_t> blocks) {
  for (const int32_t b : blocks) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (blk.refs++ == 0) {
      ++referenced_;
      if (blk.cached) lru_.erase(blk.lru);
    }
  }
}

void PrefixCache::Evict(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  by_hash_.erase(blk.hash);
  blk.cached = false;
  blk.tokens.clear();
  allocator_.Free({b});
}

std::optional<std::vector<int32_t>> PrefixCache::Allocate(int32_t n) {
  if (n < 0 || n > available()) return std::nullopt;
  while (allocator_.num_free() < n) {
    const int32_t victim = lru_.front();
    lru_.pop_front();
    Evict(victim);
  }
  auto out = allocator_.Allocate(n);
  for (const int32_t b : *out) blocks_[static_cast<size_t>(b)].refs = 1;
  referenced_ += n;
  return out;
}

void PrefixCache::Insert(int32_t block, uint64_t hash, uint64_t parent,
                         std::span<const int32_t> tokens) {
  if (!enabled_) return;
  Block& blk = blocks_[static_cast<size_t>(block)];
  if (blk.cached || by_hash_.count(hash) > 0) return;
  blk.cached = true;
  blk.hash = hash;
  blk.parent = parent;
  blk.tokens.assign(tokens.begin(), tokens.end());
  by_hash_[hash] = block;
}

void PrefixCache::Release(std::span<const int32_t> blocks) {
  // Last block first: a chain's tail becomes less recently used than its head, so eviction
  // takes the tail first (an evicted head would strand the blocks after it).
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    const int32_t b = *it;
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (--blk.refs > 0) continue;
    --referenced_;
    if (blk.cached) {
      blk.lru = lru_.insert(lru_.end(), b);
    } else {
      allocator_.Free({b});
    }
  }
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.cached_blocks = static_cast<int32_t>(by_hash_.size());
  s.evictable_blocks = static_cast<int32_t>(lru_.size());
  return s;
}

}  // namespace llm::engine
