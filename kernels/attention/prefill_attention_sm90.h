// Prefill attention for Hopper (sm_90a): the same work, tiles and results contract as the tiled
// kernel (prefill_attention.h: chunks, 64-row tiles of packed (token, head) rows, 64-key tiles
// from the same first key, causal mask, GQA, sliding window), on Hopper's own units.
//
// A block is one consumer warpgroup (4 warps, the tile's 64 rows) and one producer warp:
// - the producer's lane 0 copies each 64-key tile of K and V with the bulk tensor copy (TMA),
//   one box per cache block (or 64 keys of one), into a ring of 3 shared-memory stages under the
//   128-byte swizzle, and completes it on the stage's "full" mbarrier (a box past the rows'
//   span copies the span's last box again: no row sees it);
// - the warpgroup computes S = Q K^T and O += P V with wgmma (m64n64k16, bf16 in, fp32
//   accumulate): Q and P from registers, K (K-major) and V (MN-major) from the stage; an fp32
//   online softmax between the two as in the tiled kernel; then it releases the stage on its
//   "empty" mbarrier.
// A row's keys are summed tile by tile in the tiled kernel's order, but within a tile in the
// tensor cores' own order: results agree with the tiled kernel to rounding, not bit for bit, and
// depend only on the row's own keys (batch invariance holds within this kernel).
//
// Requires a device of compute capability 9.0 (built for sm_90a alone), head_dim 64 or 128, a
// bf16 cache, and a cache block of a power of two tokens, 8 or more. Chosen at start
// (engine.cuda_hopper_prefill); everything else, and sm_80, keeps the tiled kernel.
#ifndef LLM_KERNELS_ATTENTION_PREFILL_ATTENTION_SM90_H_
#define LLM_KERNELS_ATTENTION_PREFILL_ATTENTION_SM90_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/prefill_attention.h"

namespace llm::kernels {

// One layer's K and V cache as 2-d tensors for the bulk tensor copy: rows of head_dim bf16 (the
// cache's [block][kv_head][t % block_tokens] flattened, `rows` of them), boxes of 64 columns by
// `box_rows` rows (a cache block, or 64 rows of one) under the 128-byte swizzle.
struct PrefillTensorMaps {
  CUtensorMap k;
  CUtensorMap v;
  int32_t box_rows = 0;
  int32_t rows = 0;
};

// Whether the Hopper kernel runs on a device of compute capability major.minor for this shape.
bool HopperPrefillSupported(int device_major, int device_minor, int32_t head_dim,
                            int32_t block_tokens, bool fp8_cache);

// The maps of one layer's cache (k_cache and v_cache as PagedCacheOffset lays them out, `blocks`
// blocks). cudaErrorInvalidValue when the shape is not supported or the rows overflow the copy
// engine's 32-bit coordinates; cudaErrorNotSupported when the driver lacks the tensor-map entry
// point.
cudaError_t MakePrefillTensorMaps(const void* k_cache, const void* v_cache, int64_t blocks,
                                  int32_t num_kv_heads, int32_t block_tokens, int32_t head_dim,
                                  PrefillTensorMaps* maps);

// Allows the kernel for `head_dim` its shared memory (97 KiB at 128) on the current device.
cudaError_t PrepareHopperPrefillAttention(int32_t head_dim);

// Grid (num_tiles, num_kv_heads), 160 threads. `maps` are those of params' k_cache and v_cache.
// Called by LaunchPrefillAttention when params.tma is set.
cudaError_t LaunchHopperPrefillAttention(const PrefillAttentionParams& params,
                                         const PrefillTensorMaps& maps, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_PREFILL_ATTENTION_SM90_H_
