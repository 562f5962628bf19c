// The paged KV cache's block pool: which of `num_blocks` fixed-size blocks are free. Pure logic;
// owned by the scheduler (engine thread only).
#ifndef LLM_WORKER_ENGINE_BLOCK_ALLOCATOR_H_
#define LLM_WORKER_ENGINE_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace llm::engine {

class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);

  // `n` blocks, or nullopt (and nothing taken) when fewer are free.
  std::optional<std::vector<int32_t>> Allocate(int32_t n);
  // Returns blocks taken by Allocate. Each block must be freed exactly once.
  void Free(const std::vector<int32_t>& blocks);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks_ - num_free(); }

 private:
  int32_t num_blocks_;
  std::vector<int32_t> free_;  // stack: recently freed blocks are reused first
};

// Blocks needed to hold `tokens` positions.
inline int32_t BlocksFor(int32_t tokens, int32_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_BLOCK_ALLOCATOR_H_
