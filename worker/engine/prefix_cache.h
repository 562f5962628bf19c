// The KV block pool with prefix caching: which blocks are free, which are held by running
// requests (reference-counted, so a cached prefix is shared read-only between slots), and which
// hold a finished sequence's KV that a later request with the same prefix can reuse.
//
// A full block of tokens (prompt or generated) is named by a hash chain: its tokens, its parent
// block's hash, and a salt (the model), so the same tokens after a different prefix, or on
// another model, never match. A match is verified against the stored tokens and parent, so a hash
// collision cannot hand out the wrong KV. Unreferenced cached blocks are evicted least recently
// used first, and only when an allocation needs them. With caching off, nothing is ever inserted.
//
// Pure logic, owned by the scheduler (engine thread only).
#ifndef LLM_WORKER_ENGINE_PREFIX_CACHE_H_
#define LLM_WORKER_ENGINE_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "worker/engine/block_allocator.h"

namespace llm::engine {

struct PrefixCacheStats {
  int64_t query_tokens = 0;      // prompt tokens looked up at admission
  int64_t hit_tokens = 0;        // of which found cached
  int32_t cached_blocks = 0;     // blocks holding a reusable prefix (referenced or not)
  int32_t evictable_blocks = 0;  // cached and unreferenced
};

class PrefixCache {
 public:
  PrefixCache(int32_t num_blocks, int32_t block_tokens, bool enabled, uint64_t salt);

  // The chain hashes of the first `n` full blocks of `tokens`, the chain continuing after the
  // block whose hash is `parent` (0: `tokens` starts the sequence).
  std::vector<uint64_t> ChainHashes(std::span<const int32_t> tokens, int32_t n,
                                    uint64_t parent = 0) const;
  // The cached blocks holding the longest run of leading blocks of `hashes` (verified against
  // `tokens`). Takes nothing; Acquire them before any Allocate.
  std::vector<int32_t> Match(std::span<const uint64_t> hashes,
                             std::span<const int32_t> tokens) const;
  // How many matched blocks nobody references now (they stop being evictable once acquired).
  int32_t CountUnreferenced(std::span<const int32_t> blocks) const;
  // Takes a reference on each block (cached blocks found by Match).
  void Acquire(std::span<const int32_t> blocks);
  // Blocks an Allocate can have now: free ones plus unreferenced cached ones.
  int32_t available() const { return allocator_.num_free() + static_cast<int32_t>(lru_.size()); }
  // `n` new blocks (one reference each), evicting unreferenced cached blocks, least recently
  // used first, when the free list is short; nullopt (and nothing changed) when n > available.
  std::optional<std::vector<int32_t>> Allocate(int32_t n);
  // Records that `block` (referenced) now holds the KV of the full block `tokens` whose chain
  // hash is `hash` after `parent`. A second block with the same content is not inserted.
  void Insert(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  // Drops one reference on each block, last first (a sequence's blocks in order: its tail is
  // evicted before its head): unreferenced cached blocks stay cached (evictable), other
  // unreferenced blocks are free again.
  void Release(std::span<const int32_t> blocks);
  // Counts a lookup of `query` prompt tokens of which `hit` were cached.
  void RecordLookup(int64_t query, int64_t hit) {
    stats_.query_tokens += query;
    stats_.hit_tokens += hit;
  }

  PrefixCacheStats stats() const;
  bool enabled() const { return enabled_; }
  int32_t num_blocks() const { return allocator_.num_blocks(); }
  // Blocks referenced by running requests.
  int32_t num_referenced() const { return referenced_; }
  // Blocks neither referenced nor cached.
  int32_t num_free() const { return allocator_.num_free(); }
  // References held on `block` (accounting checks).
  int32_t refs(int32_t block) const { return blocks_[static_cast<size_t>(block)].refs; }

 private:
  struct Block {
    int32_t refs = 0;
    bool cached = false;
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru;  // valid when cached and refs == 0
  };
  uint64_t Hash(uint64_t parent, std::span<const int32_t> tokens) const;
  void Evict(int32_t block);

  BlockAllocator allocator_;
  int32_t block_tokens_;
  bool enabled_;
  uint64_t salt_;
  std::vector<Block> blocks_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::list<int32_t> lru_;  // unreferenced cached blocks, least recently used first
  int32_t referenced_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_PREFIX_CACHE_H_
