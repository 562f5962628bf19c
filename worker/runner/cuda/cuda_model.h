// The Llama forward pass on the device, the CUDA counterpart of CpuModel: the weights, the
// matrix products' plans, and the kernels one step enqueues, layer by layer, over the runner's
// buffers and KV cache. Enqueueing allocates and synchronises nothing, so a decode step's
// forward pass can be captured in a CUDA graph.
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_MODEL_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/gemm/gemm.h"
#include "worker/model/config.h"
#include "worker/model/quant_scheme.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda/cuda_weights.h"
#include "worker/runner/cuda/kernel_clock.h"
#include "worker/runner/cuda/step_buffers.h"
#include "worker/runner/cuda_switches.h"

namespace llm::runner::cuda {

// What one step computes. Batch rows are the prefill rows (padded), then the decode rows (the
// bucket); sampling rows are the prompts' last rows and the decode rows.
struct ForwardShape {
  int32_t rows = 0;                // padded prefill rows + decode rows
  int32_t prefill_rows = 0;        // including padding
  int32_t decode_rows = 0;         // the bucket
  int32_t sample_rows = 0;         // padded
  bool identity_sampling = false;  // decode only: every row samples, in row order
  bool argmax_only = false;        // every sampling row is kernels::ArgmaxOnly (SampleParams)
  // Device pointers into the upload area (mixed steps).
  const int32_t* prefill_slot = nullptr;
  const int32_t* prefill_pos = nullptr;
  const int32_t* prefill_token = nullptr;
  const int32_t* sample_rows_index = nullptr;
  // The prompt chunks and the prefill attention's tiles (kernels/attention/prefill_attention.h).
  const kernels::PrefillChunk* prefill_chunks = nullptr;
  const kernels::PrefillTile* prefill_tiles = nullptr;
  int32_t num_prefill_tiles = 0;
  // The last layer's tiles: those holding the rows that are sampled (StepLayout).
  const kernels::PrefillTile* last_token_tiles = nullptr;
  int32_t num_last_token_tiles = 0;
};

struct CudaModelOptions {
  // The paths kept to compare (runner/cuda_switches.h); `switches.pdl` is settled (the runner
  // resolves auto with ProgrammaticLaunchPays).
  CudaSwitches switches;
  int32_t valid_vocab_size = 0;  // ids >= this are never sampled
};

// Programmatic dependent launch's default (engine.cuda_pdl: auto): on where a layer's weights
// are under kPdlLayerBytes, so a step is many short kernels whose boundaries it overlaps. On an
// H100 and an H200 it took 8-10% off qwen2-0.5b's batch-1 step (30 MB a layer) and added 1-5%
// to llama-3.2-1b's (122 MB) and about 1% to llama-3-8b's (436 MB): docs/cuda-measurements.md.
inline constexpr int64_t kPdlLayerBytes = int64_t{64} << 20;
int64_t LayerWeightBytes(const model::ModelConfig& config);  // bf16 products and norms
bool ProgrammaticLaunchPays(const model::ModelConfig& config);

class CudaModel {
 public:
  // On the current device: weights from `store`, or synthetic ones from `seed` when `store` is
  // null, copied or generated on `stream`.
  static absl::StatusOr<std::unique_ptr<CudaModel>> Load(const model::ModelConfig& config,
                                                         const model::TensorStore* store,
                                                         const model::QuantScheme& quant,
                                                         uint64_t seed,
                                                         const CudaModelOptions& options,
                                                         cudaStream_t stream);

  // Plans the matrix products for steps of each of `rows` batch rows and `sample_rows`
  // sampling rows, so no plan is made while a graph is captured.
  absl::Status PrepareProducts(const StepSizes& sizes, const StepBuffers& b,
                               std::span<const int32_t> rows, std::span<const int32_t> sample_rows);

  // Enqueues one step on `stream`: step inputs from the slot table and the upload with the
  // embedding (one launch), every layer (norm, qkv with RoPE and the K/V write, attention, o,
  // norm, gate/up with SiLU, down — at a few rows RoPE/KV, SiLU and the residual adds are the
  // GEMV's epilogues and at one or two the norms its prologues, else launches of their own),
  // then for the sampling rows the final norm, the head and the sampler. In a step with prompt
  // rows, the last layer goes past the K/V write only for the sampling rows (as CpuModel does).
  // With a `clock` (an eager step only, never under graph capture), marks the end of every
  // kernel with its class.
  absl::Status Forward(const ForwardShape& shape, const StepSizes& sizes, const StepBuffers& b,
                       const KvCache& kv, cudaStream_t stream, KernelClock* clock = nullptr);
  // Marks Forward makes per layer, and besides the layers, at most.
  static constexpr int kMarksPerLayer = 12;
  static constexpr int kMarksOutsideLayers = 16;

  const model::ModelConfig& config() const { return config_; }
  const CudaWeights& weights() const { return weights_; }
  const kernels::Gemm& gemm() const { return gemm_; }

 private:
  CudaModel(const model::ModelConfig& config, const CudaModelOptions& options)
      : config_(config), options_(options) {}

  model::ModelConfig config_;
  CudaModelOptions options_;
  kernels::Gemm gemm_;
  CudaWeights weights_;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_MODEL_H_
