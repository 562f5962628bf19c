#include "kernels/embedding.h"

namespace llm::kernels {
namespace {

// One block per token; threads stride over the hidden dimension in 16-byte vectors when the
// row allows it.
__global__ void EmbeddingKernel(EmbeddingParams p) {
  const int32_t t = blockIdx.x;
  const int32_t id = p.ids[t];
  __nv_bfloat16* out = p.out + static_cast<int64_t>(t) * p.hidden;
  if (id < 0 || id >= p.vocab) {
    for (int32_t i = threadIdx.x; i < p.hidden; i += blockDim.x) out[i] = __float2bfloat16(0.f);
    return;
  }
  const __nv_bfloat16* row = p.table + static_cast<int64_t>(id) * p.hidden;
  if (p.hidden % 8 == 0) {
    const int4* src = reinterpret_cast<const int4*>(row);
    int4* dst = reinterpret_cast<int4*>(out);
    for (int32_t i = threadIdx.x; i < p.hidden / 8; i += blockDim.x) dst[i] = src[i];
  } else {
    for (int32_t i = threadIdx.x; i < p.hidden; i += blockDim.x) out[i] = row[i];
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  EmbeddingKernel<<<p.num_tokens, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llm::kernels
