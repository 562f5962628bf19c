// Embedding gather: out[t, :] = table[ids[t], :] in bf16.
#ifndef LLM_KERNELS_EMBEDDING_H_
#define LLM_KERNELS_EMBEDDING_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct EmbeddingParams {
  const int32_t* ids;          // [num_tokens], device
  const __nv_bfloat16* table;  // [vocab, hidden], device
  __nv_bfloat16* out;          // [num_tokens, hidden], device
  int32_t num_tokens;
  int32_t hidden;
  int32_t vocab;  // ids outside [0, vocab) produce zeros
};

cudaError_t LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_EMBEDDING_H_
