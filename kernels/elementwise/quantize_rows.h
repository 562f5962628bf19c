// bf16 rows to FP8 rows (fp8_out.h): an FP8 product's input that no kernel of ours makes on the
// way (the attention's output, before the o product, and the gathered rows of the last layer),
// quantised per row or per 128 inputs in one pass over the rows. Reference:
// model::Fp8RoundTripActivations. SiLU-and-multiply writes FP8 rows through the same kernel
// (activation.h).
#ifndef LLM_KERNELS_ELEMENTWISE_QUANTIZE_ROWS_H_
#define LLM_KERNELS_ELEMENTWISE_QUANTIZE_ROWS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/elementwise/fp8_out.h"

namespace llm::kernels {

struct QuantizeRowsParams {
  const __nv_bfloat16* x;  // [rows, dim]
  int32_t rows;
  int32_t dim;  // a multiple of 4
  Fp8Out out;
};

cudaError_t LaunchQuantizeRows(const QuantizeRowsParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_QUANTIZE_ROWS_H_
