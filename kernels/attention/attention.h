// Paged attention of one query token per row against that row's sequence in the KV cache
// (positions [first, pos], where first = pos - window + 1 with a sliding window, else 0), with
// grouped-query heads: a block serves every query head of one key/value head, so K/V is read
// once per group. Online softmax over tiles of keys: no score matrix is materialised.
//
// Two kernels, the same contract: for head_dim 64 and 128 (unless `tensor_cores` is false) the
// scores and P V run on tensor cores (attention_mma.cu: mma.sync with K, V and Q loaded 16
// bytes at a time straight into the fragments, each of the block's 4 warps walking its own
// 16-key tiles with its own softmax, merged at the end); otherwise on CUDA cores (attention.cu:
// 32-key tiles shared by the block's warps).
//
// Decode rows (flash-decoding) cut their *live* context into `splits` chunks, a block each, so a
// small batch still fills the device; the last chunk to finish (an arrival counter per row and
// KV head, after a fence) combines them, in chunk order, so no second launch. With splits == 1
// (large batches, and prefill rows, which are several consecutive query tokens of one sequence)
// one block covers the whole row and writes the output itself: no combine. DecodeSplits picks
// the count from the batch and the device. Cache layout: paged_cache.h; an FP8 cache
// (params.kv.fp8) is read 8 bytes per 8 elements and decoded exactly: times its scales on CUDA
// cores, unscaled into the tensor cores' bf16 with the K scale applied to the scores and the V
// scale to the output. head_dim in {16, 32, 64, 128}, num_heads / num_kv_heads <= 8. Reference:
// the attention of runner::CpuModel (with its FP8 cache's rounding, kv_cache_spec.h).
#ifndef LLM_KERNELS_ATTENTION_ATTENTION_H_
#define LLM_KERNELS_ATTENTION_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/paged_cache.h"

namespace llm::kernels {

struct AttentionParams {
  const __nv_bfloat16* qkv;  // [batch rows, (H + 2 KV) * D]; q after RoPE
  const void* k_cache;       // one layer, elements as `kv` says (paged_cache.h)
  const void* v_cache;
  const int32_t* row_pos;   // [batch rows]
  const int32_t* row_slot;  // [batch rows], -1 for padding
  const int32_t* block_tables;
  int32_t max_blocks_per_seq;
  __nv_bfloat16* out;  // [batch rows, H * D]
  // Split-K workspace, indexed by (row - row_begin): [rows][H][splits][D] and
  // [rows][H][splits]. Unused when splits is 1.
  float* partial_out;
  float* partial_max;
  float* partial_sum;
  // [rows][num_kv_heads] arrival counters of split rows: zero before the first launch, and each
  // launch leaves them zero. Unused when splits is 1.
  int32_t* split_arrivals;
  int32_t row_begin;  // this launch covers batch rows [row_begin, row_begin + rows)
  int32_t rows;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_tokens;
  int32_t sliding_window;  // 0: none
  int32_t splits;          // chunks per row (grid z); 1: none (always 1 for prefill rows)
  float scale;             // 1 / sqrt(head_dim)
  // The tensor-core kernel where the head size has one (AttentionUsesTensorCores); false: the
  // CUDA-core kernel always (engine.cuda_tensor_core_decode).
  bool tensor_cores = true;
  KvCacheFormat kv;  // the cache elements' type and scales (paged_cache.h)
};

// The most chunks per row LaunchAttention takes (the combine keeps a scale per chunk and head in
// shared memory).
inline constexpr int32_t kMaxAttentionSplits = 1024;

// Keys per tile of the CUDA-core kernel.
inline constexpr int32_t kAttentionTile = 32;
// A chunk is a whole number of this many keys: two tiles of the CUDA-core kernel, and one
// 16-key tile for each of the tensor-core kernel's 4 warps.
inline constexpr int32_t kAttentionChunkKeys = 64;

struct KeyRange {
  int32_t begin;
  int32_t end;  // exclusive
};

// Positions per chunk when a context of `live` positions is cut into `splits` chunks.
__host__ __device__ inline int32_t ChunkTokens(int32_t live, int32_t splits) {
  const int32_t per = (live + splits - 1) / splits;
  return (per + kAttentionChunkKeys - 1) / kAttentionChunkKeys * kAttentionChunkKeys;
}

// The positions chunk `part` of the row at `pos` covers (empty when the row's context is
// shorter than its chunks reach); with splits <= 1, the whole context.
__host__ __device__ inline KeyRange AttentionKeyRange(int32_t pos, int32_t sliding_window,
                                                      int32_t splits, int32_t part) {
  const int32_t from = pos - sliding_window + 1;
  const int32_t first = sliding_window > 0 && from > 0 ? from : 0;
  if (splits <= 1) return {first, pos + 1};
  const int32_t chunk = ChunkTokens(pos + 1 - first, splits);
  const int32_t begin = first + part * chunk;
  const int32_t end = begin + chunk < pos + 1 ? begin + chunk : pos + 1;
  return {begin, end > begin ? end : begin};
}

// Chunks the row at `pos` uses: the combine reads these only.
__host__ __device__ inline int32_t UsedChunks(int32_t pos, int32_t sliding_window, int32_t splits) {
  if (splits <= 1) return 1;
  const KeyRange all = AttentionKeyRange(pos, sliding_window, 1, 0);
  const int32_t chunk = ChunkTokens(all.end - all.begin, splits);
  return (all.end - all.begin + chunk - 1) / chunk;
}

// Chunks per row for a decode launch of `rows` rows: enough blocks (rows * num_kv_heads *
// splits) for kAttentionBlocksPerSm on each of `sm_count` SMs, at most `max_splits`, at least 1.
inline constexpr int32_t kAttentionBlocksPerSm = 4;
int32_t DecodeSplits(int32_t rows, int32_t num_kv_heads, int32_t sm_count, int32_t max_splits);

// False when head_dim or the group size is not supported.
bool AttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);

// Whether LaunchAttention runs `params` on the tensor-core kernel: head_dim 64 or 128, and
// params.tensor_cores.
bool AttentionUsesTensorCores(const AttentionParams& params);

cudaError_t LaunchAttention(const AttentionParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_ATTENTION_H_
