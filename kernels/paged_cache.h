// Where the paged KV cache keeps a position's key (or value) vector: the slot's block table
// gives the block, then [block][kv_head][t % block_tokens][head_dim] (bf16). Shared by the
// kernels that write the cache and those that read it, and by the host tests that emulate them.
#ifndef LLM_KERNELS_PAGED_CACHE_H_
#define LLM_KERNELS_PAGED_CACHE_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

// `Params` has block_tables ([slots, max_blocks_per_seq]), max_blocks_per_seq, num_kv_heads,
// block_tokens and head_dim: the element offset of position `t` of the sequence in `slot`.
template <typename Params>
__host__ __device__ inline int64_t PagedCacheOffset(const Params& p, int32_t slot, int32_t t,
                                                    int32_t kv_head) {
  const int32_t block =
      p.block_tables[static_cast<int64_t>(slot) * p.max_blocks_per_seq + t / p.block_tokens];
  return ((static_cast<int64_t>(block) * p.num_kv_heads + kv_head) * p.block_tokens +
          t % p.block_tokens) *
         p.head_dim;
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_PAGED_CACHE_H_
