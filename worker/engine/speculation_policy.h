// When to speculate: how many tokens each decoding slot proposes in a step, chosen from the
// throughput measured at each choice. Pure logic, owned by the scheduler (engine thread).
//
// Verifying k proposals per slot costs a wider step; it pays when the accepted tokens come
// faster than the step slows. Both sides depend on the device, the model, the batch and the
// traffic (how often proposals are right), so the policy does not model them: it measures.
// Steps are grouped by how many slots decode (1, 2-3, 4-7, ...: a power-of-two bucket). In each
// group the candidates k = 0, 1, 2, 4, ... up to num_tokens are each tried on kMinSamples steps
// and kMinDecodes slot-decodes at least; after that the one with the highest output tokens per
// second of backend time is chosen (per candidate, a mean over its steps that forgets the older
// ones at a rate per slot-decode, kWindowDecodes: a batch-1 step's tokens are one slot's draw
// of 1 to k + 1, so its estimate needs more steps than a batch of 64's, whose draws average out
// within the step), and every
// kReprobeInterval-th step of the group tries the others in turn so a change in traffic or load
// is noticed. So at batch 1 on a GPU, where a step of 5 tokens costs about what a step of 1
// does, it speculates; at a batch large enough that the step is compute-bound, k = 0 wins and
// speculation is off for that batch size.
#ifndef LLM_WORKER_ENGINE_SPECULATION_POLICY_H_
#define LLM_WORKER_ENGINE_SPECULATION_POLICY_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/speculation.h"

namespace llm::engine {

class SpeculationPolicy {
 public:
  static constexpr int kMinSamples = 3;
  static constexpr int64_t kMinDecodes = 24;
  static constexpr double kWindowDecodes = 64;
  static constexpr int kReprobeInterval = 64;
  // Groups of batch sizes: group g holds the steps in which 2^g to 2^(g+1) - 1 slots decode
  // (the last one, 32k and more).
  static constexpr int kGroups = 16;
  static constexpr int32_t kMeasuring = -1;
  // Per group, the proposals per slot the policy uses there once every candidate has its
  // samples (0: speculation off at those batch sizes), or kMeasuring before that and when
  // speculation is not configured; num_tokens everywhere when it is not adaptive. A plain
  // array, so it travels in SchedulerStats at no cost: it shows where the policy switches.
  using Standing = std::array<int8_t, kGroups>;

  explicit SpeculationPolicy(const SpeculativeConfig& config);

  // Proposals per slot for a step in which `decoding` slots decode; 0 when speculation is off.
  int32_t Choose(int32_t decoding);
  // A decode-only step with `decoding` slots planned at `k` produced `output_tokens` in
  // `seconds` of backend time.
  void Observe(int32_t decoding, int32_t k, int32_t output_tokens, double seconds);

  struct Candidate {
    int32_t k = 0;
    int samples = 0;      // steps observed
    int64_t decodes = 0;  // slot-decodes observed
    // The mean of its steps' output tokens per second, each step's weight shrinking by
    // (1 - 1 / kWindowDecodes) per slot-decode observed after it.
    double rate_sum = 0.0;
    double weight = 0.0;
    double tokens_per_second = 0.0;
    bool measured() const { return samples >= kMinSamples && decodes >= kMinDecodes; }
  };
  // The candidates of the group of `decoding` slots, and the one chosen when not probing.
  const std::vector<Candidate>& candidates(int32_t decoding) const;
  int32_t best(int32_t decoding) const;
  // Whether speculation is settled off for steps with `decoding` slots: adaptive, every
  // candidate measured, and the best is k = 0 (a reprobe may still try the others).
  bool SettledOff(int32_t decoding) const;
  Standing standing() const;
  // The group of steps with `decoding` slots decoding; the smallest batch of group `g` (1, 2,
  // 4, ...), and the group's batches as text ("1", "2-3", "4-7", ..., "32768+"), for reports
  // and metric labels.
  static int GroupOf(int32_t decoding);
  static int32_t GroupMin(int g) { return int32_t{1} << g; }
  static std::string GroupLabel(int g);

 private:
  struct Group {
    std::vector<Candidate> candidates;
    uint64_t choices = 0;
    size_t next_probe = 0;
  };
  static size_t BestIndex(const Group& g);
  static bool Settled(const Group& g);

  SpeculativeConfig config_;
  std::vector<Group> groups_;
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_SPECULATION_POLICY_H_
