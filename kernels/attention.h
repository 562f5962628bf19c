// Paged attention of one query token per row against that row's sequence in the KV cache
// (positions [first, pos], where first = pos - window + 1 with a sliding window, else 0), with
// grouped-query heads. Online softmax over tiles of keys: no score matrix is materialised.
//
// Decode rows split their context into partitions of `partition_tokens` (flash-decoding), each
// a block, combined by a second kernel; prefill rows (several consecutive query tokens of one
// sequence) run one partition each. Cache layout as in rope_kv.h. head_dim in {16, 32, 64, 128},
// num_heads / num_kv_heads <= 8. Reference: the attention of runner::CpuModel.
#ifndef LLM_KERNELS_ATTENTION_H_
#define LLM_KERNELS_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct AttentionParams {
  const __nv_bfloat16* qkv;  // [batch rows, (H + 2 KV) * D]; q after RoPE
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  const int32_t* row_pos;   // [batch rows]
  const int32_t* row_slot;  // [batch rows], -1 for padding
  const int32_t* block_tables;
  int32_t max_blocks_per_seq;
  __nv_bfloat16* out;  // [batch rows, H * D]
  // Split-K workspace, indexed by (row - row_begin): [rows][H][max_partitions][D] and
  // [rows][H][max_partitions]. Unused when partition_tokens is 0.
  float* partial_out;
  float* partial_max;
  float* partial_sum;
  int32_t row_begin;  // this launch covers batch rows [row_begin, row_begin + rows)
  int32_t rows;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_tokens;
  int32_t sliding_window;    // 0: none
  int32_t partition_tokens;  // 0: one partition per row
  int32_t max_partitions;    // >= ceil(max context / partition_tokens) when splitting
  float scale;               // 1 / sqrt(head_dim)
};

// False when head_dim or the group size is not supported.
bool AttentionSupported(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads);

cudaError_t LaunchAttention(const AttentionParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_H_
