// The checkpoints of families that differ from Llama only in how their weights are stored, mapped
// onto the Llama layout (llama_tensors.h) that the runners, the FP8 quantiser and the writers
// read. Every store a model is served from passes through ToLlamaLayout once, after it is opened.
#ifndef LLM_WORKER_MODEL_CHECKPOINT_LAYOUT_H_
#define LLM_WORKER_MODEL_CHECKPOINT_LAYOUT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/llama_tensors.h"
#include "worker/model/safetensors.h"

namespace llm::model {

// The store of a `config` checkpoint in the Llama layout:
//  - phi3: each layer's self_attn.qkv_proj ([q; k; v] rows) and mlp.gate_up_proj ([gate; up]
//    rows) become q/k/v_proj and gate/up_proj: views of the fused matrices' rows, no copy. With a
//    partial rotary_dim (Phi-4-mini), q and k are copies with each head's rows reordered: the
//    dimensions RoPE turns onto the pairs the runners' tables turn, the others onto pairs of
//    frequency 0, divided by the attention factor the tables multiply every pair by.
//  - granite: GraniteMultipliers folded into the weights, so that the Llama forward over them
//    computes Granite's. With m the embedding multiplier, the residual stream is kept divided by
//    m (config.rms_norm_eps is already divided by m^2): o_proj and down_proj (and their biases)
//    are scaled by residual / m, q_proj (and its bias) by attention * sqrt(head_dim) (the
//    runners scale scores by 1/sqrt(head_dim)), and the final norm by 1 / logits_scaling. The
//    scaled tensors are copies in their own dtype (one rounding); the embedding, tied or not, is
//    untouched.
//  - the other families: `store` as it is.
// INVALID_ARGUMENT naming the tensor when a fused matrix has the wrong shape or a tensor to change
// is quantised (FP8 checkpoints of these families are not served; `engine.quantization: fp8`
// quantises the mapped weights instead).
// Every tensor a checkpoint of `config` stores, in its family's own layout: LlamaTensorSpecs,
// with phi3's fused matrices in place of the ones they hold.
std::vector<TensorSpec> CheckpointTensorSpecs(const ModelConfig& config);

absl::StatusOr<std::unique_ptr<TensorStore>> ToLlamaLayout(const ModelConfig& config,
                                                           std::unique_ptr<TensorStore> store);

}  // namespace llm::model

#endif  // LLM_WORKER_MODEL_CHECKPOINT_LAYOUT_H_
