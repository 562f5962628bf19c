// The Llama forward pass in fp32 on the CPU: the reference implementation of the model.
#ifndef LLM_WORKER_RUNNER_CPU_MODEL_H_
#define LLM_WORKER_RUNNER_CPU_MODEL_H_

#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/model/quant_scheme.h"
#include "worker/runner/cpu_weights.h"
#include "worker/runner/forward_batch.h"
#include "worker/runner/kv_cache.h"

namespace llm {
class ThreadPool;
}

namespace llm::runner {

// Not thread-safe: one thread runs Forward at a time (it keeps scratch buffers). The thread
// pool, when given, parallelises inside one call.
class CpuModel {
 public:
  CpuModel(model::ModelConfig config, CpuWeights weights, ThreadPool* pool,
           model::KvCacheSpec kv = model::KvCacheSpec());

  // Loads config.json, generation_config.json, the quantisation scheme (quant_scheme.h) and the
  // safetensors weights of the checkpoint in `dir`, its KV cache in the checkpoint's dtype
  // (engine.kv_cache_dtype: auto). Errors name the file and the tensor.
  static absl::StatusOr<std::unique_ptr<CpuModel>> Load(const std::string& dir, ThreadPool* pool);
  // The model of `config` with the weights in `store` (checked against the config), its linear
  // layers in `scheme`'s format (LoadQuantScheme; ApplyQuantizationOption), the K and V it
  // writes rounded as `kv`'s dtype stores them (FP8: through E4M3 with the layer's scales; the
  // cache keeps them in fp32).
  static absl::StatusOr<std::unique_ptr<CpuModel>> FromStore(
      model::ModelConfig config, const model::TensorStore& store, ThreadPool* pool,
      const model::QuantScheme& scheme = model::QuantScheme(),
      model::KvCacheSpec kv = model::KvCacheSpec());

  const model::ModelConfig& config() const { return config_; }
  const model::KvCacheSpec& kv_cache() const { return kv_; }
  // The pool Forward parallelises on (may be null); runners reuse it for sampling.
  ThreadPool* pool() const { return pool_; }

  // Runs `batch`, writing every token's K and V into `kv` at its position, and writes the
  // logits of the last logit_tokens tokens of each chunk with need_logits to `logits` ([rows,
  // vocab], in token order; resized). The block tables must cover every position written or read.
  // Errors (never a crash) for ids outside the vocabulary, positions beyond the context or
  // block tables that are too short.
  absl::Status Forward(const ForwardBatch& batch, CpuKvCache& kv, std::vector<float>& logits);

 private:
  absl::Status Validate(const ForwardBatch& batch, const CpuKvCache& kv) const;
  // Forward's steps: the scratch sized, positions and chunks, embeddings into x_, the tokens
  // whose logits are wanted; layer l's q/k norms, RoPE and K/V into `kv` (through E4M3 for an
  // FP8 cache); and the layer after its attention for the first `rows` rows (o, residual, norm,
  // MLP, residual).
  void PrepareBatch(const ForwardBatch& batch);
  void RopeAndWriteKv(const ForwardBatch& batch, int l, CpuKvCache& kv);
  void FinishLayer(int l, size_t rows);
  // The attention of `tokens` (indices into the batch, ascending), row j of attn_ for tokens[j].
  void Attention(const ForwardBatch& batch, int layer, CpuKvCache& kv,
                 std::span<const int32_t> tokens);

  model::ModelConfig config_;
  CpuWeights weights_;
  ThreadPool* pool_;
  model::KvCacheSpec kv_;
  std::vector<double> inv_freq_;  // [head_dim / 2]
  double rope_scale_;             // RoPE's cos and sin are multiplied by it (YaRN)

  // Scratch, sized per call.
  std::vector<float> x_, xn_, qkv_, attn_, gate_up_, act_, tmp_;
  std::vector<float> quantized_;     // an FP8 product's input after its round trip (RunLinear)
  std::vector<int32_t> positions_;   // [num_tokens]
  std::vector<int32_t> chunk_of_;    // [num_tokens] index of the token's chunk
  std::vector<int32_t> all_tokens_;  // 0 .. num_tokens - 1
  std::vector<int32_t> out_tokens_;  // the tokens whose logits are wanted
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_MODEL_H_
