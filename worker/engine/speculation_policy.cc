#include "worker/engine/speculation_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace llm::engine {

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

bool SpeculationPolicy::Settled(const Group& g) {
  return std::all_of(g.candidates.begin(), g.candidates.end(),
                     [](const Candidate& c) { return c.measured(); });
}

int32_t SpeculationPolicy::Choose(int32_t decoding) {
  if (!config_.enabled()) return 0;
  if (!config_.adaptive) return config_.num_tokens;
  Group& g = groups_[static_cast<size_t>(GroupOf(decoding))];
  ++g.choices;
  // Try every candidate until each has its samples (the largest first: the cheap case, where
  // speculation pays, is found without a detour through the others).
  for (auto c = g.candidates.rbegin(); c != g.candidates.rend(); ++c) {
    if (!c->measured()) return c->k;
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
    const double keep = std::pow(1.0 - 1.0 / kWindowDecodes, decoding);
    c.rate_sum = c.rate_sum * keep + output_tokens / seconds;
    c.weight = c.weight * keep + 1.0;
    c.tokens_per_second = c.rate_sum / c.weight;
    ++c.samples;
    c.decodes += decoding;
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

bool SpeculationPolicy::SettledOff(int32_t decoding) const {
  if (!config_.enabled() || !config_.adaptive || decoding <= 0) return false;
  const Group& g = groups_[static_cast<size_t>(GroupOf(decoding))];
  for (const Candidate& c : g.candidates) {
    if (!c.measured()) return false;
  }
  return g.candidates[BestIndex(g)].k == 0;
}

std::string SpeculationPolicy::GroupLabel(int g) {
  const int32_t min = GroupMin(g);
  if (g + 1 == kGroups) return std::to_string(min) + "+";
  if (g == 0) return "1";
  return std::to_string(min) + "-" + std::to_string(2 * min - 1);
}

SpeculationPolicy::Standing SpeculationPolicy::standing() const {
  Standing s;
  s.fill(static_cast<int8_t>(kMeasuring));
  if (!config_.enabled()) return s;
  if (!config_.adaptive) {
    s.fill(static_cast<int8_t>(config_.num_tokens));
  } else {
    for (size_t i = 0; i < groups_.size(); ++i) {
      const Group& g = groups_[i];
      if (Settled(g)) s[i] = static_cast<int8_t>(g.candidates[BestIndex(g)].k);
    }
  }
  return s;
}

}  // namespace llm::engine
