#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common/cpu_features.h"
#include "common/fast_exp.h"
#include "common/lane_sum.h"
#include "common/logit_arithmetic.h"
#include "common/philox.h"

namespace llm::sampling {
namespace {

// Partial sums of the probabilities cover kChunk consecutive ids each; the draw finds its chunk
// from these and scans only inside it.
constexpr int32_t kChunk = 64;

float MaxPortable(const float* x, int32_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;  // NaN never wins
  return m;
}

void ChunkSumsPortable(const float* probs, int32_t n, double* chunk_sums) {
  for (int32_t c = 0; c * kChunk < n; ++c) {
    chunk_sums[c] =
        LaneSum(probs + c * kChunk, static_cast<size_t>(std::min(kChunk, n - c * kChunk)));
  }
}

void ExpChunksPortable(const float* logits, float max_logit, float inv_t, float* probs, int32_t n,
                       double* chunk_sums) {
  for (int32_t i = 0; i < n; ++i) probs[i] = FastExp((logits[i] - max_logit) * inv_t);
  ChunkSumsPortable(probs, n, chunk_sums);
}

#if defined(__x86_64__) || defined(__i386__)
#define LLM_AVX2 __attribute__((target("avx2,fma")))

// Lanes past n read as 0 (adding +0 to a sum of non-negative terms changes nothing).
LLM_AVX2 __m256 LoadUpTo8(const float* x, int32_t n, float fill) {
  if (n >= 8) return _mm256_loadu_ps(x);
  alignas(32) float buf[8];
  for (int32_t i = 0; i < 8; ++i) buf[i] = i < n ? x[i] : fill;
  return _mm256_load_ps(buf);
}

LLM_AVX2 float LaneTree8(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return LaneTree(l);
}

LLM_AVX2 float MaxAvx2(const float* x, int32_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  __m256 m = _mm256_set1_ps(neg_inf);
  for (int32_t i = 0; i < n; i += 8) m = _mm256_max_ps(LoadUpTo8(x + i, n - i, neg_inf), m);
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  return MaxPortable(l, 8);
}

LLM_AVX2 void ChunkSumsAvx2(const float* probs, int32_t n, double* chunk_sums) {
  for (int32_t c = 0; c * kChunk < n; ++c) {
    const int32_t end = std::min(n, (c + 1) * kChunk);
    __m256 acc = _mm256_setzero_ps();
    for (int32_t i = c * kChunk; i < end; i += 8) {
      acc = _mm256_add_ps(acc, LoadUpTo8(probs + i, end - i, 0.0f));
    }
    chunk_sums[c] = LaneTree8(acc);
  }
}

LLM_AVX2 void ExpChunksAvx2(const float* logits, float max_logit, float inv_t, float* probs,
                            int32_t n, double* chunk_sums) {
  const __m256 m = _mm256_set1_ps(max_logit), s = _mm256_set1_ps(inv_t);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 z = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(logits + i), m), s);
    _mm256_storeu_ps(probs + i, FastExp8(z));
  }
  for (; i < n; ++i) probs[i] = FastExp((logits[i] - max_logit) * inv_t);
  ChunkSumsAvx2(probs, n, chunk_sums);
}
#undef LLM_AVX2
#endif

// Dispatch: the vector and portable versions give the same bits.
float MaxOf(const float* x, int32_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (CpuHasAvx2Fma()) return MaxAvx2(x, n);
#endif
  return MaxPortable(x, n);
}

void ExpChunks(const float* logits, float max_logit, float inv_t, float* probs, int32_t n,
               double* chunk_sums) {
#if defined(__x86_64__) || defined(__i386__)
  if (CpuHasAvx2Fma()) return ExpChunksAvx2(logits, max_logit, inv_t, probs, n, chunk_sums);
#endif
  ExpChunksPortable(logits, max_logit, inv_t, probs, n, chunk_sums);
}

void ChunkSums(const float* probs, int32_t n, double* chunk_sums) {
#if defined(__x86_64__) || defined(__i386__)
  if (CpuHasAvx2Fma()) return ChunkSumsAvx2(probs, n, chunk_sums);
#endif
  ChunkSumsPortable(probs, n, chunk_sums);
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
      l = RepetitionPenalised(l, p.repetition_penalty);
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
  const auto n = static_cast<int32_t>(logits.size());
  const float m = MaxOf(logits.data(), n);
  for (int32_t i = 0; i < n; ++i) {
    if (logits[i] == m) return i;
  }
  return 0;  // empty, or all NaN
}

