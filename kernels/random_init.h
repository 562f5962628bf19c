// Fills a bf16 tensor on the device with the synthetic weights of worker/model/random_weights.h:
// element i = RandomUniform(stream, i, bound), or `constant` when bound is 0. The same numbers a
// make-model checkpoint of the same seed holds (before its bf16 rounding, which is the same).
#ifndef LLM_KERNELS_RANDOM_INIT_H_
#define LLM_KERNELS_RANDOM_INIT_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

struct RandomInitParams {
  __nv_bfloat16* out;
  int64_t count;
  uint64_t stream;  // model::TensorStream(seed, tensor name)
  float bound;      // 0: fill with `constant`
  float constant;
};

cudaError_t LaunchRandomInit(const RandomInitParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_RANDOM_INIT_H_
