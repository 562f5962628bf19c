// RMSNorm of the fp32 residual stream, with the residual add fused in front:
//   x[r] += delta[r] (when delta is given), then out[r] = bf16(x[r] / rms(x[r]) * weight).
// With `rows_index`, row r of `out` is computed from row rows_index[r] of x (the final norm of
// only the rows that need logits). Reference: runner::RmsNorm (fp32 throughout).
#ifndef LLM_KERNELS_ELEMENTWISE_RMSNORM_H_
#define LLM_KERNELS_ELEMENTWISE_RMSNORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct RmsNormParams {
  float* x;                     // [x_rows, dim] residual stream; updated when delta is set
  const float* delta;           // [x_rows, dim] or null
  const __nv_bfloat16* weight;  // [dim]
  __nv_bfloat16* out;           // [rows, dim]
  const int32_t* rows_index;    // [rows] or null (identity)
  int32_t rows;
  int32_t dim;
  float eps;
};

cudaError_t LaunchRmsNorm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_RMSNORM_H_
