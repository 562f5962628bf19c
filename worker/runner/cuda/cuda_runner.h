// The CUDA backend of the engine. The slot table lives on the device: a request's sampling
// settings, KV block table row and counters are written once, when it is placed into a slot,
// from pinned staging; after that its tokens are appended, its position advanced and its stop
// conditions checked by the device sampler, which writes the slot's next input token where the
// next step reads it. A decode step whose set of decoding slots did not change therefore copies
// nothing to the device: it is one CUDA graph launch (captured per decode batch-size bucket),
// one asynchronous copy of the sampled ids back, and two events.
//
// Steps are launched on one stream without waiting: Launch enqueues step N+1 while step N runs,
// and Collect waits on step N's end event only. A step with constrained rows (structured output)
// enqueues its forward pass at Launch and its sampling from Collect(N), once step N's tokens have
// moved the matchers and the masks are uploaded (slot_constraints.h); other steps never wait.
// Nothing is allocated in the step loop; every buffer, plan and graph is made by Create.
//
// The parts: the batch layout of a step and the checks of a plan are SlotMirror's
// (step_layout.h), the device memory is planned by step_buffers.h, the layer wiring is CudaModel's
// (cuda_model.h); this file is the step pipeline (staging, graph replay, collection). The rest
// of the worker reaches it through runner_factory.h.
#ifndef LLM_WORKER_RUNNER_CUDA_CUDA_RUNNER_H_
#define LLM_WORKER_RUNNER_CUDA_CUDA_RUNNER_H_

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/safetensors.h"
#include "worker/runner/cuda/cuda_draft.h"
#include "worker/runner/cuda/cuda_model.h"
#include "worker/runner/cuda/cuda_util.h"
#include "worker/runner/cuda/kernel_clock.h"
#include "worker/runner/cuda/runner_factory.h"
#include "worker/runner/cuda/step_buffers.h"
#include "worker/runner/cuda/step_layout.h"
#include "worker/runner/model_runner.h"
#include "worker/runner/slot_constraints.h"

namespace llm::runner::cuda {

class CudaRunner : public ModelRunner {
 public:
  // Weights from `store`, or synthetic ones from `seed` when `store` is null; `draft`: the
  // draft model with engine.speculative.method: draft (runner_factory.h).
  static absl::StatusOr<std::unique_ptr<CudaRunner>> Create(const model::ModelConfig& config,
                                                            const model::TensorStore* store,
                                                            const model::QuantScheme& quant,
                                                            uint64_t seed,
                                                            const CudaRunnerOptions& options,
                                                            const CudaDraftSource* draft = nullptr);
  ~CudaRunner() override;

  const RunnerInfo& info() const override { return info_; }
  absl::Status Launch(engine::StepPlan plan) override;
  absl::StatusOr<engine::StepResult> Collect() override;
  int in_flight() const override { return static_cast<int>(in_flight_.size()); }

  // Kernel timing (llm-bench gpu --kernels), callable from any thread: the next `steps` steps
  // of the kind asked run with a KernelClock (decode-only ones eagerly instead of from their
  // graph; steps with prompt tokens are eager anyway); their times add up until taken. Asking
  // again replaces what is left of the last request.
  enum class ProfiledSteps { kDecodeOnly, kWithPrompt };
  absl::Status ProfileSteps(int steps, ProfiledSteps which);
  KernelTimes TakeKernelTimes();

  // Decode batch-size buckets (each with a graph when cuda_graphs is on).
  const std::vector<int32_t>& buckets() const { return buckets_; }
  uint64_t weight_bytes() const { return model_->weights().bytes(); }
  // engine.cuda_gemm_tuning: the products tuned at start, and those whose algorithm changed.
  int gemms_tuned() const { return model_->gemm().tuned(); }
  int gemms_tuned_changed() const { return model_->gemm().tuned_changed(); }

