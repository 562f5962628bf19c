// RoPE (Hugging Face rotate-half layout) applied to q in place and to k, with k and v written
// into the paged KV cache at each row's position.
//
// Cache layout per layer: [num_blocks][num_kv_heads][block_tokens][head_dim], bf16 or E4M3
// (`kv`: the rotated k and the v element, in fp32, divided by the layer's scale and rounded),
// for K and V (kernels/paged_cache.h).
// Rows with slot < 0 (padding) are skipped. cos/sin come from a table [max_positions][head_dim/2]
// computed on the host in double (runner::RopeCosSin), so they are the CPU reference's values.
//
// The work of a row is RopeKvItems items (a rotated pair of a q or k head, or one element of a
// v head), spread over enough blocks per row that a batch of one still fills many SMs; each
// item is RopeKvItem, which the host can run too (tests check the indexing without a GPU).
#ifndef LLM_KERNELS_ELEMENTWISE_ROPE_KV_H_
#define LLM_KERNELS_ELEMENTWISE_ROPE_KV_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/paged_cache.h"

namespace llm::kernels {

struct RopeKvParams {
  __nv_bfloat16* qkv;           // [rows, (num_heads + 2 * num_kv_heads) * head_dim]
  const int32_t* row_pos;       // [rows] position of each row's token
  const int32_t* row_slot;      // [rows] slot of each row, -1 for padding
  const int32_t* block_tables;  // [num_slots, max_blocks_per_seq]
  int32_t max_blocks_per_seq;
  const float* cos_table;  // [max_positions, head_dim / 2]
  const float* sin_table;  // [max_positions, head_dim / 2]
  void* k_cache;           // one layer, elements as `kv` says
  void* v_cache;
  int32_t rows;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_tokens;
  KvCacheFormat kv;  // the cache elements' type and scales (paged_cache.h)
};

// Items of one row: (num_heads + num_kv_heads) * head_dim / 2 rotations, then
// num_kv_heads * head_dim v elements.
__host__ __device__ inline int32_t RopeKvItems(const RopeKvParams& p) {
  return (p.num_heads + p.num_kv_heads) * (p.head_dim / 2) + p.num_kv_heads * p.head_dim;
}

// The rotation of pair (a, b) by (cos, sin), each product and sum rounded on its own (no fused
// multiply-add), so the device, the host and the fused QKV GEMV epilogue (gemv.h) give the
// same bits.
__host__ __device__ inline void RotatePair(float a, float b, float c, float s, float* out_a,
                                           float* out_b) {
#if defined(__CUDA_ARCH__)
  *out_a = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  *out_b = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
#else
  const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
  *out_a = ac - bs;
  *out_b = bc + as;
#endif
}

// Writes (a, b) as dims i and i + head_dim / 2 of kv head `kv_head` at position `pos` of the
// sequence in `slot`, into `cache` (K or V, with `scale`), in the cache's format. RopeKvItem's k
// and the q/k/v GEMV's RoPE/KV epilogue (gemv.h) write through it.
__host__ __device__ inline void StoreCachePair(const RopeKvParams& p, void* cache, float scale,
                                               int32_t slot, int32_t pos, int32_t kv_head,
                                               int32_t i, float a, float b) {
  const int64_t at = PagedCacheOffset(p, slot, pos, kv_head);
  StoreKvElement(cache, at + i, a, p.kv.fp8, scale);
  StoreKvElement(cache, at + i + p.head_dim / 2, b, p.kv.fp8, scale);
}

// Item `k` of row `r` (whose slot is not padding): rotates pair (i, i + half) of a q head in
// place or of a k head into the K cache, or copies one v element into the V cache.
__host__ __device__ inline void RopeKvItem(const RopeKvParams& p, int32_t r, int32_t k) {
  const int32_t slot = p.row_slot[r];
  const int32_t pos = p.row_pos[r];
  const int32_t half = p.head_dim / 2;
  const int32_t rot_heads = p.num_heads + p.num_kv_heads;
  __nv_bfloat16* row = p.qkv + static_cast<int64_t>(r) * (rot_heads + p.num_kv_heads) * p.head_dim;
  if (k < rot_heads * half) {
    const int32_t head = k / half, i = k % half;
    __nv_bfloat16* h = row + head * p.head_dim;
    const float c = p.cos_table[static_cast<int64_t>(pos) * half + i];
    const float s = p.sin_table[static_cast<int64_t>(pos) * half + i];
    const float a = __bfloat162float(h[i]), b = __bfloat162float(h[i + half]);
    float ra, rb;
    RotatePair(a, b, c, s, &ra, &rb);
    if (head < p.num_heads) {
      h[i] = __float2bfloat16_rn(ra);
      h[i + half] = __float2bfloat16_rn(rb);
    } else {
      StoreCachePair(p, p.k_cache, p.kv.k_scale, slot, pos, head - p.num_heads, i, ra, rb);
    }
  } else {
    const int32_t e = k - rot_heads * half;  // v heads are copied as they are (or rounded)
    const int64_t at = PagedCacheOffset(p, slot, pos, e / p.head_dim) + e % p.head_dim;
    StoreKvElement(p.v_cache, at, __bfloat162float(row[rot_heads * p.head_dim + e]), p.kv.fp8,
                   p.kv.v_scale);
  }
}

cudaError_t LaunchRopeKv(const RopeKvParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_ROPE_KV_H_
