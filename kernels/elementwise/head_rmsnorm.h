// RMSNorm over each q and k head inside the q/k/v product's bf16 rows, in place (Qwen3's q_norm
// and k_norm, before RoPE): for every row r and each of its first num_heads + num_kv_heads heads
// h, with v = the head's head_dim values in fp32,
//   head = bf16(v / sqrt(mean(v^2) + eps) * w),  w = q_weight (h < num_heads) else k_weight.
// Reference: runner::RmsNorm over each head (fp32). One warp a head; the sum of squares is in
// fp32, lane order.
#ifndef LLM_KERNELS_ELEMENTWISE_HEAD_RMSNORM_H_
#define LLM_KERNELS_ELEMENTWISE_HEAD_RMSNORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct HeadRmsNormParams {
  __nv_bfloat16* qkv;             // [rows, row_stride]: q heads, then k heads, then v heads
  const __nv_bfloat16* q_weight;  // [head_dim]
  const __nv_bfloat16* k_weight;  // [head_dim]
  int32_t rows;
  int32_t row_stride;  // elements, at least (num_heads + 2 * num_kv_heads) * head_dim
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  float eps;
};

// cudaErrorInvalidValue for a row_stride too small for the heads or a head_dim that is not
// positive.
cudaError_t LaunchHeadRmsNorm(const HeadRmsNormParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_HEAD_RMSNORM_H_