 private:
  // A staging ring entry per step in flight, plus one so the previous step's end event is
  // still there when the next step's gap is measured.
  static constexpr int kRing = kMaxInFlight + 1;

  struct RingEntry {
    PinnedMemory upload;
    PinnedMemory outputs;  // SampleOutput[max sample rows]
    // A step with constrained rows: its mask rows, staged (StepSizes::mask_bytes); one per
    // entry, since a step's masks may be written while the last step's still wait to be copied.
    PinnedMemory masks;
    Event start, end;
    // A step with constrained rows: its forward pass's end and its sampling's start (the device
    // idles between them while the host is late with the masks).
    Event forward_end, sample_start;
  };

  struct InFlight {
    uint64_t step_id;
    int ring;
    int32_t sample_rows;
    bool after_idle;  // launched with nothing else in flight: no gap to measure
    bool profiled;    // timed by clocks_[ring]
    bool masked;      // constrained rows: sampling enqueued once their masks were written
  };

  // A step whose sampling waits for its masks: the previous step's tokens move its
  // constrained slots' matchers first (slot_constraints.h).
  struct PendingSample {
    ForwardShape shape;
    int ring;
  };

  CudaRunner(const model::ModelConfig& config, const CudaRunnerOptions& options);
  absl::Status Init(const model::TensorStore* store, const model::QuantScheme& quant, uint64_t seed,
                    const CudaDraftSource* draft);
  // Init's steps, in order: the model's options (the PDL choice, the proposers); info_ as far
  // as the model and the device tell it; the step sizes and decode buckets; the products'
  // plans for every row count a step can have; the draft and the KV caches (split by bytes
  // per position), then the prompt attention kernel; the host's slot mirror and constraints.
  CudaModelOptions ModelOptions(const model::QuantScheme& quant, bool draft) const;
  void DescribeRunner(int32_t max_context, int32_t prompt_rows);
  absl::Status PlanSizes(int32_t max_context, int32_t prompt_rows);
  absl::Status PrepareProducts();
  absl::Status AllocateCaches(const CudaDraftSource* draft, const CudaModelOptions& model_options);
  void MakeHostMirrors(bool oracle);
  absl::Status AllocateStaging();
  // The prompt attention kernel, once the KV cache exists: the Hopper kernel's tensor maps when
  // engine.cuda_hopper_prefill is on and the device and shape allow it (info_.prefill_attention).
  absl::Status ChoosePrefillAttention();
  absl::Status CaptureGraphs();
  // The draft model's passes of `shape` (with a draft), then its forward pass, on the stream.
  absl::Status EnqueueForwardPass(const ForwardShape& shape, KernelClock* clock = nullptr);
  // Captures `shape`'s forward pass (after an eager warm-up run) into `graph`.
  absl::Status CaptureGraph(const ForwardShape& shape, GraphExec& graph);
  // The decode-only shape of `bucket` rows a slot `group`, with `variant`'s sampling; a
  // speculative one reads its allowances and limits where Enqueue stages them (first).
  ForwardShape DecodeShape(size_t bucket, int32_t group, size_t variant,
                           bool draft_catch_up = true) const;
  // The graph for layout_'s decode-only step with `variant`'s sampling, or null (run eagerly).
  const GraphExec* DecodeGraph(size_t variant) const;
  // Stages layout_'s upload and enqueues its step.
  absl::Status Enqueue(uint64_t step_id);
  // The step's forward pass and sampling (a graph replay for decode-only steps), the outputs'
  // copy back and the end event; or, with constrained rows, the forward pass and what of the
  // rest its masks allow now.
  absl::Status EnqueueForward(uint64_t step_id, ForwardShape& shape, RingEntry& ring);
  // A constrained step's forward pass without its sampling, which becomes pending_.
  absl::Status EnqueueMaskedForward(ForwardShape& shape, RingEntry& ring);
  // Writes pending_'s masks, uploads them and enqueues its sampling and the step's end.
  absl::Status EnqueuePendingSample();
  // engine.cuda_speculate_constrained with speculation on: constrained slots get proposals.
  bool speculates_constrained() const {
    return sizes_.spec_group > 1 && options_.switches.speculate_constrained;
  }
  // A speculative step with constrained rows copies its proposals back (when constrained
  // slots speculate): sets shape.proposals_back and proposals_ready.
  void WantProposalsBack(ForwardShape& shape) const;
  // The pending step's proposals as copied back (none without proposals_back).
  SlotConstraints::Proposals ProposalsBack(const ForwardShape& shape) const;
  // The outputs' copy back and the end event.
  absl::Status EnqueueStepEnd(const ForwardShape& shape, RingEntry& ring);

