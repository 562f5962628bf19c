// RMSNorm of the fp32 residual stream, with the residual add fused in front:
//   x[r] += delta[r] (when delta is given), then out[r] = bf16(x[r] / rms(x[r]) * weight).
// With `rows_index`, row r of `out` is computed from row rows_index[r] of x (the final norm of
// only the rows that need logits). Reference: runner::RmsNorm (fp32 throughout).
//
// With `fp8` on (an FP8 product comes next; fp8_out.h), out is not written: the normed fp32
// rows go to fp8.x in E4M3 with their scales instead (per row, per 128 inputs or static). It
// needs the one-block-per-row kernel: dim a multiple of 4 up to 8,192, 16-byte aligned rows.
#ifndef LLM_KERNELS_ELEMENTWISE_RMSNORM_H_
#define LLM_KERNELS_ELEMENTWISE_RMSNORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/elementwise/fp8_out.h"

namespace llm::kernels {

// The widest row RMSNorm writes as FP8 (its one-block-per-row kernel: 8 float4 a thread).
inline constexpr int32_t kFp8MaxNormDim = 8192;

struct RmsNormParams {
  float* x;                     // [x_rows, dim] residual stream; updated when delta is set
  const float* delta;           // [x_rows, dim] or null
  const __nv_bfloat16* weight;  // [dim]
  __nv_bfloat16* out;           // [rows, dim]
  const int32_t* rows_index;    // [rows] or null (identity)
  int32_t rows;
  int32_t dim;
  float eps;
  Fp8Out fp8{};  // on: write E4M3 rows instead of `out`
};

cudaError_t LaunchRmsNorm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_RMSNORM_H_
