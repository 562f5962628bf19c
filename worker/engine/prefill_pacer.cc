#include "worker/engine/prefill_pacer.h"

#include <algorithm>
#include <bit>

namespace llm::engine {
namespace {
constexpr size_t kGroups = 20;  // 1 .. 512k decode tokens
}  // namespace

PrefillPacer::PrefillPacer(double ratio) : ratio_(ratio), groups_(kGroups) {}

size_t PrefillPacer::GroupOf(int32_t decode_tokens) {
  const auto n = static_cast<uint32_t>(std::max(decode_tokens, 1));
  return std::min(kGroups - 1, static_cast<size_t>(std::bit_width(n)) - 1);
}

double PrefillPacer::decode_seconds(int32_t decode_tokens) const {
  return groups_[GroupOf(decode_tokens)].seconds;
}

bool PrefillPacer::Allow(int32_t decode_tokens) const {
  if (!enabled() || decode_tokens <= 0) return true;
  const Group& g = groups_[GroupOf(decode_tokens)];
  if (g.seconds == 0.0) return true;  // a backend that reports no time: nothing would be earned
  if (unpriced_ > 0) return false;    // a chunk's cost is not known yet: wait for its measure
  // Unmeasured: a decode-only step measures it (Probe); meanwhile what is owed is owed.
  if (g.seconds < 0.0) return g.in_flight > 0 && credit_ >= 0.0;
  return credit_ + (ratio_ - 1.0) * g.seconds >= 0.0;  // what this step earns counts
}

bool PrefillPacer::Probe(int32_t decode_tokens) const {
  if (!enabled() || decode_tokens <= 0) return false;
  const Group& g = groups_[GroupOf(decode_tokens)];
  return g.seconds < 0.0 && g.in_flight == 0;
}

void PrefillPacer::Planned(uint64_t step_id, int32_t decode_tokens, int32_t prompt_tokens,
                           int32_t paced_tokens) {
  if (!enabled()) return;
  Step step{step_id, decode_tokens, prompt_tokens, paced_tokens, 0.0, false};
  if (decode_tokens <= 0) {
    credit_ = 0.0;  // nobody decodes: no stall to weigh
  } else {
    Group& g = groups_[GroupOf(decode_tokens)];
    if (prompt_tokens == 0) ++g.in_flight;
    const double earned = g.seconds >= 0.0 ? (ratio_ - 1.0) * g.seconds : 0.0;
    step.charged = paced_tokens * per_token_;
    step.unpriced = paced_tokens > 0 && per_token_ == 0.0;
    unpriced_ += step.unpriced;
    credit_ = std::min(0.0, credit_ + earned - step.charged);
  }
  planned_.push_back(step);
}

void PrefillPacer::Observe(uint64_t step_id, double seconds) {
  while (!planned_.empty() && planned_.front().id < step_id) {
    const Step& lost = planned_.front();  // its result never came
    if (lost.unpriced) --unpriced_;
    if (lost.decode_tokens > 0 && lost.prompt_tokens == 0) {
      --groups_[GroupOf(lost.decode_tokens)].in_flight;
    }
    planned_.pop_front();
  }
  if (planned_.empty() || planned_.front().id != step_id) return;
  const Step step = planned_.front();
  planned_.pop_front();
  if (step.unpriced) --unpriced_;
  if (step.decode_tokens <= 0) return;
  Group& g = groups_[GroupOf(step.decode_tokens)];
  if (step.prompt_tokens == 0) {
    --g.in_flight;
    // A backend that reports no time is measured as free: nothing is paced.
    seconds = std::max(seconds, 0.0);
    g.seconds = g.seconds < 0.0 ? seconds : (1 - kAlpha) * g.seconds + kAlpha * seconds;
    return;
  }
  if (g.seconds < 0.0 || seconds <= 0.0) return;
  // What the prompt tokens added to the step; the paced ones' share is their true charge.
  const double extra = std::max(0.0, seconds - g.seconds);
  const double rate = extra / step.prompt_tokens;
  per_token_ = per_token_ == 0.0 ? rate : (1 - kAlpha) * per_token_ + kAlpha * rate;
  credit_ = std::min(0.0, credit_ + step.charged - step.paced_tokens * rate);
}

}  // namespace llm::engine
