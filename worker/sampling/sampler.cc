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

// A logit that can be listed or normalised: neither NaN nor -inf.
bool Listable(float logit) { return logit >= -std::numeric_limits<float>::max(); }

// The `k` best listable ids of `logits` in (value, lowest id) order, as the GPU sampler lists
// them, into `order` (scratch; fewer where fewer are listable).
void BestIds(std::span<const float> logits, int k, std::vector<int32_t>& order) {
  order.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    if (Listable(logits[i])) order.push_back(i);
  }
  const auto best = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(best), order.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  order.resize(best);
}

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

void Adjust(std::span<float> logits, const SamplingParams& p, const PenaltyState& st) {
  const auto n = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < n) logits[id] += bias;
  }
  if (p.has_penalties()) ApplyPenalties(logits, p, st);
}

int32_t Argmax(std::span<const float> logits) {
  const auto n = static_cast<int32_t>(logits.size());
  const float m = MaxOf(logits.data(), n);
  for (int32_t i = 0; i < n; ++i) {
    if (logits[i] == m) return i;
  }
  return 0;  // empty, or all NaN
}

SampledToken RawLogprobs(std::span<const float> logits, int32_t token, int num_top) {
  const auto n = static_cast<int32_t>(logits.size());
  const bool known = token >= 0 && token < n && Listable(logits[token]);
  float max = -std::numeric_limits<float>::infinity();
  for (const float l : logits) {
    if (Listable(l)) max = std::max(max, l);
  }
  // One pass for the normaliser and the token's rank (ids before it: higher, or tied and lower).
  double sum = 0.0;
  int32_t rank = known ? 1 : 0;
  for (int32_t i = 0; i < n; ++i) {
    if (!Listable(logits[i])) continue;
    sum += std::exp(static_cast<double>(logits[i]) - max);
    if (known && (logits[i] > logits[token] || (logits[i] == logits[token] && i < token))) ++rank;
  }
  const double log_norm = static_cast<double>(max) + std::log(sum);
  const auto logprob_of = [&](int32_t i) {
    if (i < 0 || i >= n || !Listable(logits[i]) || sum <= 0.0) {
      return -std::numeric_limits<float>::infinity();
    }
    return static_cast<float>(static_cast<double>(logits[i]) - log_norm);
  };
  SampledToken result{token, logprob_of(token), {}};
  result.rank = rank;
  if (num_top <= 0) return result;
  std::vector<int32_t> order;
  BestIds(logits, num_top, order);
  for (const int32_t id : order) result.top.push_back({id, logprob_of(id)});
  return result;
}

double Sampler::Kept(std::span<const float> logits, const SamplingParams& p, bool filter) {
  const auto n = static_cast<int32_t>(logits.size());
  inv_t_ = InverseTemperature(p.temperature);
  const int32_t num_chunks = (n + kChunk - 1) / kChunk;

  // Probabilities of logits / temperature (unnormalised: the most likely token has 1) and
  // their sums per chunk of ids; their total is the softmax denominator logprobs report.
  max_logit_ = MaxOf(logits.data(), n);
  probs_.resize(n);
  chunk_sums_.resize(num_chunks);
  ExpChunks(logits.data(), max_logit_, inv_t_, probs_.data(), n, chunk_sums_.data());
  double sum = 0.0;
  for (double c : chunk_sums_) sum += c;
  log_sum_ = std::log(sum);
  if (!filter) return sum;

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
  if (!filtered) return sum;
  ChunkSums(probs_.data(), n, chunk_sums_.data());
  double total = 0.0;
  for (double c : chunk_sums_) total += c;
  return total;
}

int32_t Sampler::Draw(double u) const {
  // The chunk where the running total of chunk sums passes u, then the first kept id inside it
  // where the running total does. Rounding can leave u past a chunk's own running total (the
  // chunk's last kept id absorbs it) or past the end (the last kept id).
  const auto n = static_cast<int32_t>(probs_.size());
  const auto num_chunks = static_cast<int32_t>(chunk_sums_.size());
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
  return chosen;
}

void Sampler::FillLogprobs(std::span<const float> logits, int num_top_logprobs,
                           SampledToken& result) {
  auto logprob_of = [&](int32_t id) {
    return static_cast<float>((logits[id] - max_logit_) * inv_t_ - log_sum_);
  };
  result.logprob = logprob_of(result.token_id);
  if (num_top_logprobs <= 0) return;
  // NaN and -inf are never listed: their logprob means nothing, and JSON cannot carry -inf. So
  // a row with fewer listable logits than asked lists fewer (and the order stays strict).
  BestIds(logits, num_top_logprobs, order_);
  for (const int32_t id : order_) result.top.push_back({id, logprob_of(id)});
}

