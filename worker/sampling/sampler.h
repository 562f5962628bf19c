// Token selection from logits on the CPU: penalties, temperature, top-k, top-p, min-p and a
// seeded draw. This is also the reference the GPU sampler is checked against.
//
// The procedure, in order:
//   1. penalties: repetition (over prompt and output tokens: positive logits divided, at most
//      FLT_MAX, negative multiplied; RepetitionPenalised), then presence and frequency (over
//      output tokens);
//   2. temperature 0: argmax, ties to the lowest id (no randomness consumed);
//   3. logits * InverseTemperature(temperature) (1/T, at most FLT_MAX), softmax;
//   4. top-k (ties kept in id order), renormalise; top-p over probabilities sorted descending
//      (ties by id), keeping the smallest prefix whose mass reaches top_p; min-p against the
//      most likely remaining token;
//   5. u = UniformDouble(seed, counter = number of tokens the request has generated); the
//      chosen token is the first, in id order, where the cumulative kept mass exceeds
//      u * total kept mass. Masses are summed per chunk of 64 ids (eight lanes in a fixed tree,
//      in float), chunks in order in double; the vectorised and portable code give the same
//      bits, so a token never depends on the CPU, the thread or the batch.
//
// Speculative decoding verifies a proposed token against that same distribution (Verify): a
// greedy request keeps the token Sample gives (so its ids are the same with speculation on or
// off); a sampled one follows the rejection rule of speculative sampling (Leviathan et al.,
// Chen et al., 2023), whose output is distributed as the target's.
#ifndef LLM_WORKER_SAMPLING_SAMPLER_H_
#define LLM_WORKER_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "worker/sampling/sampled_token.h"
#include "worker/sampling/sampling_params.h"

namespace llm::sampling {

// Token statistics a request's penalties need. Sparse: cost grows with distinct tokens seen,
// not with the vocabulary.
class PenaltyState {
 public:
  void AddPrompt(std::span<const int32_t> ids);
  void AddOutput(int32_t id) { ++output_counts_[id]; }
  const std::unordered_map<int32_t, int32_t>& output_counts() const { return output_counts_; }
  const std::vector<int32_t>& prompt_ids() const { return prompt_ids_; }  // sorted, unique

 private:
  std::vector<int32_t> prompt_ids_;
  std::unordered_map<int32_t, int32_t> output_counts_;
};

// Stateless apart from scratch buffers: one Sampler per thread.
class Sampler {
 public:
  // `logits` is modified in place (penalties applied). `counter` is the number of tokens the
  // request has generated so far. `num_top_logprobs` > 0 fills SampledToken::top with up to
  // that many of the best logits (ties to the lowest id); NaN and -inf are never listed.
  SampledToken Sample(std::span<float> logits, const SamplingParams& params,
                      const PenaltyState& penalties, uint64_t counter, int num_top_logprobs = 0,
                      bool want_logprob = false);

  // The random stream of the acceptance test (Philox's `stream` word; draws use stream 0).
  static constexpr uint64_t kAcceptStream = 1;

  // Verifies `draft`, proposed for the token Sample would give from these arguments.
  // `draft_probs` is the normalised distribution the proposer drew `draft` from; empty for a
  // deterministic proposer (a point mass on `draft`, as n-gram lookup is). Greedy: the token is
  // Sample's and `accepted` says whether it is `draft`. Otherwise, with p the distribution
  // Sample draws from (penalties, temperature, top-k/top-p/min-p, normalised) and q the
  // proposer's: accepted when UniformDouble(seed, counter, kAcceptStream) * q(draft) <
  // p(draft), the token then being `draft`; else the token is drawn (u = UniformDouble(seed,
  // counter), as Sample's) from max(0, p - q) normalised. Logprobs as Sample gives them.
  SampledToken Verify(std::span<float> logits, const SamplingParams& params,
                      const PenaltyState& penalties, uint64_t counter, int32_t draft,
                      std::span<const float> draft_probs, bool& accepted, int num_top_logprobs = 0,
                      bool want_logprob = false);

  // The distribution Sample draws from, normalised, into `probs` (a one-hot argmax for greedy
  // parameters): what a draft model proposes from. `logits` is modified (penalties).
  void Distribution(std::span<float> logits, const SamplingParams& params,
                    const PenaltyState& penalties, std::vector<float>& probs);

 private:
  // probs_ and chunk_sums_ for logits after penalties: exp((l - max) / T), then (with `filter`)
  // top-k, top-p and min-p zeroing the dropped; returns the kept total. Sets the logprob terms.
  double Kept(std::span<const float> logits, const SamplingParams& params, bool filter);
  // The first kept id (in id order) where the running total of probs_ passes `u`; -1 if none.
  int32_t Draw(double u) const;
  // result.logprob and result.top from the terms Kept set.
  void FillLogprobs(std::span<const float> logits, int num_top_logprobs, SampledToken& result);

  std::vector<float> probs_;
  std::vector<double> chunk_sums_;  // per 64 ids
  std::vector<int32_t> order_;
  float max_logit_ = 0.0f;
  float inv_t_ = 1.0f;
  double log_sum_ = 0.0;
};

// The first id where the running total of `probs` (normalised) passes u in [0, 1); the last
// positive one when rounding leaves u past the end; -1 when none is positive.
int32_t DrawFrom(std::span<const float> probs, double u);

// Applies step 1 (penalties) to `logits` in place.
void ApplyPenalties(std::span<float> logits, const SamplingParams& params,
                    const PenaltyState& penalties);
// Step 0 and 1: adds the request's logit bias to `logits`, then applies its penalties.
void Adjust(std::span<float> logits, const SamplingParams& params, const PenaltyState& penalties);

// Argmax with ties to the lowest id.
int32_t Argmax(std::span<const float> logits);

// `token`'s log-probability under the raw distribution softmax(logits) (no temperature,
// penalty or bias: a prompt token's, EngineRequest::prompt_logprobs), and the `num_top` most
// likely ids, most likely first (ties to the lowest id; NaN and -inf never listed, nor counted
// in the normalisation), and `token`'s rank in that order (0 for a token not listable). A row
// with nothing finite gives every logprob -inf.
SampledToken RawLogprobs(std::span<const float> logits, int32_t token, int num_top);

}  // namespace llm::sampling

#endif  // LLM_WORKER_SAMPLING_SAMPLER_H_
