// FP8 weights made on the device from bf16 ones (engine.quantization: fp8, and random:<shape>
// models quantised at load): each row of w [out, in] quantised with its own scale, amax / 448
// (at least 1 / (448 * 512)), with common/fp8.h's encoder, so the bytes and scales are those of
// model::QuantizeFp8(..., WeightScaling::kChannel) on the same values, bit for bit.
#ifndef LLM_KERNELS_WEIGHTS_QUANTIZE_WEIGHTS_H_
#define LLM_KERNELS_WEIGHTS_QUANTIZE_WEIGHTS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct QuantizeWeightRowsParams {
  const __nv_bfloat16* w;  // [out, in]
  int64_t out;
  int32_t in;
  uint8_t* e4m3;  // [out, in]
  float* scale;   // [out]
};

cudaError_t LaunchQuantizeWeightRows(const QuantizeWeightRowsParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_WEIGHTS_QUANTIZE_WEIGHTS_H_
