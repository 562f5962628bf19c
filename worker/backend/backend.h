// What a worker serves, assembled from its configuration: the model (a Hugging Face checkpoint
// directory or random:<shape>[:<seed>]), its tokenizer, and the engine runner of the chosen
// backend (the CPU reference, or CUDA when built with it and a device is present). The one
// place that knows every backend; llm-worker, llm-cli and llm-bench build through it.
#ifndef LLM_WORKER_BACKEND_BACKEND_H_
#define LLM_WORKER_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "worker/engine/engine_sizes.h"
#include "worker/engine/speculation.h"
#include "worker/frontend/tokenizer.h"
#include "worker/model/config.h"
#include "worker/model/kv_cache_spec.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/synthetic.h"
#include "worker/runner/cuda_switches.h"
#include "worker/runner/model_runner.h"

namespace llm::backend {

struct BackendOptions {
  std::string model;      // checkpoint directory or random:<shape>[:<seed>]
  std::string tokenizer;  // tokenizer.json or its directory; empty: the model's (synthetic for
                          // random models)
  std::string backend = "auto";  // auto (cuda when built and a device is present), cpu, cuda
  // engine.quantization: none (the checkpoint's own format, FP8 ones included) or fp8 (a
  // 16/32-bit checkpoint's linear weights quantised at load; model/quant_scheme.h).
  std::string quantization = "none";
  // engine.kv_cache_dtype: auto (the checkpoint's), bf16 or fp8 (model/kv_cache_spec.h).
  std::string kv_cache_dtype = "auto";
  // kv_blocks 0: from kv_cache_mb (cpu) or kv_memory_fraction (cuda).
  engine::EngineSizes sizes;
  int32_t kv_cache_mb = 256;
  double kv_memory_fraction = 0.9;
  int32_t max_prefill_tokens = 0;        // 0: the backend's default (RunnerInfo)
  int32_t max_prefill_tokens_alone = 0;  // with nothing decoding; 0: the backend's default
  int32_t max_context = 0;               // 0: the model's; more than the model's is an error
  // engine.speculative: the proposer (ngram or draft, on both backends); the
  // scheduler takes the same.
  engine::SpeculativeConfig speculative;
  // CPU backend.
  int cpu_threads = 0;  // 0: all cores
  double extra_step_seconds = 0.0;
  // CUDA backend.
  int device = 0;
  runner::CudaSwitches cuda;  // engine.cuda_* and engine.batch_invariant
};

struct Backend {
  model::ModelSource source;
  model::ModelConfig config;
  // How the linear layers run: the checkpoint's format, or engine.quantization's.
  model::QuantScheme quant;
  model::KvCacheSpec kv;  // the KV cache's dtype and scales, as the runner keeps it
  std::unique_ptr<frontend::Tokenizer> tokenizer;
  std::string backend;  // "cpu" or "cuda"
  // The CPU backend's threads; must outlive the runner (declared first, destroyed last).
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<runner::ModelRunner> runner;
};

// True when this build has the CUDA backend.
bool CudaBuilt();

// Loads the model and tokenizer and starts the runner. Errors name the option ("engine.backend",
// "model", ...) or the file.
absl::StatusOr<Backend> CreateBackend(const BackendOptions& options);

}  // namespace llm::backend

#endif  // LLM_WORKER_BACKEND_BACKEND_H_
