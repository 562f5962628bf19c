// The CUDA backend of the engine. The slot table lives on the device: a request's sampling
// settings, KV block table row and counters are written once, when it is placed into a slot,
// from pinned staging; after that its tokens are appended, its position advanced and its stop
// conditions checked by the device sampler, which writes the slot's next input token where the
// next step reads it. A decode step whose set of decoding slots did not change therefore copies
// nothing to the device: it is one CUDA graph launch (captured per decode batch-size bucket),
// one asynchronous copy of the sampled ids back, and two events.
//
// Steps are launched on one stream without waiting: Launch enqueues step N+1 while step N runs,
// and Collect waits on step N's end event only. Nothing is allocated in the step loop; every
// buffer, plan and graph is made by Create.
//
// The batch layout of a step and the checks of a plan are SlotMirror's (step_layout.h).
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_RUNNER_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_RUNNER_H_

#include <cuda_runtime.h>

#include <array>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm.h"
#include "kernels/sampling.h"
#include "kernels/slot_update.h"
#include "worker/engine/engine_sizes.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda/cuda_util.h"
#include "worker/runner/cuda/cuda_weights.h"
#include "worker/runner/cuda/step_layout.h"
#include "worker/runner/model_runner.h"

namespace llm::runner::cuda {

struct CudaRunnerOptions {
  int device = 0;
  // kv_blocks 0: kv_memory_fraction of the device memory free once weights and buffers are
  // allocated (capped at what max_slots sequences of max_context tokens can use).
  engine::EngineSizes sizes{.max_slots = 256, .kv_blocks = 0, .block_tokens = 16};
  double kv_memory_fraction = 0.9;
  // Prompt tokens one step may hold (the scheduler's max_prefill_tokens is capped here); decode
  // rows come on top, up to max_slots.
  int32_t max_prefill_tokens = 2048;
  int32_t max_context = 0;       // 0: the model's max_position_embeddings
  int32_t valid_vocab_size = 0;  // ids >= this are never sampled; 0: the model's vocabulary
  bool cuda_graphs = true;       // decode steps replay captured graphs
  // Fixed matrix-product algorithms (kernels/gemm.h) so a sequence's tokens do not depend on
  // what else is in the batch.
  bool batch_invariant = false;
  // Products of up to kernels::kGemvMaxRows rows (small decode steps) through the GEMV kernel
  // (kernels/gemv.h) instead of cuBLASLt. Ignored when batch_invariant.
  bool gemv = true;
};

class CudaRunner : public ModelRunner {
 public:
  // Weights from `store`, or synthetic ones from `seed` when `store` is null.
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(const model::ModelConfig& config,
                                                            const model::TensorStore* store,
                                                            uint64_t seed,
                                                            const CudaRunnerOptions& options);
  ~CudaRunner() override;

  const RunnerInfo& info() const override { return info_; }
  absl::Status Launch(engine::StepPlan plan) override;
  absl::StatusOr<engine::StepResult> Collect() override;
  int in_flight() const override { return static_cast<int>(in_flight_.size()); }

  // Decode batch-size buckets (each with a graph when cuda_graphs is on).
  const std::vector<int32_t>& buckets() const { return buckets_; }
  uint64_t weight_bytes() const { return weights_.bytes(); }

 private:
  // A staging ring entry per step in flight, plus one so the previous step's end event is
  // still there when the next step's gap is measured.
  static constexpr int kRing = kMaxInFlight + 1;

  // What one step computes; see the batch layout above.
  struct StepShape {
    int32_t rows = 0;                // padded prefill rows + decode rows
    int32_t prefill_rows = 0;        // including padding
    int32_t decode_rows = 0;         // the bucket
    int32_t sample_rows = 0;         // padded
    bool identity_sampling = false;  // decode only: every row samples, in row order
    // Device pointers into the upload area (mixed steps).
    const int32_t* prefill_slot = nullptr;
    const int32_t* prefill_pos = nullptr;
    const int32_t* prefill_token = nullptr;
    const int32_t* sample_rows_index = nullptr;
  };

