// Tiled prefill attention over the paged KV cache (FlashAttention-2 style): the prompt chunks of
// one step, each a run of consecutive query tokens of one sequence at its own position in its
// context (a chunk may continue an earlier one), in one launch.
//
// The G = num_heads / num_kv_heads query heads of a kv head are packed into the tile's rows:
// row m of a chunk is token m / G, head m % G, so a block reads each K/V tile once for the whole
// group. A block (4 warps, 16 rows each) takes kPrefillTileRows rows of one chunk and one kv
// head; K and V go through shared memory in tiles of kPrefillTileKeys keys (double buffered:
// cp.async for a bf16 cache, loads decoded through registers for an FP8 one); S = Q K^T and O = P V
// run on tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate) with an fp32 online softmax. A
// row sees keys [first, pos] (first = pos - window + 1 with a sliding window, else 0); the tiles a
// warp's rows cannot see are skipped, and only the tiles on the diagonal or the window's edge are
// masked. Requires sm_80 or newer; head_dim in {16, 32, 64, 128}; any group size. Reference: the
// attention of runner::CpuModel.
#ifndef LLM_KERNELS_ATTENTION_PREFILL_ATTENTION_H_
#define LLM_KERNELS_ATTENTION_PREFILL_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/paged_cache.h"

namespace llm::kernels {

inline constexpr int32_t kPrefillTileRows = 64;  // packed (token, head) rows per block
inline constexpr int32_t kPrefillWarpRows = 16;  // rows per warp (mma's m)
inline constexpr int32_t kPrefillTileKeys = 64;  // keys per K/V tile

// One prompt chunk of the step: batch rows [row_begin, row_begin + tokens) hold the sequence in
// `slot` at positions [pos_begin, pos_begin + tokens).
struct PrefillChunk {
  int32_t row_begin;
  int32_t tokens;
  int32_t slot;
  int32_t pos_begin;
};

// A block's work: packed rows [row_begin, row_begin + kPrefillTileRows) of chunk `chunk` (cut at
// the chunk's tokens * G rows).
struct PrefillTile {
  int32_t chunk;
  int32_t row_begin;
};

struct PrefillTensorMaps;  // prefill_attention_sm90.h

struct PrefillAttentionParams {
  const __nv_bfloat16* qkv;  // [batch rows, (H + 2 KV) * D]; q after RoPE
  const void* k_cache;       // one layer, elements as `kv` says (paged_cache.h)
  const void* v_cache;
  const int32_t* block_tables;  // [slots, max_blocks_per_seq]
  int32_t max_blocks_per_seq;
  const PrefillChunk* chunks;
  const PrefillTile* tiles;
  int32_t num_tiles;   // grid x
  __nv_bfloat16* out;  // [batch rows, H * D]
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_tokens;
  int32_t sliding_window;  // 0: none
  float scale;             // 1 / sqrt(head_dim)
  KvCacheFormat kv;        // the cache elements' type and scales (paged_cache.h)
  // Host pointer: this layer's tensor maps when the Hopper kernel was chosen at start
  // (prefill_attention_sm90.h), which LaunchPrefillAttention then runs; null: the tiled kernel.
  const PrefillTensorMaps* tma = nullptr;
};

// Replaces `tiles` with the tiles of `chunks` for group size `group`, the ones with the most
// keys first (so the long blocks start early and the short ones fill the tail). Allocates
// nothing when `tiles` has MaxPrefillTiles capacity.
void PlanPrefillTiles(const std::vector<PrefillChunk>& chunks, int32_t group,
                      std::vector<PrefillTile>& tiles);

// The tiles of `tiles` (PlanPrefillTiles' of `chunks`) holding a row of the last token of a chunk
// c with samples[c] != 0, in `tiles`' order: all a step's last layer needs, since only those
// rows go on to be sampled. At most two a chunk (a token's `group` rows, at most 8, may straddle
// two tiles).
void SelectLastTokenTiles(const std::vector<PrefillChunk>& chunks,
                          const std::vector<uint8_t>& samples, int32_t group,
                          const std::vector<PrefillTile>& tiles, std::vector<PrefillTile>& out);

// The most tiles `tokens` prompt tokens in at most `max_chunks` chunks can need.
int32_t MaxPrefillTiles(int32_t tokens, int32_t max_chunks, int32_t group);

// The first position a query at `pos` sees.
__host__ __device__ inline int32_t PrefillFirstKey(int32_t pos, int32_t sliding_window) {
  const int32_t from = pos - sliding_window + 1;
  return sliding_window > 0 && from > 0 ? from : 0;
}

// Packed row `m` of a chunk (m < tokens * group): its token within the chunk, and its query head
// within the kv head's group.
struct PackedRow {
  int32_t token;
  int32_t head_in_group;
};
__host__ __device__ inline PackedRow UnpackRow(int32_t m, int32_t group) {
  return {m / group, m % group};
}

// Positions [begin, end) of the keys the packed rows [m_begin, m_end) of `chunk` see (m_end >
// m_begin): from the first row's first key, rounded down to a whole tile, to the last row's
// position. Tiles start at multiples of kPrefillTileKeys, so a row's keys fall into the same
// tiles, summed in the same order, however its prompt was cut into chunks (batch invariance
// with a sliding window; without one every span starts at 0).
struct KeySpan {
  int32_t begin;
  int32_t end;  // exclusive
};
__host__ __device__ inline KeySpan PrefillRowsKeys(const PrefillChunk& chunk, int32_t group,
                                                   int32_t m_begin, int32_t m_end,
                                                   int32_t sliding_window) {
  const int32_t lo = chunk.pos_begin + m_begin / group;
  const int32_t hi = chunk.pos_begin + (m_end - 1) / group;
  const int32_t first = PrefillFirstKey(lo, sliding_window);
  return {first - first % kPrefillTileKeys, hi + 1};
}

// How the keys [key0, key0 + kPrefillTileKeys) of a tile meet rows whose positions span [lo,
// hi]: kSkip when no row sees any of them, kFull when every row sees all of them (no mask).
enum class TileCover { kSkip, kMasked, kFull };
__host__ __device__ inline TileCover CoverOfTile(int32_t key0, int32_t lo, int32_t hi,
                                                 int32_t sliding_window) {
  const int32_t key_last = key0 + kPrefillTileKeys - 1;
  if (key0 > hi || key_last < PrefillFirstKey(lo, sliding_window)) return TileCover::kSkip;
  if (key_last <= lo && key0 >= PrefillFirstKey(hi, sliding_window)) return TileCover::kFull;
  return TileCover::kMasked;
}

// Whether a query at `pos` sees the key at `key`.
__host__ __device__ inline bool PrefillSees(int32_t pos, int32_t key, int32_t sliding_window) {
  return key <= pos && key >= PrefillFirstKey(pos, sliding_window);
}

// P (the C fragments of S, 8 keys each) as the A operand of O = P V for the 16 keys of k-step
// kk: register `reg` takes C fragment `ntile` of S, elements `elem` and elem + 1.
struct ScoreSource {
  int32_t ntile;
  int32_t elem;
};
__host__ __device__ inline ScoreSource PFragmentSource(int32_t kk, int32_t reg) {
  return {2 * kk + reg / 2, 2 * (reg % 2)};
}

// False when the head size is not supported.
bool PrefillAttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);

// Allows the kernel for `head_dim` the shared memory it needs (68 KiB at 128, over the default
// 48 KiB) on the current device. Once per device before the first launch (CudaModel::Load).
cudaError_t PreparePrefillAttention(int32_t head_dim);

// Grid (num_tiles, num_kv_heads): the tiled kernel, or the Hopper one where params.tma is set.
cudaError_t LaunchPrefillAttention(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_PREFILL_ATTENTION_H_
