// The Llama forward pass on the device, the CUDA counterpart of CpuModel: the weights, the
// matrix products' plans, and the kernels one step enqueues, layer by layer (an attention block
// and an MLP block each), over the runner's buffers and KV cache. The wiring names products;
// Gemm picks each one's kernel from its weight's type (bf16 or FP8) and row count, and a
// product's input is made in the form the product takes (bf16, or E4M3 rows for an FP8 product
// on cuBLASLt: the norm or SiLU kernel before it writes them, or a quantise pass over the
// attention's output). Enqueueing allocates and synchronises nothing, so a decode step's forward
// pass can be captured in a CUDA graph.
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_MODEL_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/elementwise/fp8_out.h"
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
  // Forward stops after the lm head; CudaModel::Sample enqueues the sampling later (a step with
  // constrained rows waits for its masks, worker/runner/slot_constraints.h).
  bool defer_sampling = false;
  // The constrained rows' masks (kernels::SampleParams::mask_index, masks); null: none.
  const int32_t* mask_index = nullptr;
  const uint64_t* masks = nullptr;
  int32_t mask_words = 0;
  // Speculative decoding (StepLayout::group): rows per decoding slot, and each decoding slot's
  // proposal allowance (upload area; group > 1 only). The step proposes before its inputs and
  // verifies after sampling.
  int32_t group = 1;
  const int32_t* decode_draft = nullptr;
  const int32_t* decode_limit = nullptr;  // each one's KV blocks * block_tokens
  // Speculation under masks (engine.cuda_speculate_constrained): once the proposals are made,
  // the step copies the slots' counts and proposals (DeviceSlots::num_proposals, [slots], then
  // proposals, [slots, max_proposals]) to this pinned host memory and records
  // `proposals_ready` after the copy (an external event node in a graph), so the host can mask
  // the verify rows along them while the forward pass runs. Null: no copy.
  std::byte* proposals_back = nullptr;
  cudaEvent_t proposals_ready = nullptr;
  // A draft model's pass (cuda_draft.h; kernels/speculative/draft_step.h): kNotDraft for the
  // target's, kernels::kDraftPromptPass for the prompt rows and kernels::kDraftCatchUp for a
  // step's decode rows that do not verify (no head, either), or a round, whose rows
  // come from LaunchDraftRows and whose head's argmax becomes the slots' next proposal
  // (LaunchDraftPick) instead of a sample.
  int32_t draft_round = kNotDraft;
  static constexpr int32_t kNotDraft = -2;
  // A target step without verify groups runs the draft's catch-up pass (StepLayout::
  // draft_catch_up); false: the draft lapses for the decoding slots.
  bool draft_catch_up = true;
};

struct CudaModelOptions {
  // The paths kept to compare (runner/cuda_switches.h); `switches.pdl` is settled (the runner
  // resolves auto with ProgrammaticLaunchPays).
  CudaSwitches switches;
  int32_t valid_vocab_size = 0;  // ids >= this are never sampled
  // The n-gram proposer's suffix lengths (engine.speculative.ngram_min/max).
  int32_t ngram_min = 2;
  int32_t ngram_max = 4;
  // The benchmark-only oracle proposer (kernels/speculative/oracle_propose.h) instead.
  bool oracle = false;
  // The proposals are made before Forward (the draft model's rounds, cuda_draft.h): no
  // proposer runs in it.
  bool proposals_made_before = false;
};

// Programmatic dependent launch's default (engine.cuda_pdl: auto): on where a layer's weights
// are under kPdlLayerBytes, so a step is many short kernels whose boundaries it overlaps. On an
// H100 and an H200 it took 8-10% off qwen2-0.5b's batch-1 step (30 MB a layer) and added 1-5%
// to llama-3.2-1b's (122 MB) and about 1% to llama-3-8b's (436 MB): docs/cuda-measurements.md.
inline constexpr int64_t kPdlLayerBytes = int64_t{64} << 20;
// A layer's weight bytes: its products (bf16, or one byte a weight when `fp8`) and norms.
int64_t LayerWeightBytes(const model::ModelConfig& config, bool fp8 = false);
bool ProgrammaticLaunchPays(const model::ModelConfig& config, bool fp8 = false);