  struct RingEntry {
    PinnedMemory upload;
    PinnedMemory outputs;  // SampleOutput[max sample rows]
    Event start, end;
  };

  struct InFlight {
    uint64_t step_id;
    int ring;
    int32_t sample_rows;
    bool after_idle;  // launched with nothing else in flight: no gap to measure
  };

  CudaRunner(const model::ModelConfig& config, const CudaRunnerOptions& options);
  absl::Status Init(const model::TensorStore* store, uint64_t seed);
  absl::Status AllocateBuffers();
  absl::Status AllocateKvCache();
  absl::Status PrepareGemms();
  absl::Status CaptureGraphs();
  // Enqueues the kernels of one step on stream_ (also used for graph capture).
  absl::Status EnqueueForward(const StepShape& shape);
  // Stages layout_'s upload and enqueues its step.
  absl::Status Enqueue(uint64_t step_id);

  model::ModelConfig config_;
  CudaRunnerOptions options_;
  RunnerInfo info_;
  Stream stream_;
  kernels::Gemm gemm_;
  CudaWeights weights_;

  // Sizes.
  int32_t max_blocks_per_seq_ = 0;
  int32_t max_rows_ = 0;         // batch rows a step may have
  int32_t max_sample_rows_ = 0;  // sampling rows a step may have
  int32_t partition_tokens_ = 0;
  int32_t max_partitions_ = 0;
  int32_t qkv_dim_ = 0;
  size_t upload_bytes_ = 0;

  // Device memory.
  DeviceMemory buffers_;  // slot table, scratch, rope tables, upload area
  DeviceMemory kv_;
  std::vector<bf16*> k_cache_, v_cache_;  // per layer
  kernels::DeviceSlots slots_{};
  kernels::SlotSampling* sampling_table_ = nullptr;
  int32_t* block_tables_ = nullptr;
  int32_t* decode_list_ = nullptr;
  std::byte* upload_ = nullptr;
  const float* rope_cos_ = nullptr;
  const float* rope_sin_ = nullptr;
  // Scratch.
  float* x_ = nullptr;       // [rows, hidden] residual stream
  float* delta_ = nullptr;   // [rows, hidden] sublayer output
  bf16* xn_ = nullptr;       // [rows, hidden]
  bf16* qkv_ = nullptr;      // [rows, qkv_dim]
  bf16* attn_ = nullptr;     // [rows, q_dim]
  bf16* gate_up_ = nullptr;  // [rows, 2 * intermediate]
  bf16* act_ = nullptr;      // [rows, intermediate]
  int32_t* row_token_ = nullptr;
  int32_t* row_pos_ = nullptr;
  int32_t* row_slot_ = nullptr;
  int32_t* sample_slot_ = nullptr;
  int32_t* sample_pos_ = nullptr;
  bf16* xs_ = nullptr;       // [sample rows, hidden]
  float* logits_ = nullptr;  // [sample rows, vocab]
  float* probs_ = nullptr;   // [sample rows, vocab]
  kernels::SampleOutput* out_ = nullptr;
  float* part_out_ = nullptr;
  float* part_max_ = nullptr;
  float* part_sum_ = nullptr;

  std::array<RingEntry, kRing> ring_;
  int next_ring_ = 0;
  std::deque<InFlight> in_flight_;
  int last_collected_ring_ = -1;

  // The host's mirror of the slot table, and the layout of the step being launched.
  std::unique_ptr<SlotMirror> mirror_;
  StepLayout layout_;

  std::vector<int32_t> buckets_;
  std::vector<GraphExec> graphs_;  // per bucket; empty without cuda_graphs
  // Set when a CUDA call failed after the host's view of the device changed: every later
  // Launch and Collect returns it (the engine then fails its requests).
  absl::Status broken_;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_RUNNER_H_
