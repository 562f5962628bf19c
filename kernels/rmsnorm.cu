#include "kernels/common.cuh"
#include "kernels/rmsnorm.h"

namespace llm::kernels {
namespace {

// One block per output row.
__global__ void RmsNormKernel(RmsNormParams p) {
  __shared__ float scratch[32];
  const int32_t r = blockIdx.x;
  const int32_t src = p.rows_index != nullptr ? p.rows_index[r] : r;
  if (src < 0) return;
  float* x = p.x + static_cast<int64_t>(src) * p.dim;
  const float* d = p.delta != nullptr ? p.delta + static_cast<int64_t>(src) * p.dim : nullptr;
  float sum_sq = 0.0f;
  for (int32_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    float v = x[i];
    if (d != nullptr) {
      v += d[i];
      x[i] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  const float total = BlockSum(sum_sq, scratch);
  const float inv = rsqrtf(total / p.dim + p.eps);
  __nv_bfloat16* out = p.out + static_cast<int64_t>(r) * p.dim;
  for (int32_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    out[i] = ToBf16(ToFloat(p.weight[i]) * (x[i] * inv));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  const int threads = p.dim >= 1024 ? 1024 : (p.dim >= 256 ? 256 : 128);
  RmsNormKernel<<<p.rows, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llm::kernels
