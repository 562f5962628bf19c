// Speculative decoding's settings (engine.speculative and its fields): which proposer a worker
// runs, how many tokens it may propose per step, and whether the engine backs off under load.
// Plain values, validated once and passed whole to the scheduler and the runner.
#ifndef LLM_WORKER_ENGINE_SPECULATION_H_
#define LLM_WORKER_ENGINE_SPECULATION_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llm::engine {

enum class SpeculativeMethod : uint8_t {
  kOff,
  // Prompt lookup: the tokens that followed the latest earlier occurrence of the slot's last
  // n tokens (ngram_max down to ngram_min) in its own prompt and output.
  kNgram,
  // A smaller model sharing the target's tokenizer, run by the same runner on its own KV cache.
  kDraft,
  // Benchmark-only (llm-bench speculative --method oracle; a worker's config refuses it): the
  // request's own oracle continuation (EngineRequest::oracle_ids, typically the target's greedy
  // ids from a run without speculation), so every proposal stands while the target agrees. The
  // upper bound of what speculation can give, at no proposing cost.
  kOracle,
};

// "off", "ngram", "draft", "oracle".
absl::StatusOr<SpeculativeMethod> ParseSpeculativeMethod(std::string_view name);
std::string_view SpeculativeMethodName(SpeculativeMethod method);

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kOff;
  int32_t num_tokens = 4;   // proposals per decode step at most (k)
  int32_t ngram_min = 2;    // shortest suffix the n-gram proposer matches
  int32_t ngram_max = 4;    // longest; the longest that matches wins
  std::string draft_model;  // draft_model.path: a checkpoint directory or random:<shape>
  // Choose each step's proposals from measured throughput (SpeculationPolicy), down to none
  // when verifying costs more than it saves. False: always num_tokens (tests, benchmarks).
  bool adaptive = true;

  bool enabled() const { return method != SpeculativeMethod::kOff; }
  // INVALID_ARGUMENT naming the field (engine.speculative.*).
  absl::Status Validate() const;
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_SPECULATION_H_
