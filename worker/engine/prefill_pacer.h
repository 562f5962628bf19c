// When a long prompt's chunks may go into a step in which requests decode, so that their time
// per output token stays within `ratio` times a decode-only step's. Pure logic, owned by the
// scheduler (engine thread).
//
// Every step that carries prompt tokens gives each decoding request one token, so the chunk's
// cost is added to their time per output token: a 16k prompt in chunks of 2,048 made its
// neighbours' TPOT 23 times the decode-only figure on an H200 (docs/engine.md). Smaller chunks
// cut the stall but run the products at a fraction of the device's speed. The pacer keeps full
// chunks and spaces them out instead:
//   - it measures a decode-only step's backend time, per power-of-two group of decode tokens,
//     and the time a prompt token adds to a step (an exponentially weighted mean over the steps
//     that carried both);
//   - it keeps a credit: each step with decodes earns (ratio - 1) x the decode-only time, a
//     long prompt's chunk is charged its tokens x the time per token when planned (corrected
//     to what the step measured when its result comes); the credit never exceeds 0, so nothing
//     is saved up for a burst;
//   - a long prompt's chunk goes into a step when the credit plus what the step earns is not
//     negative.
// So over a window the decoding requests' time per output token is at most `ratio` times the
// decode-only step's, and a long prompt's prefill, while others decode, runs at about
// (ratio - 1) / ratio of its unpaced speed when its chunks cost much more than a decode step
// (half at ratio 2). Before a group's decode-only time is known, one of its steps carries no
// prompt tokens, to measure it; and until a chunk's cost has been measured, one long chunk at a
// time is in flight. Only long prompts (more than one chunk) are paced: a short
// prompt stalls its neighbours for one step, and pacing it would only queue requests.
#ifndef LLM_WORKER_ENGINE_PREFILL_PACER_H_
#define LLM_WORKER_ENGINE_PREFILL_PACER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace llm::engine {

class PrefillPacer {
 public:
  static constexpr double kAlpha = 0.2;  // weight of a new sample in a mean

  // `ratio` <= 0: off (every step may carry chunks); otherwise more than 1 (at 1 nothing would
  // ever pay a chunk back; SchedulerConfig::Validate refuses it).
  explicit PrefillPacer(double ratio);

  bool enabled() const { return ratio_ > 0.0; }
  // Whether a long prompt's chunk may go into the step about to be planned, with
  // `decode_tokens` decode tokens.
  bool Allow(int32_t decode_tokens) const;
  // Whether that step must carry no prompt tokens at all: its group's decode-only time is not
  // measured and no step is on its way to measure it (once per group, unless a result is lost;
  // without it a stream of short prompts could keep a group unmeasured and a long prompt
  // waiting for ever).
  bool Probe(int32_t decode_tokens) const;
  // The step `step_id` was planned: `decode_tokens` decode tokens, `prompt_tokens` prompt
  // tokens, of which `paced_tokens` long prompts'.
  void Planned(uint64_t step_id, int32_t decode_tokens, int32_t prompt_tokens,
               int32_t paced_tokens);
  // The backend computed step `step_id` in `seconds` (results come in step order; a step whose
  // result never comes is forgotten when a later one's does).
  void Observe(uint64_t step_id, double seconds);

  double credit_seconds() const { return credit_; }
  // The measured decode-only step time of `decode_tokens`' group; negative when unknown.
  double decode_seconds(int32_t decode_tokens) const;
  double seconds_per_prompt_token() const { return per_token_; }

 private:
  struct Step {
    uint64_t id;
    int32_t decode_tokens, prompt_tokens, paced_tokens;
    double charged;  // credit taken at planning
    bool unpriced;   // charged nothing: the time per prompt token was not measured yet
  };
  struct Group {
    double seconds = -1.0;  // decode-only step time; negative: not measured yet
    int in_flight = 0;      // decode-only steps planned, results not yet in
  };
  static size_t GroupOf(int32_t decode_tokens);

  double ratio_;
  double credit_ = 0.0;
  double per_token_ = 0.0;  // seconds a prompt token adds to a step; 0 until measured
  std::vector<Group> groups_;
  std::deque<Step> planned_;
  int unpriced_ = 0;  // unpriced steps in flight: no other long chunk until one is measured
};

}  // namespace llm::engine

#endif  // LLM_WORKER_ENGINE_PREFILL_PACER_H_
