#include "worker/runner/kv_cache.h"

namespace llm::runner {

CpuKvCache::CpuKvCache(const model::ModelConfig& c, int32_t num_blocks, int32_t block_tokens)
    : num_blocks_(num_blocks),
      block_tokens_(block_tokens),
      num_kv_heads_(c.num_kv_heads),
      head_dim_(c.head_dim) {
  const size_t per_layer =
      static_cast<size_t>(num_blocks) * num_kv_heads_ * block_tokens_ * head_dim_;
  keys_.assign(c.num_layers, std::vector<float>(per_layer, 0.0f));
  values_.assign(c.num_layers, std::vector<float>(per_layer, 0.0f));
}

size_t CpuKvCache::bytes() const {
  size_t n = 0;
  for (const auto& k : keys_) n += k.size() * sizeof(float);
  return 2 * n;
}

}  // namespace llm::runner
