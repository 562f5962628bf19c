// SiLU-and-multiply: out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], in fp32 from bf16.
// Reference: runner::SiluMul. With `fp8` on (an FP8 down product next; fp8_out.h), the fp32
// results go to fp8.x as E4M3 rows with their scales, not to `out` (inter a multiple of 4 and
// gate_up 8-byte aligned; cudaErrorInvalidValue otherwise). Without it, inter % 8 == 0 and
// 16-byte aligned buffers take eight outputs a thread; any other shape one.
#ifndef LLM_KERNELS_ELEMENTWISE_ACTIVATION_H_
#define LLM_KERNELS_ELEMENTWISE_ACTIVATION_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/elementwise/fp8_out.h"

namespace llm::kernels {

struct SiluMulParams {
  const __nv_bfloat16* gate_up;  // [rows, 2 * inter]
  __nv_bfloat16* out;            // [rows, inter]
  int32_t rows;
  int32_t inter;
  Fp8Out fp8{};
};

cudaError_t LaunchSiluMul(const SiluMulParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_ACTIVATION_H_
