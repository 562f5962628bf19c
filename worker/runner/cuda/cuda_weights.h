// Llama weights on the device, in one allocation: the embedding, the norms and the output head
// in bf16; each layer's four products (q/k/v and gate/up stacked into one matrix each, o, down)
// as typed weights (kernels/gemm/weight.h): bf16, or FP8 E4M3 with row or 128x128 block scales,
// as the model's QuantScheme says. From a checkpoint (16/32-bit tensors converted on the host,
// FP8 ones copied as they are, through pinned staging), quantised at load on the device
// (engine.quantization: fp8, per output row), or generated on the device from a seed
// (random:<shape>, quantised the same way when asked).
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_WEIGHTS_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_WEIGHTS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm/weight.h"
#include "worker/model/config.h"
#include "worker/model/linear_weights.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda/cuda_util.h"

namespace llm::runner::cuda {

using bf16 = __nv_bfloat16;

// One product of a layer: its weight [out, in] and what goes with it.
struct CudaProduct {
  kernels::Weight w;
  // [out]: bf16 for the products with bf16 outputs (q/k/v, gate/up); fp32 for o and down, whose
  // output is added to the fp32 residual stream. Null without a bias.
  const void* bias = nullptr;
  // An FP8 o or down product with a bias: the same bias in bf16 (cuBLASLt's FP8 products take
  // no other).
  const bf16* bias_bf16 = nullptr;
  // An FP8 product with static activations: its input scale, one device float (the largest of
  // its stacked modules', which share the input).
  const float* input_scale = nullptr;
};

struct CudaLayerWeights {
  const bf16* input_norm = nullptr;  // [hidden]
  CudaProduct qkv;                   // [q_dim + 2 * kv_dim, hidden]
  const bf16* q_norm = nullptr;      // [head_dim], qk_norm models only (qwen3)
  const bf16* k_norm = nullptr;      // [head_dim]
  CudaProduct o;                     // [hidden, q_dim]
  const bf16* post_norm = nullptr;   // [hidden]
  CudaProduct gate_up;               // [2 * intermediate, hidden]
  CudaProduct down;                  // [hidden, intermediate]
};

struct CudaWeights {
  DeviceMemory memory;
  const bf16* embedding = nullptr;  // [vocab, hidden]
  const bf16* head = nullptr;       // [vocab, hidden]; the embedding when tied
  const bf16* final_norm = nullptr;
  std::vector<CudaLayerWeights> layers;
  // The layers' products are FP8, and how their inputs are quantised when cuBLASLt runs them:
  // per row (per token, or with the static scale) or per 128 inputs.
  bool fp8 = false;
  kernels::ActivationScales input_scales = kernels::ActivationScales::kRow;

  size_t bytes() const { return memory.bytes(); }
};

// The products' kernels::WeightScales and input scales for `quant` (FP8 or not), and whether
// the CUDA runner serves it: block scales need every stacked module's rows to be a multiple of
// 128 but the last (cuBLASLt's blocks), which `config` is checked for. UNIMPLEMENTED naming the
// module otherwise.
absl::Status CheckCudaQuantization(const model::ModelConfig& config,
                                   const model::QuantScheme& quant);

// The scales of an FP8 checkpoint's stacked modules (q, k, v or gate, up; each one's
// LinearWeight) in the device layout of `scales` (kernels/gemm/weight.h): per-tensor and
// per-channel scales as one per row, 128x128 blocks each module's block rows in turn (the modules
// but the last hold whole blocks: CheckCudaQuantization), each block row padded to a multiple of
// 4 with zeros. `out` is the modules' rows together, `in` their inputs.
std::vector<float> DeviceScaleArray(const std::vector<model::LinearWeight>& shards,
                                    kernels::WeightScales scales, int64_t out, int32_t in);

// Copies every tensor of LlamaTensorSpecs(config) from `store` to the current device, the
// linear layers as `quant` says (checked as the CPU loader checks them: errors name the file and
// the tensor).
absl::StatusOr<CudaWeights> UploadCudaWeights(const model::ModelConfig& config,
                                              const model::TensorStore& store,
                                              const model::QuantScheme& quant, cudaStream_t stream);

// The synthetic weights of `config` and `seed` (model/synthetic.h), generated on the device;
// with `quant` from engine.quantization: fp8, each product quantised per row after it.
absl::StatusOr<CudaWeights> RandomCudaWeights(const model::ModelConfig& config, uint64_t seed,
                                              const model::QuantScheme& quant, cudaStream_t stream);

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_WEIGHTS_H_
