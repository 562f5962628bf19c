// A generation request as the engine sees it: token ids and limits, already validated and
// tokenized. Immutable once queued; shared (by pointer) between the scheduler and the runner.
#ifndef LLM_WORKER_ENGINE_REQUEST_H_
#define LLM_WORKER_ENGINE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/constraint/constraint.h"
#include "worker/sampling/sampling_params.h"

namespace llm::engine {

struct EngineRequest {
  uint64_t key = 0;                 // unique per worker process; names the request everywhere
  std::vector<int32_t> prompt_ids;  // non-empty
  int32_t max_tokens = 1;           // >= 1; prompt + max_tokens fits the context
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // EOS ids (unless ignore_eos) and the request's stop ids
  bool want_logprobs = false;
  int32_t num_top_logprobs = 0;
  // -1: none. n >= 0: the runner reports each prompt token's logprob (raw logits, given the
  // tokens before it) with the n most likely alternatives, on the prefix's sampled output
  // (SlotOutput::prompt_logprobs); the prompt is then computed whole, not found cached.
  int32_t prompt_logprobs = -1;
  bool speculate = true;  // false: the request opted out of speculative decoding
  // The oracle proposer's continuation (SpeculativeMethod::kOracle, benchmark-only): output i
  // is proposed as oracle_ids[i]. Empty for every request a client sends.
  std::vector<int32_t> oracle_ids;
  // Structured output: the language the output must stay in (null: none). The runner keeps
  // a constraint::Matcher per slot and masks every sampled row with it.
  std::shared_ptr<const constraint::CompiledConstraint> constraint;

  int32_t total_tokens() const { return static_cast<int32_t>(prompt_ids.size()) + max_tokens; }
};

using RequestPtr = std::shared_ptr<const EngineRequest>;

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_REQUEST_H_
