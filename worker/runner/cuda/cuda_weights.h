// Llama weights on the device in bf16 (fp32 for biases added to the fp32 residual stream), with
// q/k/v and gate/up stacked into one matrix each, in one allocation. From a checkpoint (any
// weight dtype, converted on the host and copied through pinned staging) or generated on the
// device from a seed (random:<shape>).
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_WEIGHTS_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_WEIGHTS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda/cuda_util.h"

namespace llm::runner::cuda {

using bf16 = __nv_bfloat16;

// Matrices are [out, in], row-major (the Hugging Face layout).
struct CudaLayerWeights {
  const bf16* input_norm = nullptr;    // [hidden]
  const bf16* qkv = nullptr;           // [q_dim + 2 * kv_dim, hidden]
  const bf16* qkv_bias = nullptr;      // [q_dim + 2 * kv_dim] or null
  const bf16* o = nullptr;             // [hidden, q_dim]
  const float* o_bias = nullptr;       // [hidden] or null
  const bf16* post_norm = nullptr;     // [hidden]
  const bf16* gate_up = nullptr;       // [2 * intermediate, hidden]
  const bf16* gate_up_bias = nullptr;  // [2 * intermediate] or null
  const bf16* down = nullptr;          // [hidden, intermediate]
  const float* down_bias = nullptr;    // [hidden] or null
};

struct CudaWeights {
  DeviceMemory memory;
  const bf16* embedding = nullptr;  // [vocab, hidden]
  const bf16* head = nullptr;       // [vocab, hidden]; the embedding when tied
  const bf16* final_norm = nullptr;
  std::vector<CudaLayerWeights> layers;

  size_t bytes() const { return memory.bytes(); }
};

// Copies every tensor of LlamaTensorSpecs(config) from `store` (checked as the CPU loader
// checks them: errors name the file and the tensor) to the current device.
absl::StatusOr<CudaWeights> UploadCudaWeights(const model::ModelConfig& config,
                                              const model::TensorStore& store, cudaStream_t stream);

// The synthetic weights of `config` and `seed` (model/synthetic.h), generated on the device.
absl::StatusOr<CudaWeights> RandomCudaWeights(const model::ModelConfig& config, uint64_t seed,
                                              cudaStream_t stream);

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_WEIGHTS_H_
