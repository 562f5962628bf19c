// The hand-off values between the scheduler and a model runner: what one step computes
// (StepPlan) and what it produced (StepResult). Plain values; no behaviour.
//
// Each slot in a step computes one chunk of tokens: a prompt chunk (PrefillChunk) or a decode
// chunk (DecodeChunk): the slot's last sampled token, followed by up to `max_draft` tokens the
// runner proposes itself (speculative decoding) and verifies in the same forward pass. The
// result says which of them stand, as one SlotOutput per accepted token; the runner rolls the
// rest back (the slot's length returns to the accepted run).
//
// Decode entries name slots, not tokens: the runner reads each decoding slot's input token from
// its own slot table, which its sampler wrote in the previous step, and proposes from the slot's
// own token history. That is what lets step N+1 be launched before the host has seen step N's
// tokens, with speculation on or off.
#ifndef LLM_WORKER_ENGINE_STEP_H_
#define LLM_WORKER_ENGINE_STEP_H_

#include <cstdint>
#include <vector>

#include "common/finish_reason.h"
#include "worker/engine/request.h"
#include "worker/sampling/sampled_token.h"

namespace llm::engine {

// A request placed into a slot this step; the runner installs it before running the step.
// A request readmitted after a preemption carries the tokens it had generated (`resumed`): its
// prefix is the prompt followed by them, the runner counts them as generated (max_tokens,
// penalties, the sampler's counter, the constraint's state), and the prefix's last chunk
// samples the token after them.
struct SlotAdmission {
  int32_t slot;
  RequestPtr request;
  // KV blocks for the first positions: at least the prefix and its first decode; all of
  // prompt + max_tokens when the scheduler reserves (SchedulerConfig::kv_on_demand off).
  std::vector<int32_t> blocks;
  std::vector<int32_t> resumed;
  bool readmission = false;  // it ran before and was preempted (resumed may still be empty)
};

// Blocks appended to the block table of the request in `slot` (KV on demand); applied after
// the plan's admissions.
struct BlockGrant {
  int32_t slot;
  std::vector<int32_t> blocks;
};

// Prefix tokens [start, start + num_tokens) of the request in `slot` (its prompt, then any
// resumed tokens).
struct PrefillChunk {
  int32_t slot;
  int32_t start;
  int32_t num_tokens;
  bool samples;  // the prefix's last chunk: sample the next output token
};

// A decoding slot: its last sampled token, then at most `max_draft` proposed tokens to verify
// (0: a plain decode). The runner may propose fewer (the n-gram proposer finds no match, the
// request's max_tokens is near); it never proposes more.
struct DecodeChunk {
  int32_t slot;
  int32_t max_draft = 0;
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<int32_t> releases;  // slots whose request ended; applied first
  std::vector<SlotAdmission> admissions;
  std::vector<BlockGrant> grants;  // after the admissions
  std::vector<PrefillChunk> prefills;
  std::vector<DecodeChunk> decodes;  // slots that feed their last sampled token
  // Speculation is settled off at this step's batch size (SpeculationPolicy::SettledOff) and
  // no decode carries proposals: a runner whose draft model is kept up to date step by step
  // (the CUDA runner's catch-up pass) may let it lapse for the decoding slots, which then get
  // no proposals until they end.
  bool draft_may_lapse = false;

  bool empty() const { return prefills.empty() && decodes.empty(); }
  // The most tokens the step computes: prompt chunks, decode tokens and every allowed proposal.
  int32_t num_tokens() const {
    int32_t n = 0;
    for (const auto& d : decodes) n += 1 + d.max_draft;
    for (const auto& p : prefills) n += p.num_tokens;
    return n;
  }
  int32_t num_draft_tokens() const {
    int32_t n = 0;
    for (const auto& d : decodes) n += d.max_draft;
    return n;
  }
};

// One sampled token. `request_key` identifies the slot's occupant when the step ran, so an
// output of a step that was launched before a slot changed hands is recognised and dropped.
// A decode that verified proposals gives its accepted run as consecutive outputs of one slot,
// in order: the accepted proposals, then the token sampled after them (the one that replaced
// the first rejected proposal, or the one after the last accepted). Stop tokens and max_tokens
// apply token by token: the run ends at the first output that finishes the request.
struct SlotOutput {
  int32_t slot;
  uint64_t request_key;
  sampling::SampledToken sampled;  // logprob and top filled when the request asked for them
  // kNone, or kStopToken / kLength: the runner checks a request's stop conditions itself.
  sampling::FinishReason finish = sampling::FinishReason::kNone;
  // On the first output of a verifying decode: the proposals it verified and how many of them
  // the target accepted (before any stop cut the run); 0 elsewhere.
  int32_t draft_tokens = 0;
  int32_t accepted_tokens = 0;
  // On the output a prefix's last chunk samples, for a request with prompt_logprobs >= 0: one
  // entry per prompt token (token_id the prompt's; the first entry's logprob 0, no top).
  std::vector<sampling::SampledToken> prompt_logprobs;
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<SlotOutput> outputs;  // for every sampling prefill and every decode still live
  double device_seconds = 0.0;      // time the backend spent computing the step
  // Tokens the forward pass computed (prompt, decode and proposed tokens); -1 when unknown.
  int32_t computed_tokens = -1;
  // Time the backend sat idle between the end of the previous step and the start of this one,
  // when this step was launched while the previous one was still running (a pipeline bubble),
  // plus any time the step itself waited for the host (a constrained step's masks); negative
  // when unknown or when the backend was idle for lack of work.
  double gap_seconds = -1.0;
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_STEP_H_
