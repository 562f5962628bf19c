// The draft model of speculative decoding on the CPU backend (engine.speculative.method:
// draft): a smaller model sharing the target's tokenizer, run by the CPU runner on the runner's
// thread, inside the step, over its own KV cache. Its cache has the target's block geometry and
// a slot uses the same block ids in both, so the blocks the scheduler reserved for a request
// (prompt + max_tokens) hold the draft's K/V too, and a prefix-cache hit finds the draft's K/V
// of the cached prompt where the request that wrote them ran the draft over them.
//
// The draft keeps, per slot, how many leading tokens of the slot's history its cache holds
// (`written`). Proposing feeds it the rest of the history as one chunk (the prompt, the first
// time; afterwards the last token or two), then one proposal at a time. After verification the
// slot's written count falls back to the part of the history that the target accepted.
//
// A constrained request's proposals are chosen under its constraint's mask, as verification's
// rows are: the draft's logits of the tokens the constraint refuses after the history and the
// proposals before are -inf, so every proposal could stand, and a sampled proposal's recorded
// distribution q is the masked one it was drawn from (the rejection rule needs exactly that q).
// A job's proposals end early after a stop id, or where the constraint allows nothing.
#ifndef LLM_WORKER_RUNNER_CPU_DRAFT_H_
#define LLM_WORKER_RUNNER_CPU_DRAFT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "worker/constraint/constraint.h"
#include "worker/engine/request.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/kv_cache.h"
#include "worker/sampling/sampler.h"

namespace llm::runner {

// One slot's proposals in a step.
struct DraftJob {
  const engine::EngineRequest* request;
  std::span<const int32_t> history;  // prompt and output, the last sampled token last
  std::span<const int32_t> blocks;   // the slot's block table
  int32_t generated = 0;             // the request's output tokens so far (the draws' counter)
  const sampling::PenaltyState* penalties;  // the request's, before this step's tokens
  int32_t max_draft = 0;                    // proposals wanted (> 0)
  int32_t* written = nullptr;               // the slot's draft-cache length (in, out)
  std::vector<int32_t>* drafts;             // proposals (out, appended)
  // For sampled requests: each proposal's distribution q, [proposal][vocab] (out, resized).
  std::vector<float>* draft_probs;
  // A constrained request's matcher where its history ends (nullptr: unconstrained; not moved)
  // and the stop ids its mask allows where the output is complete.
  const constraint::Matcher* matcher = nullptr;
  std::span<const int32_t> stop_ids;
};

class CpuDraft {
 public:
  // The random stream of the draft's proposals (Philox `stream`; see Sampler::kAcceptStream).
  static constexpr uint64_t kDraftStream = 2;

  CpuDraft(std::unique_ptr<CpuModel> model, int32_t num_blocks, int32_t block_tokens);

  const CpuModel& model() const { return *model_; }
  size_t kv_bytes() const { return kv_.bytes(); }

  // Proposes up to max_draft tokens for each job, batched over the jobs: greedy requests the
  // draft's argmax, sampled ones a draw from the draft's distribution under the request's
  // sampling parameters, recorded in draft_probs; both under the job's constraint. Penalties
  // count the proposals before each one, as the target's verification counts them. Leaves
  // *written at the history plus the proposals fed back to the draft (all but the last, or
  // all of them where a constrained job ended early).
  absl::Status Propose(std::span<DraftJob> jobs);

  // After verification: the slot's history is `accepted_length` tokens long and its first
  // `valid` tokens are the ones the draft saw; its cache keeps no more than those.
  static void Rollback(int32_t valid, int32_t* written) { *written = std::min(*written, valid); }

 private:
  // A job's state over the rounds of one Propose.
  struct JobState {
    sampling::PenaltyState penalties;            // with the job's earlier proposals
    std::optional<constraint::Matcher> matcher;  // after them
    bool ended = false;                          // no more proposals
  };

  // Turns the draft's logits row of a job into its next proposal (the logit bias and
  // penalties applied as the target's sampler applies them); none (state.ended set) where the
  // constraint allows no token.
  void Choose(DraftJob& job, std::span<float> row, int32_t index, JobState& state);

  std::unique_ptr<CpuModel> model_;
  CpuKvCache kv_;
  sampling::Sampler sampler_;
  std::vector<JobState> states_;  // per job
  std::vector<int32_t> tokens_;
  std::vector<SeqChunk> chunks_;
  std::vector<float> logits_;
  std::vector<float> probs_;
  std::vector<size_t> active_;  // the jobs of a round
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_CPU_DRAFT_H_