class CudaModel {
 public:
  // On the current device: weights from `store`, or synthetic ones from `seed` when `store` is
  // null, copied or generated on `stream`; the linear layers as `quant` says (16-bit, or FP8:
  // cuda_weights.h).
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
  // The sampling of a step whose Forward had shape.defer_sampling, enqueued after it.
  absl::Status Sample(const ForwardShape& shape, const StepBuffers& b, cudaStream_t stream);
  // Marks Forward makes per layer, and besides the layers (with the runner's draft mark), at most.
  static constexpr int kMarksPerLayer = 12;
  static constexpr int kMarksOutsideLayers = 17;

  const model::ModelConfig& config() const { return config_; }
  const CudaWeights& weights() const { return weights_; }
  const kernels::Gemm& gemm() const { return gemm_; }

 private:
  CudaModel(const model::ModelConfig& config, const CudaModelOptions& options)
      : config_(config), options_(options) {}

  // One step's forward pass as it goes (cuda_model.cc).
  struct Pass;
  absl::Status StepInputs(Pass& p);
  // The step's rows and their embedding: the proposer and the step inputs, or a draft pass's
  // rows (DraftRows).
  absl::Status StepRows(Pass& p);
  absl::Status DraftRows(Pass& p);
  // A speculative step's proposals on the device: the n-gram or the oracle proposer.
  absl::Status Propose(Pass& p);
  // The proposals' copy to the host (ForwardShape::proposals_back) and its event.
  absl::Status CopyProposalsBack(Pass& p);
  // Norm, q/k/v with RoPE and the K/V write, attention, o with the residual add. In a step with
  // prompt rows, the last layer stops after the K/V write when nothing samples (`*done`).
  absl::Status AttentionBlock(Pass& p, int layer, bool* done);
  kernels::RopeKvParams RopeParams(const Pass& p, int layer) const;
  // The step's attention for `layer` (prompt tiles, decode rows); on the last layer of a step
  // with prompt rows, on the sampling rows' tiles, whose rows it then gathers to the front.
  absl::Status Attend(Pass& p, int layer, bool last_sampled_only);
  // Norm, gate/up with SiLU-and-multiply, down with the residual add.
  absl::Status MlpBlock(Pass& p, int layer);
  // The final norm, the head and the sampler, for the sampling rows.
  absl::Status Head(Pass& p);
  // The norm before `args`' product: inside it (the GEMV's prologue), into E4M3 rows (an FP8
  // product on cuBLASLt: args.xq), or into bf16 rows (b.xn) as before.
  absl::Status NormBefore(Pass& p, kernels::GemmArgs& args, const kernels::NormInput& norm,
                          const CudaProduct& product);
  // An FP8 product on cuBLASLt whose input is bf16 rows `x`: quantised into E4M3 rows first.
  absl::Status QuantizeInputIfWanted(Pass& p, kernels::GemmArgs& args, const bf16* x,
                                     const CudaProduct& product);
  // The o or down product: its output added to the residual stream inside it (the GEMV's
  // accumulate, or cuBLASLt's beta = 1) or by the next norm (`pending`, b.delta).
  absl::Status ResidualProduct(Pass& p, kernels::GemmArgs args, const char* what);
  absl::Status RunProduct(Pass& p, const kernels::GemmArgs& args, const char* what);
  // Where a product's E4M3 input rows go (the runner's buffers, the product's static scale).
  kernels::Fp8Out Fp8OutFor(const Pass& p, const CudaProduct& product) const;

  model::ModelConfig config_;
  CudaModelOptions options_;
  kernels::Gemm gemm_;
  CudaWeights weights_;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_MODEL_H_
