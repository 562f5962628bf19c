#include "worker/engine/speculation_policy.h"

#include <algorithm>
#include <bit>

namespace llm::engine {
namespace {
constexpr int kGroups = 16;  // 1 .. 32k decoding slots
}  // namespace

SpeculationPolicy::SpeculationPolicy(const SpeculativeConfig& config)
    : config_(config), groups_(kGroups) {
  std::vector<Candidate> candidates{{0}};
  for (int32_t k = 1; k < config.num_tokens; k *= 2) candidates.push_back({k});
  if (config.num_tokens > 0) candidates.push_back({config.num_tokens});
  for (Group& g : groups_) g.candidates = candidates;
}

int SpeculationPolicy::GroupOf(int32_t decoding) {
  const auto n = static_cast<uint32_t>(std::max(decoding, 1));
  return std::min(kGroups - 1, static_cast<int>(std::bit_width(n)) - 1);
}

size_t SpeculationPolicy::BestIndex(const Group& g) {
  size_t best = 0;
  for (size_t i = 1; i < g.candidates.size(); ++i) {
    if (g.candidates[i].tokens_per_second > g.candidates[best].tokens_per_second) best = i;
  }
  return best;
}

int32_t SpeculationPolicy::Choose(int32_t decoding) {
  if (!config_.enabled()) return 0;
  if (!config_.adaptive) return config_.num_tokens;
  Group& g = groups_[static_cast<size_t>(GroupOf(decoding))];
  ++g.choices;
  // Try every candidate until each has its samples (the largest first: the cheap case, where
  // speculation pays, is found without a detour through the others).
  for (auto c = g.candidates.rbegin(); c != g.candidates.rend(); ++c) {
    if (c->samples < kMinSamples) return c->k;
  }
  const size_t best = BestIndex(g);
  if (g.choices % kReprobeInterval == 0 && g.candidates.size() > 1) {
    g.next_probe = (g.next_probe + 1) % g.candidates.size();
    if (g.next_probe == best) g.next_probe = (g.next_probe + 1) % g.candidates.size();
    return g.candidates[g.next_probe].k;
  }
  return g.candidates[best].k;
}

void SpeculationPolicy::Observe(int32_t decoding, int32_t k, int32_t output_tokens,
                                double seconds) {
  if (!config_.enabled() || seconds <= 0.0 || decoding <= 0) return;
  Group& g = groups_[static_cast<size_t>(GroupOf(decoding))];
  for (Candidate& c : g.candidates) {
    if (c.k != k) continue;
    const double rate = output_tokens / seconds;
    c.tokens_per_second =
        c.samples == 0 ? rate : (1 - kAlpha) * c.tokens_per_second + kAlpha * rate;
    ++c.samples;
    return;
  }
}

const std::vector<SpeculationPolicy::Candidate>& SpeculationPolicy::candidates(
    int32_t decoding) const {
  return groups_[static_cast<size_t>(GroupOf(decoding))].candidates;
}

int32_t SpeculationPolicy::best(int32_t decoding) const {
  const Group& g = groups_[static_cast<size_t>(GroupOf(decoding))];
  return g.candidates[BestIndex(g)].k;
}

}  // namespace llm::engine