  model::ModelConfig config_;
  CudaRunnerOptions options_;
  RunnerInfo info_;
  Stream stream_;
  std::unique_ptr<CudaModel> model_;
  std::unique_ptr<CudaDraft> draft_;  // engine.speculative.method: draft
  StepSizes sizes_;
  StepBuffers buffers_;
  KvCache kv_;

  std::array<RingEntry, kRing> ring_;
  int next_ring_ = 0;
  std::deque<InFlight> in_flight_;
  int last_collected_ring_ = -1;

  // The host's mirror of the slot table, and the layout of the step being launched.
  std::unique_ptr<SlotMirror> mirror_;
  StepLayout layout_;

  // Structured output: the slots' matchers and the step waiting for its masks.
  std::unique_ptr<SlotConstraints> constraints_;
  std::vector<int32_t> mask_row_slots_;    // the pending step's sampling rows' slots
  std::vector<int32_t> mask_row_offsets_;  // and their offsets in their verify groups
  std::optional<PendingSample> pending_;
  // Speculation under masks: the host's copy of the slots' proposal counts and proposals
  // (ForwardShape::proposals_back), one for every step: the pending step's is read before a
  // later step is launched.
  PinnedMemory proposals_back_;
  Event proposals_ready_;

  std::vector<int32_t> buckets_;
  // Per bucket, three: graphs_[kGraphVariants * bucket + variant], the full sampler, its
  // two-launch argmax path (StepLayout::argmax_only picks it) or the forward pass alone (a
  // step with constrained rows); with a draft model the same again after them without the
  // draft's catch-up pass (StepLayout::draft_catch_up false). Empty without cuda_graphs.
  static constexpr size_t kGraphVariants = 3;
  static constexpr size_t kSampleGraph = 0, kArgmaxGraph = 1, kForwardGraph = 2;
  std::vector<GraphExec> graphs_;
  // Speculative decode-only steps (verify groups, StepLayout::group > 1): for each group size
  // of spec_groups_ (SpeculativeGroups) and bucket, the same three variants as graphs_ (the
  // forward pass alone, for a step with constrained rows, copies the proposals back when
  // constrained slots speculate), spec_graphs_[kSpecVariants * (buckets * group index + bucket) +
  // variant]; null where bucket × group passes max_decode_rows. Empty without cuda_graphs or
  // speculation.
  static constexpr size_t kSpecVariants = kGraphVariants;
  std::vector<int32_t> spec_groups_;
  std::vector<GraphExec> spec_graphs_;
  // Kernel timing: one clock per ring entry (made by the first ProfileSteps).
  std::array<KernelClock, kRing> clocks_;
  std::atomic<bool> clocks_made_{false};
  std::atomic<int> profile_steps_{0};
  std::atomic<bool> profile_prompt_steps_{false};  // which ProfiledSteps profile_steps_ counts
  std::mutex profile_mu_;
  KernelTimes kernel_times_;  // guarded by profile_mu_

  // Set when a CUDA call failed after the host's view of the device changed: every later
  // Launch and Collect returns it (the engine then fails its requests).
  absl::Status broken_;
};

}  // namespace llm::runner::cuda

#endif  // LLM_WORKER_RUNNER_CUDA_CUDA_RUNNER_H_
