// The tensor-core decode attention kernel (attention_mma.cu), behind LaunchAttention
// (attention.h) which picks it; internal to kernels/.
#ifndef LLM_KERNELS_ATTENTION_ATTENTION_MMA_H_
#define LLM_KERNELS_ATTENTION_ATTENTION_MMA_H_

#include <cuda_runtime.h>

#include "kernels/attention/attention.h"

namespace llm::kernels {

// Grid (rows, num_kv_heads, splits), 4 warps per block. head_dim 64 or 128, at most
// decode_mma::kMaxGroup query heads per KV head; sm_80 or newer.
cudaError_t LaunchAttentionMma(const AttentionParams& params, dim3 grid, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_ATTENTION_MMA_H_
