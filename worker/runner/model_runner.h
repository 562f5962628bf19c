// The seam between the engine and a backend. The engine thread launches step plans and collects
// their results in order; a backend may run step N+1 while the host handles step N.
//
// Contract:
//  - Launch and Collect are called from one thread (the engine thread).
//  - Plans run in launch order. Releases, admissions and block grants in a plan take effect,
//    in that order, before its tokens are computed, and after every earlier plan has run.
//  - For each sampling prefill chunk and each decode of a live slot the result holds one
//    SlotOutput. The backend keeps each slot's last token, generated count, sampling state and
//    stop conditions itself; it reports a slot as finished (stop token or max_tokens) and gives
//    no further output for it, so decodes of an already finished slot (the extra step the
//    pipeline allows) produce nothing.
//  - At most kMaxInFlight plans are launched and not yet collected.
#ifndef LLM_WORKER_RUNNER_MODEL_RUNNER_H_
#define LLM_WORKER_RUNNER_MODEL_RUNNER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/engine_sizes.h"
#include "worker/engine/step.h"

namespace llm::runner {

struct RunnerInfo {
  engine::EngineSizes sizes;       // as settled: the scheduler takes exactly these
  int32_t vocab_size = 0;          // the model's
  int32_t max_context = 0;         // positions per sequence
  int32_t max_prefill_tokens = 0;  // prompt tokens one plan may hold; 0: any
  // Prompt tokens per step when engine.max_prefill_tokens is 0: the backend's choice between
  // time to first token and the stall of running decodes (how each was chosen: docs/engine.md);
  // 0: none.
  int32_t default_prefill_tokens = 0;
  // Prompt tokens of a step with no decode in it when engine.max_prefill_tokens_alone is 0
  // (SchedulerConfig::max_prefill_tokens_alone); 0: the same as the other.
  int32_t default_prefill_tokens_alone = 0;
  int32_t max_stop_ids = 0;  // stop ids (EOS included) a request may have; 0: any
  bool constraints = false;  // applies EngineRequest::constraint (structured output)
  // Verifies proposals of constrained requests, each row under the constraint's mask after
  // the accepted ones before it (SchedulerConfig::speculate_constrained); false: a constrained
  // request gets no proposals.
  bool speculates_constrained = false;
  // Keeps a draft model up to date in every step that decodes without proposals (the CUDA
  // runner's catch-up pass), and skips that in a plan with StepPlan::draft_may_lapse: the
  // slots decoding in it get no proposals afterwards (SchedulerConfig::draft_lapses).
  bool draft_lapses = false;
  bool logit_bias = false;  // applies SamplingParams::logit_bias
  // Reports EngineRequest::prompt_logprobs (SlotOutput::prompt_logprobs).
  bool prompt_logprobs = false;
  // Takes BlockGrants and readmissions with resumed tokens (SchedulerConfig::kv_on_demand);
  // false: the scheduler reserves prompt + max_tokens at admission.
  bool kv_on_demand = false;
  // Takes penalty state (prompt tokens, generated tokens) from the rows it prefills, so a
  // request with penalties must compute them rather than find them in the prefix cache
  // (SchedulerConfig::penalties_from_prefill).
  bool penalties_from_prefill = false;
  std::string device;  // "cpu (2 threads)", "NVIDIA H100 ..."
  // The prompt attention kernel chosen at start: "hopper" (wgmma, TMA), "tiled" (mma.sync),
  // "rows" (a block per prompt row); empty on the CPU.
  std::string prefill_attention;
  std::string pci_bus_id;  // a GPU's, for the driver's counters (NVML); empty on the CPU
  uint64_t kv_cache_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t memory_total_bytes = 0;  // the device's memory; 0 when not applicable
};

class ModelRunner {
 public:
  static constexpr int kMaxInFlight = 2;

  virtual ~ModelRunner() = default;
  virtual const RunnerInfo& info() const = 0;
  // Starts `plan`. Errors are for malformed plans; they leave the runner usable.
  virtual absl::Status Launch(engine::StepPlan plan) = 0;
  // Waits for the oldest launched step and returns its result. FAILED_PRECONDITION when none is
  // in flight. Every other call takes the step off, an error included, so in_flight() falls.
  virtual absl::StatusOr<engine::StepResult> Collect() = 0;
  virtual int in_flight() const = 0;
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_MODEL_RUNNER_H_