SampledToken Sampler::Sample(std::span<float> logits, const SamplingParams& p,
                             const PenaltyState& penalties, uint64_t counter, int num_top_logprobs,
                             bool want_logprob) {
  const auto n = static_cast<int32_t>(logits.size());
  SampledToken result{0, 0.0f, {}};
  if (n == 0) return result;
  if (p.has_penalties()) ApplyPenalties(logits, p, penalties);

  const bool need_logprobs = want_logprob || num_top_logprobs > 0;
  if (p.greedy() && !need_logprobs) {
    result.token_id = Argmax(logits);
    return result;
  }
  const float inv_t = InverseTemperature(p.temperature);
  const int32_t num_chunks = (n + kChunk - 1) / kChunk;

  // Probabilities of logits / temperature (unnormalised: the most likely token has 1) and
  // their sums per chunk of ids; their total is the softmax denominator logprobs report.
  const float max_logit = MaxOf(logits.data(), n);
  probs_.resize(n);
  chunk_sums_.resize(num_chunks);
  ExpChunks(logits.data(), max_logit, inv_t, probs_.data(), n, chunk_sums_.data());
  double sum = 0.0;
  for (double c : chunk_sums_) sum += c;
  const double log_sum = std::log(sum);
  auto logprob_of = [&](int32_t id) {
    return static_cast<float>((logits[id] - max_logit) * inv_t - log_sum);
  };

  if (p.greedy()) {
    result.token_id = Argmax(logits);
  } else {
    // Kept set as a mask over probs_: a dropped token gets probability 0.
    bool filtered = false;
    if (p.top_k > 0 && p.top_k < n) {
      order_.resize(n);
      std::iota(order_.begin(), order_.end(), 0);
      std::nth_element(order_.begin(), order_.begin() + p.top_k, order_.end(),
                       [&](int32_t a, int32_t b) {
                         return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
                       });
      for (int64_t i = p.top_k; i < n; ++i) probs_[order_[i]] = 0.0f;
      filtered = true;
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
      filtered = true;
    }
    if (p.min_p > 0.0f) {
      const float top = MaxOf(probs_.data(), n);
      const float threshold = p.min_p * top;
      for (float& q : probs_) {
        if (q < threshold) q = 0.0f;
      }
      filtered = true;
    }
    double total = sum;
    if (filtered) {
      ChunkSums(probs_.data(), n, chunk_sums_.data());
      total = 0.0;
      for (double c : chunk_sums_) total += c;
    }
    // The draw: the chunk where the running total of chunk sums passes u, then the first kept
    // id inside it where the running total does. Rounding can leave u past a chunk's own
    // running total (the chunk's last kept id absorbs it) or past the end (the last kept id).
    const double u = UniformDouble(p.seed, counter) * total;
    double cum = 0.0;
    int32_t chunk = -1;
    for (int32_t c = 0; c < num_chunks; ++c) {
      if (chunk_sums_[c] > 0.0 && cum + chunk_sums_[c] > u) {
        chunk = c;
        break;
      }
      cum += chunk_sums_[c];
    }
    int32_t chosen = -1;
    if (chunk >= 0) {
      const int32_t chunk_end = std::min(n, (chunk + 1) * kChunk);
      for (int32_t i = chunk * kChunk; i < chunk_end; ++i) {
        if (probs_[i] <= 0.0f) continue;
        chosen = i;
        cum += probs_[i];
        if (cum > u) break;
      }
    }
    for (int32_t i = n - 1; chosen < 0 && i >= 0; --i) {
      if (probs_[i] > 0.0f) chosen = i;
    }
    result.token_id = chosen >= 0 ? chosen : Argmax(logits);
  }

  if (need_logprobs) {
    result.logprob = logprob_of(result.token_id);
    if (num_top_logprobs > 0) {
      // The best logits in (value, lowest id) order, as the GPU sampler lists them. NaN and
      // -inf are never listed: their logprob means nothing, and JSON cannot carry -inf. So a
      // row with fewer listable logits than asked lists fewer (and the order stays strict).
      order_.clear();
      for (int32_t i = 0; i < n; ++i) {
        if (logits[i] >= -std::numeric_limits<float>::max()) order_.push_back(i);
      }
      const auto k = std::min<size_t>(static_cast<size_t>(num_top_logprobs), order_.size());
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k),
                        order_.end(), [&](int32_t a, int32_t b) {
                          return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                        });
      for (size_t i = 0; i < k; ++i) result.top.push_back({order_[i], logprob_of(order_[i])});
    }
  }
  return result;
}

}  // namespace llm::sampling
