// Paged KV-cache storage for the CPU runner: a pool of fixed-size blocks per layer. Which
// blocks a sequence owns is decided by the engine's block allocator; the runner only reads and
// writes the blocks named in each sequence's block table.
#ifndef LLM_WORKER_RUNNER_KV_CACHE_H_
#define LLM_WORKER_RUNNER_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/model/config.h"

namespace llm::runner {

// Layout per layer: keys [num_blocks][num_kv_heads][head_dim][block_tokens] (transposed in the
// block, so a query's scores against a block are vector multiply-add chains) and values
// [num_blocks][num_kv_heads][block_tokens][head_dim].
class CpuKvCache {
 public:
  CpuKvCache(const model::ModelConfig& config, int32_t num_blocks, int32_t block_tokens);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_tokens() const { return block_tokens_; }
  size_t bytes() const;

  // Start of (block, kv_head) in a layer: keys [head_dim][block_tokens], values
  // [block_tokens][head_dim].
  float* Key(int layer, int32_t block, int kv_head) { return At(keys_, layer, block, kv_head); }
  float* Value(int layer, int32_t block, int kv_head) { return At(values_, layer, block, kv_head); }
  const float* Key(int layer, int32_t block, int kv_head) const {
    return At(keys_, layer, block, kv_head);
  }
  const float* Value(int layer, int32_t block, int kv_head) const {
    return At(values_, layer, block, kv_head);
  }

 private:
  float* At(std::vector<std::vector<float>>& v, int layer, int32_t block, int head) {
    return v[layer].data() + Offset(block, head);
  }
  const float* At(const std::vector<std::vector<float>>& v, int layer, int32_t block,
                  int head) const {
    return v[layer].data() + Offset(block, head);
  }
  size_t Offset(int32_t block, int head) const {
    return (static_cast<size_t>(block) * num_kv_heads_ + head) * block_tokens_ * head_dim_;
  }

  int32_t num_blocks_;
  int32_t block_tokens_;
  int32_t num_kv_heads_;
  int32_t head_dim_;
  std::vector<std::vector<float>> keys_;    // [layer]
  std::vector<std::vector<float>> values_;  // [layer]
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_KV_CACHE_H_
