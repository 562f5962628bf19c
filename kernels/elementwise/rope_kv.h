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
// Where the head size is a multiple of 8 and the buffers 16-byte aligned (RopeKvVectorsFit),
// LaunchRopeKv runs RopeKvVectorItem instead: eight elements of the row an item, moved by 8- and
// 16-byte loads and stores, the same bits (a prompt step's rows make this a pass over memory,
// where one-element items kept the device at a fraction of its bandwidth).
#ifndef LLM_KERNELS_ELEMENTWISE_ROPE_KV_H_
#define LLM_KERNELS_ELEMENTWISE_ROPE_KV_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

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

// The vector items of one row: (num_heads + 2 * num_kv_heads) * head_dim / 8, each four rotated
// pairs (i..i+3 and i + half..) of a q or k head or eight elements of a v head.
__host__ __device__ inline int32_t RopeKvVectorItems(const RopeKvParams& p) {
  return (p.num_heads + 2 * p.num_kv_heads) * (p.head_dim / 8);
}

// Whether the vector items can run on `p`: head_dim % 8 == 0 and the rows, tables and caches
// 16-byte aligned (each load and store then falls on its own size).
inline bool RopeKvVectorsFit(const RopeKvParams& p) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return p.head_dim % 8 == 0 && aligned(p.qkv) && aligned(p.cos_table) && aligned(p.sin_table) &&
         aligned(p.k_cache) && aligned(p.v_cache);
}

// N (4 or 8) consecutive elements in one load or store on the device (the caller keeps them
// aligned to their size); memcpy on the host.
template <int N>
__host__ __device__ inline void LoadBf16s(const __nv_bfloat16* src, float (&out)[N]) {
  alignas(16) __nv_bfloat16 v[N];
#if defined(__CUDA_ARCH__)
  if constexpr (N == 4) {
    *reinterpret_cast<uint2*>(v) = *reinterpret_cast<const uint2*>(src);
  } else {
    *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(src);
  }
#else
  std::memcpy(v, src, sizeof(v));
#endif
  for (int k = 0; k < N; ++k) out[k] = __bfloat162float(v[k]);
}

__host__ __device__ inline void LoadFloat4(const float* src, float (&out)[4]) {
#if defined(__CUDA_ARCH__)
  const float4 v = *reinterpret_cast<const float4*>(src);
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
#else
  std::memcpy(out, src, sizeof(out));
#endif
}

template <typename T, int N>
__host__ __device__ inline void StoreVector(T* dst, const T (&v)[N]) {
#if defined(__CUDA_ARCH__)
  static_assert(sizeof(v) == 4 || sizeof(v) == 8 || sizeof(v) == 16);
  if constexpr (sizeof(v) == 4) {
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(v);
  } else if constexpr (sizeof(v) == 8) {
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(v);
  } else {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
  }
#else
  std::memcpy(dst, v, sizeof(v));
#endif
}

// values[0..N) as elements at..at+N-1 of a cache in `fp8`'s format: StoreKvElement's bits, in
// one store.
template <int N>
__host__ __device__ inline void StoreKvVector(void* cache, int64_t at, const float (&values)[N],
                                              bool fp8, float scale) {
  if (fp8) {
    alignas(8) uint8_t v[N];
    for (int k = 0; k < N; ++k) v[k] = Fp8E4M3FromFloat(values[k] / scale);
    StoreVector(static_cast<uint8_t*>(cache) + at, v);
  } else {
    alignas(16) __nv_bfloat16 v[N];
    for (int k = 0; k < N; ++k) v[k] = __float2bfloat16_rn(values[k]);
    StoreVector(static_cast<__nv_bfloat16*>(cache) + at, v);
  }
}

template <int N>
__host__ __device__ inline void StoreBf16s(__nv_bfloat16* dst, const float (&values)[N]) {
  alignas(16) __nv_bfloat16 v[N];
  for (int k = 0; k < N; ++k) v[k] = __float2bfloat16_rn(values[k]);
  StoreVector(dst, v);
}

// Vector item `k` of row `r` (whose slot is not padding; RopeKvVectorsFit): RopeKvItem's work
// on four pairs or eight v elements at once.
__host__ __device__ inline void RopeKvVectorItem(const RopeKvParams& p, int32_t r, int32_t k) {
  const int32_t slot = p.row_slot[r];
  const int32_t pos = p.row_pos[r];
  const int32_t half = p.head_dim / 2, per_head = p.head_dim / 8;
  const int32_t rot_heads = p.num_heads + p.num_kv_heads;
  __nv_bfloat16* row = p.qkv + static_cast<int64_t>(r) * (rot_heads + p.num_kv_heads) * p.head_dim;
  const int32_t head = k / per_head, j = k % per_head;
  if (head >= rot_heads) {  // eight v elements, copied as they are (or rounded)
    float v[8];
    LoadBf16s(row + head * p.head_dim + 8 * j, v);
    const int64_t at = PagedCacheOffset(p, slot, pos, head - rot_heads) + 8 * j;
    StoreKvVector(p.v_cache, at, v, p.kv.fp8, p.kv.v_scale);
    return;
  }
  const int32_t i = 4 * j;
  __nv_bfloat16* h = row + head * p.head_dim;
  float a[4], b[4], c[4], s[4], ra[4], rb[4];
  LoadBf16s(h + i, a);
  LoadBf16s(h + i + half, b);
  LoadFloat4(p.cos_table + static_cast<int64_t>(pos) * half + i, c);
  LoadFloat4(p.sin_table + static_cast<int64_t>(pos) * half + i, s);
  for (int n = 0; n < 4; ++n) RotatePair(a[n], b[n], c[n], s[n], &ra[n], &rb[n]);
  if (head < p.num_heads) {
    StoreBf16s(h + i, ra);
    StoreBf16s(h + i + half, rb);
  } else {
    const int64_t at = PagedCacheOffset(p, slot, pos, head - p.num_heads) + i;
    StoreKvVector(p.k_cache, at, ra, p.kv.fp8, p.kv.k_scale);
    StoreKvVector(p.k_cache, at + half, rb, p.kv.fp8, p.kv.k_scale);
  }
}

cudaError_t LaunchRopeKv(const RopeKvParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_ROPE_KV_H_
