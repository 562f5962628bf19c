// Llama weights in fp32 for the CPU runner: converted from the checkpoint's dtype (or
// dequantised from its FP8 weights) at load, each product packed for MatMulPacked with what it
// does to its input (cpu_linear.h).
#ifndef LLM_WORKER_RUNNER_CPU_WEIGHTS_H_
#define LLM_WORKER_RUNNER_CPU_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_linear.h"

namespace llm::runner {

// Products (their logical shapes, [out, in], in the comments) carry their biases.
struct CpuLayerWeights {
  std::vector<float> input_norm;  // [hidden]
  CpuLinear qkv;                  // [q_dim + 2 * kv_dim, hidden]: q, k, v stacked
  std::vector<float> q_norm;      // [head_dim], qk_norm models only (qwen3)
  std::vector<float> k_norm;      // [head_dim]
  CpuLinear o;                    // [hidden, q_dim]
  std::vector<float> post_norm;   // [hidden]
  CpuLinear gate_up;              // [2 * intermediate, hidden]: gate, up stacked
  CpuLinear down;                 // [hidden, intermediate]
};

struct CpuWeights {
  std::vector<float> embedding;   // [vocab, hidden], row-major (gathered by token id)
  CpuLinear head;                 // [vocab, hidden]: lm_head, or the embedding when tied; 16 bits
  std::vector<float> final_norm;  // [hidden]
  std::vector<CpuLayerWeights> layers;
};

// Loads and checks every tensor named by LlamaTensorSpecs(config) from `store`, the linear
// layers in `scheme`'s format.
absl::StatusOr<CpuWeights> LoadCpuWeights(const model::ModelConfig& config,
                                          const model::TensorStore& store,
                                          const model::QuantScheme& scheme);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_WEIGHTS_H_
