// Fills a tensor on the device with the synthetic weights of common/random_weights.h:
// element i = model::SyntheticValue(stream, i, bound, constant), rounded to bf16 and stored as
// bf16 or fp32: the numbers a bf16 make-model checkpoint of the same seed holds, which is what
// a random:<shape> model on the CPU backend uses too.
#ifndef LLM_KERNELS_WEIGHTS_RANDOM_INIT_H_
#define LLM_KERNELS_WEIGHTS_RANDOM_INIT_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct RandomInitParams {
  __nv_bfloat16* out;  // or null, with out_f32 set
  float* out_f32;
  int64_t count;
  uint64_t stream;  // model::TensorStream(seed, tensor name)
  float bound;      // 0: fill with `constant`
  float constant;
};

cudaError_t LaunchRandomInit(const RandomInitParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_WEIGHTS_RANDOM_INIT_H_
