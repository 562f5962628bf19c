#include "kernels/common.cuh"
#include "kernels/elementwise/head_rmsnorm.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// One warp per (row, head) of the rows' q and k heads, numbered row-major.
__global__ void __launch_bounds__(kThreads) HeadRmsNormKernel(HeadRmsNormParams p) {
  AfterPriorGrids();  // launch.cuh: the q/k/v product wrote the rows
  const int32_t heads = p.num_heads + p.num_kv_heads;
  const int64_t item = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (item >= int64_t{p.rows} * heads) return;
  const int32_t r = static_cast<int32_t>(item / heads), h = static_cast<int32_t>(item % heads);
  const int lane = threadIdx.x % 32;
  __nv_bfloat16* head = p.qkv + int64_t{r} * p.row_stride + int64_t{h} * p.head_dim;
  const __nv_bfloat16* w = h < p.num_heads ? p.q_weight : p.k_weight;
  float sum_sq = 0.0f;
  for (int32_t d = lane; d < p.head_dim; d += 32) {
    const float v = __bfloat162float(head[d]);
    sum_sq += v * v;
  }
  sum_sq = GroupSum(sum_sq, 32);
  const float inv = rsqrtf(sum_sq / static_cast<float>(p.head_dim) + p.eps);
  for (int32_t d = lane; d < p.head_dim; d += 32) {
    const float v = __bfloat162float(head[d]);
    head[d] = __float2bfloat16(__bfloat162float(w[d]) * (v * inv));
  }
}

}  // namespace

cudaError_t LaunchHeadRmsNorm(const HeadRmsNormParams& p, cudaStream_t stream) {
  if (p.head_dim <= 0 || p.num_heads < 0 || p.num_kv_heads < 0 ||
      p.row_stride < (p.num_heads + 2 * p.num_kv_heads) * p.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (p.rows <= 0 || p.num_heads + p.num_kv_heads == 0) return cudaSuccess;
  const int64_t items = int64_t{p.rows} * (p.num_heads + p.num_kv_heads);
  const auto blocks = static_cast<unsigned>((items + kWarps - 1) / kWarps);
  return Launch(HeadRmsNormKernel, dim3(blocks), kThreads, 0, stream, p);
}

}  // namespace llm::kernels
