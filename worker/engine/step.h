// The hand-off values between the scheduler and a model runner: what one step computes
// (StepPlan) and what it produced (StepResult). Plain values; no behaviour.
//
// Decode entries name slots, not tokens: the runner reads each decoding slot's input token from
// its own slot table, which its sampler wrote in the previous step. That is what lets step N+1
// be launched before the host has seen step N's tokens.
#ifndef LLM_WORKER_ENGINE_STEP_H_
#define LLM_WORKER_ENGINE_STEP_H_

#include <cstdint>
#include <vector>

#include "common/finish_reason.h"
#include "worker/engine/request.h"
#include "worker/sampling/sampled_token.h"

namespace llm::engine {

// A request placed into a slot this step; the runner installs it before running the step.
struct SlotAdmission {
  int32_t slot;
  RequestPtr request;
  std::vector<int32_t> blocks;  // KV blocks for positions [0, prompt + max_tokens)
};

// Prompt tokens [start, start + num_tokens) of the request in `slot`.
struct PrefillChunk {
  int32_t slot;
  int32_t start;
  int32_t num_tokens;
  bool samples;  // the prompt's last chunk: sample the first output token
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<int32_t> releases;  // slots whose request ended; applied first
  std::vector<SlotAdmission> admissions;
  std::vector<PrefillChunk> prefills;
  std::vector<int32_t> decodes;  // slots that feed their last sampled token

  bool empty() const { return prefills.empty() && decodes.empty(); }
  int32_t num_tokens() const {
    int32_t n = static_cast<int32_t>(decodes.size());
    for (const auto& p : prefills) n += p.num_tokens;
    return n;
  }
};

// One sampled token. `request_key` identifies the slot's occupant when the step ran, so an
// output of a step that was launched before a slot changed hands is recognised and dropped.
struct SlotOutput {
  int32_t slot;
  uint64_t request_key;
  sampling::SampledToken sampled;  // logprob and top filled when the request asked for them
  // kNone, or kStopToken / kLength: the runner checks a request's stop conditions itself.
  sampling::FinishReason finish = sampling::FinishReason::kNone;
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<SlotOutput> outputs;  // for every sampling prefill and every decode still live
  double device_seconds = 0.0;      // time the backend spent computing the step
  // Time the backend sat idle between the end of the previous step and the start of this one,
  // when this step was launched while the previous one was still running (a pipeline bubble);
  // negative when unknown or when the backend was idle for lack of work.
  double gap_seconds = -1.0;
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_STEP_H_
