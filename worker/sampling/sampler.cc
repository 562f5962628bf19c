#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/fast_exp.h"
#include "common/philox.h"

namespace llm::sampling {
namespace {

// probs[i] = exp((logits[i] - max) * inv_temperature); returns their sum.
__attribute__((target_clones("fma", "default"))) double ExpScaled(const float* logits,
                                                                  float max_logit,
                                                                  float inv_temperature,
                                                                  float* probs, int32_t n) {
  for (int32_t i = 0; i < n; ++i) probs[i] = FastExp((logits[i] - max_logit) * inv_temperature);
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += probs[i];
  return sum;
}

}  // namespace

void PenaltyState::AddPrompt(std::span<const int32_t> ids) {
  prompt_ids_.insert(prompt_ids_.end(), ids.begin(), ids.end());
  std::sort(prompt_ids_.begin(), prompt_ids_.end());
  prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
}

void ApplyPenalties(std::span<float> logits, const SamplingParams& p, const PenaltyState& st) {
  const auto n = static_cast<int32_t>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t id) {
      if (id < 0 || id >= n) return;
      float& l = logits[id];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    // A token in both the prompt and the output is penalised once.
    for (int32_t id : st.prompt_ids()) penalise(id);
    for (const auto& [id, count] : st.output_counts()) {
      if (!std::binary_search(st.prompt_ids().begin(), st.prompt_ids().end(), id)) penalise(id);
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : st.output_counts()) {
      if (id < 0 || id >= n) continue;
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

SampleResult Sampler::Sample(std::span<float> logits, const SamplingParams& p,
                             const PenaltyState& penalties, uint64_t counter, int num_top_logprobs,
                             bool want_logprob) {
  const auto n = static_cast<int32_t>(logits.size());
  if (p.has_penalties()) ApplyPenalties(logits, p, penalties);

  SampleResult result{0, 0.0f, {}};
  const bool need_logprobs = want_logprob || num_top_logprobs > 0;
  if (p.greedy() && !need_logprobs) {
    result.token_id = Argmax(logits);
    return result;
  }
  const float temperature = p.greedy() ? 1.0f : p.temperature;

  // Log-softmax of logits / temperature: the distribution logprobs report.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  probs_.resize(n);
  const double sum = ExpScaled(logits.data(), max_logit, 1.0f / temperature, probs_.data(), n);
  const double log_sum = std::log(sum);
  auto logprob_of = [&](int32_t id) {
    return static_cast<float>((logits[id] - max_logit) * (1.0f / temperature) - log_sum);
  };

  if (p.greedy()) {
    result.token_id = Argmax(logits);
  } else {
    // Kept set as a mask over probs_: a dropped token gets probability 0.
    if (p.top_k > 0 && p.top_k < n) {
      order_.resize(n);
      std::iota(order_.begin(), order_.end(), 0);
      std::nth_element(order_.begin(), order_.begin() + p.top_k, order_.end(),
                       [&](int32_t a, int32_t b) {
                         return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
                       });
      for (int32_t i = p.top_k; i < n; ++i) probs_[order_[i]] = 0.0f;
    }
    if (p.top_p < 1.0f) {
      order_.clear();
      double kept = 0.0;
      for (int32_t i = 0; i < n; ++i) {
        if (probs_[i] > 0.0f) {
          order_.push_back(i);
          kept += probs_[i];
        }
      }
      std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
        return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
      });
      const double target = static_cast<double>(p.top_p) * kept;
      double cum = 0.0;
      size_t keep = 0;
      while (keep < order_.size() && (keep == 0 || cum < target)) cum += probs_[order_[keep++]];
      for (size_t i = keep; i < order_.size(); ++i) probs_[order_[i]] = 0.0f;
    }
    if (p.min_p > 0.0f) {
      const float top = *std::max_element(probs_.begin(), probs_.end());
      const float threshold = p.min_p * top;
      for (float& q : probs_) {
        if (q < threshold) q = 0.0f;
      }
    }
    double total = 0.0;
    for (float q : probs_) total += q;
    const double u = UniformDouble(p.seed, counter) * total;
    double cum = 0.0;
    int32_t chosen = -1;
    for (int32_t i = 0; i < n; ++i) {
      if (probs_[i] <= 0.0f) continue;
      chosen = i;  // the last kept token absorbs rounding at the top end
      cum += probs_[i];
      if (cum > u) break;
    }
    result.token_id = chosen >= 0 ? chosen : Argmax(logits);
  }

  if (need_logprobs) {
    result.logprob = logprob_of(result.token_id);
    if (num_top_logprobs > 0) {
      const int k = std::min<int32_t>(num_top_logprobs, n);
      order_.resize(n);
      std::iota(order_.begin(), order_.end(), 0);
      std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                        [&](int32_t a, int32_t b) {
                          return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                        });
      for (int i = 0; i < k; ++i) result.top.push_back({order_[i], logprob_of(order_[i])});
    }
  }
  return result;
}

}  // namespace llm::sampling
