// Where the paged KV cache keeps a position's key (or value) vector: the slot's block table
// gives the block, then [block][kv_head][t % block_tokens][head_dim], each element bf16 or E4M3
// (KvCacheFormat). Shared by the kernels that write the cache and those that read it, and by
// the host tests that emulate them.
#ifndef LLM_KERNELS_PAGED_CACHE_H_
#define LLM_KERNELS_PAGED_CACHE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8.h"

namespace llm::kernels {

// A layer's cache elements: bf16, or (fp8) E4M3 bytes standing for the byte's value times the
// layer's K or V scale (worker/model/kv_cache_spec.h). Writers divide by the scale and round to
// nearest even, saturating (common/fp8.h), as the CPU reference does; readers multiply back
// (or fold the scale into the scores and the output, where the product runs on bf16 tensor
// cores: the E4M3 value itself is exact in bf16).
struct KvCacheFormat {
  bool fp8 = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Bytes of one cached element.
__host__ __device__ inline int32_t KvElementBytes(bool fp8) { return fp8 ? 1 : 2; }

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

// Stores `value` as element `at` of a cache whose elements `fp8` says, with `scale` (fp8).
__host__ __device__ inline void StoreKvElement(void* cache, int64_t at, float value, bool fp8,
                                               float scale) {
  if (fp8) {
    static_cast<uint8_t*>(cache)[at] = Fp8E4M3FromFloat(value / scale);
  } else {
    static_cast<__nv_bfloat16*>(cache)[at] = __float2bfloat16_rn(value);
  }
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_PAGED_CACHE_H_
