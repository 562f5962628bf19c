// Embedding gather into the fp32 residual stream: out[r, :] = float(table[ids[r], :]).
#ifndef LLM_KERNELS_EMBEDDING_H_
#define LLM_KERNELS_EMBEDDING_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct EmbeddingParams {
  const int32_t* ids;          // [rows], device; ids outside [0, vocab) give zeros
  const __nv_bfloat16* table;  // [vocab, hidden], device
  float* out;                  // [rows, hidden], device
  int32_t rows;
  int32_t hidden;
  int32_t vocab;
};

cudaError_t LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_EMBEDDING_H_
