// RoPE (Hugging Face rotate-half layout) applied to q in place and to k, with k and v written
// into the paged KV cache at each row's position.
//
// Cache layout per layer: [num_blocks][num_kv_heads][block_tokens][head_dim] bf16, for K and V.
// Rows with slot < 0 (padding) are skipped. cos/sin come from a table [max_positions][head_dim/2]
// computed on the host in double (runner::RopeCosSin), so they are the CPU reference's values.
#ifndef LLM_KERNELS_ROPE_KV_H_
#define LLM_KERNELS_ROPE_KV_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct RopeKvParams {
  __nv_bfloat16* qkv;           // [rows, (num_heads + 2 * num_kv_heads) * head_dim]
  const int32_t* row_pos;       // [rows] position of each row's token
  const int32_t* row_slot;      // [rows] slot of each row, -1 for padding
  const int32_t* block_tables;  // [num_slots, max_blocks_per_seq]
  int32_t max_blocks_per_seq;
  const float* cos_table;  // [max_positions, head_dim / 2]
  const float* sin_table;  // [max_positions, head_dim / 2]
  __nv_bfloat16* k_cache;  // one layer
  __nv_bfloat16* v_cache;
  int32_t rows;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_tokens;
};

cudaError_t LaunchRopeKv(const RopeKvParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ROPE_KV_H_
