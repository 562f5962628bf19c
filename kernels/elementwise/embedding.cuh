// The embedding gather of one row into the fp32 residual stream, by one block:
// out[:] = float(table[id, :]), zeros for an id outside [0, vocab). 16-byte loads (8 bf16) when
// the row allows it. Used by the step-inputs kernel (step_inputs.h), which gathers each row's
// embedding in the launch that picks its token.
#ifndef LLM_KERNELS_ELEMENTWISE_EMBEDDING_CUH_
#define LLM_KERNELS_ELEMENTWISE_EMBEDDING_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common.cuh"

namespace llm::kernels {

__device__ __forceinline__ void EmbedRow(const __nv_bfloat16* table, int32_t id, int32_t vocab,
                                         int32_t hidden, float* out) {
  if (id < 0 || id >= vocab) {
    for (int32_t i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = 0.0f;
    return;
  }
  const __nv_bfloat16* row = table + static_cast<int64_t>(id) * hidden;
  if (hidden % 8 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(row);
    for (int32_t i = threadIdx.x; i < hidden / 8; i += blockDim.x) {
      const uint4 v = src[i];
      const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&v);
      for (int k = 0; k < 8; ++k) out[i * 8 + k] = ToFloat(h[k]);
    }
  } else {
    for (int32_t i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = ToFloat(row[i]);
  }
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_EMBEDDING_CUH_
