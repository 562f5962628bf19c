// Llama weights in fp32 for the CPU runner, converted from the checkpoint's dtype at load and
// packed for MatMulPacked.
#ifndef LLM_WORKER_RUNNER_CPU_WEIGHTS_H_
#define LLM_WORKER_RUNNER_CPU_WEIGHTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cpu_ops.h"

namespace llm::runner {

// Matrices are packed (their logical shapes, [out, in], in the comments).
struct CpuLayerWeights {
  std::vector<float> input_norm;    // [hidden]
  PackedWeights qkv;                // [q_dim + 2 * kv_dim, hidden]: q, k, v stacked
  std::vector<float> qkv_bias;      // [q_dim + 2 * kv_dim] or empty
  PackedWeights o;                  // [hidden, q_dim]
  std::vector<float> o_bias;        // [hidden] or empty
  std::vector<float> post_norm;     // [hidden]
  PackedWeights gate_up;            // [2 * intermediate, hidden]: gate, up stacked
  std::vector<float> gate_up_bias;  // [2 * intermediate] or empty
  PackedWeights down;               // [hidden, intermediate]
  std::vector<float> down_bias;     // [hidden] or empty
};

struct CpuWeights {
  std::vector<float> embedding;   // [vocab, hidden], row-major (gathered by token id)
  PackedWeights head;             // [vocab, hidden]: lm_head, or the embedding when tied
  std::vector<float> final_norm;  // [hidden]
  std::vector<CpuLayerWeights> layers;
};

// Loads and checks every tensor named by LlamaTensorSpecs(config) from `store`.
absl::StatusOr<CpuWeights> LoadCpuWeights(const model::ModelConfig& config,
                                          const model::TensorStore& store);

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_WEIGHTS_H_
