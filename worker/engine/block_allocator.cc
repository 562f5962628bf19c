#include "worker/engine/block_allocator.h"

namespace llm::engine {

BlockAllocator::BlockAllocator(int32_t num_blocks) : num_blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<std::vector<int32_t>> BlockAllocator::Allocate(int32_t n) {
  if (n < 0 || n > num_free()) return std::nullopt;
  std::vector<int32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  return out;
}

void BlockAllocator::Free(const std::vector<int32_t>& blocks) {
  free_.insert(free_.end(), blocks.rbegin(), blocks.rend());
}

}  // namespace llm::engine
