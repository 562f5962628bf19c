#include "kernels/common.cuh"
#include "kernels/embedding.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

// One block per row; 16-byte loads (8 bf16) when the row allows it.
__global__ void EmbeddingKernel(EmbeddingParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t r = blockIdx.x;
  const int32_t id = p.ids[r];
  float* out = p.out + static_cast<int64_t>(r) * p.hidden;
  if (id < 0 || id >= p.vocab) {
    for (int32_t i = threadIdx.x; i < p.hidden; i += blockDim.x) out[i] = 0.0f;
    return;
  }
  const __nv_bfloat16* row = p.table + static_cast<int64_t>(id) * p.hidden;
  if (p.hidden % 8 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(row);
    for (int32_t i = threadIdx.x; i < p.hidden / 8; i += blockDim.x) {
      const uint4 v = src[i];
      const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&v);
      for (int k = 0; k < 8; ++k) out[i * 8 + k] = ToFloat(h[k]);
    }
  } else {
    for (int32_t i = threadIdx.x; i < p.hidden; i += blockDim.x) out[i] = ToFloat(row[i]);
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  return Launch(EmbeddingKernel, p.rows, 128, 0, stream, p);
}

}  // namespace llm::kernels
