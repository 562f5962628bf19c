// Device helpers of the kernels that write FP8 rows (fp8_out.h): the scale of a group from its
// amax, and the E4M3 of four values packed in a word.
#ifndef LLM_KERNELS_ELEMENTWISE_FP8_ROWS_CUH_
#define LLM_KERNELS_ELEMENTWISE_FP8_ROWS_CUH_

#include <cuda_fp8.h>

#include <cstdint>

#include "common/fp8.h"
#include "kernels/common.cuh"
#include "kernels/elementwise/fp8_out.h"

namespace llm::kernels {

// E4M3 of v / scale: round to nearest even, saturating (cvt.rn.satfinite on sm_89 and newer,
// the same rounding emulated by cuda_fp8.h elsewhere; Fp8ConvertKernelTest checks it against
// common/fp8.h's encoder).
__device__ __forceinline__ uint8_t ToE4M3(float v, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v / scale, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ uint32_t PackE4M3(float a, float b, float c, float d, float scale) {
  return uint32_t{ToE4M3(a, scale)} | uint32_t{ToE4M3(b, scale)} << 8 |
         uint32_t{ToE4M3(c, scale)} << 16 | uint32_t{ToE4M3(d, scale)} << 24;
}

__device__ __forceinline__ float Max4Abs(float a, float b, float c, float d) {
  return fmaxf(fmaxf(fabsf(a), fabsf(b)), fmaxf(fabsf(c), fabsf(d)));
}

// Where row r's scale of group g goes (ActivationScales, weight.h).
__device__ __forceinline__ float* Fp8ScaleSlot(const Fp8Out& q, int32_t rows, int32_t r,
                                               int32_t g) {
  return q.scales == ActivationScales::kRow ? q.scale + r
                                            : q.scale + int64_t{g} * Fp8GemmRows(rows) + r;
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_FP8_ROWS_CUH_