SampledToken Sampler::Sample(std::span<float> logits, const SamplingParams& p,
                             const PenaltyState& penalties, uint64_t counter, int num_top_logprobs,
                             bool want_logprob) {
  SampledToken result{0, 0.0f, {}};
  if (logits.empty()) return result;
  Adjust(logits, p, penalties);

  const bool need_logprobs = want_logprob || num_top_logprobs > 0;
  if (p.greedy() && !need_logprobs) {
    result.token_id = Argmax(logits);
    return result;
  }
  const double total = Kept(logits, p, !p.greedy());
  if (p.greedy()) {
    result.token_id = Argmax(logits);
  } else {
    const int32_t chosen = Draw(UniformDouble(p.seed, counter) * total);
    result.token_id = chosen >= 0 ? chosen : Argmax(logits);
  }
  if (need_logprobs) FillLogprobs(logits, num_top_logprobs, result);
  return result;
}

void Sampler::Distribution(std::span<float> logits, const SamplingParams& p,
                           const PenaltyState& penalties, std::vector<float>& probs) {
  const auto n = static_cast<int32_t>(logits.size());
  probs.assign(static_cast<size_t>(n), 0.0f);
  if (n == 0) return;
  Adjust(logits, p, penalties);
  if (p.greedy()) {
    probs[static_cast<size_t>(Argmax(logits))] = 1.0f;
    return;
  }
  const double total = Kept(logits, p, true);
  if (!(total > 0.0)) {
    probs[static_cast<size_t>(Argmax(logits))] = 1.0f;
    return;
  }
  for (int32_t i = 0; i < n; ++i) probs[i] = static_cast<float>(probs_[i] / total);
}

SampledToken Sampler::Verify(std::span<float> logits, const SamplingParams& p,
                             const PenaltyState& penalties, uint64_t counter, int32_t draft,
                             std::span<const float> draft_probs, bool& accepted,
                             int num_top_logprobs, bool want_logprob) {
  if (p.greedy()) {
    // The token Sample gives; the proposal stands when it is that token.
    SampledToken t = Sample(logits, p, penalties, counter, num_top_logprobs, want_logprob);
    accepted = t.token_id == draft;
    return t;
  }
  SampledToken result{0, 0.0f, {}};
  accepted = false;
  const auto n = static_cast<int32_t>(logits.size());
  if (n == 0) return result;
  Adjust(logits, p, penalties);
  const double total = Kept(logits, p, true);
  const bool in_vocab = draft >= 0 && draft < n;
  const double p_draft = in_vocab && total > 0.0 ? probs_[draft] / total : 0.0;
  const double q_draft = draft_probs.empty() ? 1.0 : in_vocab ? draft_probs[draft] : 0.0;
  // Accept with probability min(1, p/q): u < p/q, written without the division.
  if (p_draft > 0.0 && UniformDouble(p.seed, counter, kAcceptStream) * q_draft < p_draft) {
    accepted = true;
    result.token_id = draft;
  } else {
    // The residual max(0, p - q), normalised; for a point mass: p without the proposal.
    for (int32_t i = 0; i < n; ++i) {
      const double pi = total > 0.0 ? probs_[i] / total : 0.0;
      const double qi = draft_probs.empty() ? (i == draft ? 1.0 : 0.0) : draft_probs[i];
      probs_[i] = static_cast<float>(std::max(0.0, pi - qi));
    }
    ChunkSums(probs_.data(), n, chunk_sums_.data());
    double residual_total = 0.0;
    for (double c : chunk_sums_) residual_total += c;
    const int32_t chosen =
        residual_total > 0.0 ? Draw(UniformDouble(p.seed, counter) * residual_total) : -1;
    result.token_id = chosen >= 0 ? chosen : Argmax(logits);
  }
  if (want_logprob || num_top_logprobs > 0) FillLogprobs(logits, num_top_logprobs, result);
  return result;
}

int32_t DrawFrom(std::span<const float> probs, double u) {
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    last = static_cast<int32_t>(i);
    cum += probs[i];
    if (cum > u) return last;
  }
  return last;
}

}  // namespace llm::sampling
