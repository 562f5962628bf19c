#include "router/policy/policy.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/retry_after.h"

namespace llm::router {

namespace {

constexpr double kUnknownWait = std::numeric_limits<double>::infinity();

// Draining, or saturated by its last report.
bool Busy(const WorkerView& w, const PolicyOptions& o) {
  return (w.fresh && w.report.draining) || Saturated(w, o);
}

// Why there is no candidate.
struct NoneReason {
  bool any_healthy = false;             // some untried worker could have served but was busy
  double least_wait_ms = kUnknownWait;  // the shortest estimated wait among those
  bool tried_healthy = false;           // some healthy worker was tried already
};

// Candidates (healthy, not busy, not tried) in snapshot order, leaving out ejected workers
// unless no other healthy worker is left to try: ejection steers traffic away from a failing
// worker, it must not turn a burst of errors into an outage (Envoy's panic mode). Busy
// (saturated, draining) workers that are not ejected still count: overload is answered
// RESOURCE_EXHAUSTED, not sent to a worker that was failing. When there is none, `why` says
// why.
std::vector<size_t> Candidates(const std::vector<WorkerView>& workers,
                               const std::vector<size_t>& exclude, const PolicyOptions& options,
                               NoneReason* why) {
  std::vector<size_t> out;
  *why = NoneReason{};
  for (const bool allow_ejected : {false, true}) {
    for (size_t i = 0; i < workers.size(); ++i) {
      const WorkerView& w = workers[i];
      if (!w.healthy || (w.ejected && !allow_ejected)) continue;
      if (std::find(exclude.begin(), exclude.end(), i) != exclude.end()) {
        why->tried_healthy = true;
        continue;
      }
      why->any_healthy = true;
      if (Busy(w, options)) {
        if (w.fresh && !w.report.draining) {
          why->least_wait_ms = std::min(why->least_wait_ms, EstimateWaitMs(w, options));
        }
        continue;
      }
      out.push_back(i);
    }
    if (!out.empty() || why->any_healthy) break;
  }
  return out;
}

absl::Status NoCandidate(const NoneReason& why) {
  if (why.any_healthy) {
    absl::Status st =
        absl::ResourceExhaustedError("every worker is saturated or draining; try again later");
    // Retry when the least loaded worker should have room (a second when none says).
    SetRetryAfterMs(
        st, why.least_wait_ms < kUnknownWait ? static_cast<int64_t>(why.least_wait_ms) : 1000);
    return st;
  }
  if (why.tried_healthy) {
    return absl::UnavailableError("every healthy worker has been tried for this request");
  }
  return absl::UnavailableError("no healthy worker to serve the request");
}

double Wait(const WorkerView& w, const PolicyOptions& o) {
  return w.fresh ? EstimateWaitMs(w, o) : kUnknownWait;
}

// True when a is the better choice than b.
bool Better(const WorkerView& a, const WorkerView& b, const PolicyOptions& o) {
  const double wa = Wait(a, o), wb = Wait(b, o);
  if (wa != wb) return wa < wb;
  return a.in_flight < b.in_flight;
}

}  // namespace

double PrefillMsPerToken(const WorkerView& w, const PolicyOptions& o) {
  const WorkerLoadReport& r = w.report;
  if (w.fresh && r.prefill_ms_per_token > 0) return r.prefill_ms_per_token;
  const double step_ms =
      w.fresh && r.step_time_ewma_ms > 0 ? r.step_time_ewma_ms : o.default_step_ms;
  return step_ms / std::max(1.0, o.prefill_tokens_per_step);
}

double EstimateWaitMs(const WorkerView& w, const PolicyOptions& o) {
  const WorkerLoadReport& r = w.report;
  const double step_ms = r.step_time_ewma_ms > 0 ? r.step_time_ewma_ms : o.default_step_ms;
  const double slots = std::max(1, r.max_slots);
  // Requests ahead of this one for a slot beyond the free ones.
  const double ahead = std::max(
      0.0, static_cast<double>(r.queued_requests) + w.picked_since_report - r.free_slots + 1);
  const double slot_wait_steps = ahead * o.decode_steps_per_request / slots;
  return (slot_wait_steps + std::clamp(r.busy_ratio, 0.0, 1.0)) * step_ms +
         static_cast<double>(r.queued_prompt_tokens) * PrefillMsPerToken(w, o);
}

double RequestLoad(const WorkerView& w) {
  double load = w.in_flight;
  if (w.fresh) {
    const WorkerLoadReport& r = w.report;
    load = std::max(
        load, static_cast<double>(r.running_requests) + r.queued_requests + w.picked_since_report);
  }
  return load;
}

bool Saturated(const WorkerView& w, const PolicyOptions& o) {
  if (!w.fresh) return false;  // unknown, not full
  const WorkerLoadReport& r = w.report;
  const int64_t waiting = int64_t{r.queued_requests} + w.picked_since_report;
  return r.free_slots - w.picked_since_report <= 0 &&
         static_cast<double>(waiting) >= o.saturation_queue_per_slot * std::max(1, r.max_slots);
}

bool Excluded(const WorkerView& w, const PolicyOptions& o) {
  return !w.healthy || w.ejected || Busy(w, o);
}

PickResult PowerOfTwoChoices::Pick(const std::vector<WorkerView>& workers,
                                   const std::vector<size_t>& exclude, uint64_t random) const {
  NoneReason why;
  const std::vector<size_t> c = Candidates(workers, exclude, options_, &why);
  if (c.empty()) return NoCandidate(why);
  if (c.size() == 1) return c[0];
  // Two distinct candidates from one random number.
  const size_t n = c.size();
  const size_t first = static_cast<size_t>(random % n);
  const size_t second = (first + 1 + static_cast<size_t>((random / n) % (n - 1))) % n;
  const WorkerView& a = workers[c[first]];
  const WorkerView& b = workers[c[second]];
  return Better(b, a, options_) ? c[second] : c[first];
}

PickResult LeastInFlight::Pick(const std::vector<WorkerView>& workers,
                               const std::vector<size_t>& exclude, uint64_t random) const {
  NoneReason why;
  const std::vector<size_t> c = Candidates(workers, exclude, options_, &why);
  if (c.empty()) return NoCandidate(why);
  // Start the scan at a random candidate, so ties spread.
  const size_t start = static_cast<size_t>(random % c.size());
  size_t best = c[start];
  for (size_t k = 1; k < c.size(); ++k) {
    const size_t i = c[(start + k) % c.size()];
    const WorkerView& w = workers[i];
    const WorkerView& b = workers[best];
    if (w.in_flight < b.in_flight ||
        (w.in_flight == b.in_flight && Wait(w, options_) < Wait(b, options_))) {
      best = i;
    }
  }
  return best;
}

PickResult CacheAware::PickFor(const std::vector<WorkerView>& workers,
                               const std::vector<size_t>& exclude, uint64_t random,
                               std::span<const uint64_t> prefix) const {
  PickResult base = p2c_.Pick(workers, exclude, random);
  if (!base.ok() || prefix.empty()) {
    if (base.ok()) index_.Record(workers[*base].id, prefix);
    return base;
  }
  NoneReason why;
  const std::vector<size_t> c = Candidates(workers, exclude, options_, &why);
  size_t best = *base;
  size_t best_match = index_.Match(workers[best].id, prefix);
  for (const size_t i : c) {
    const size_t m = index_.Match(workers[i].id, prefix);
    if (m > best_match ||
        (m == best_match && m > 0 && Better(workers[i], workers[best], options_))) {
      best = i;
      best_match = m;
    }
  }
  size_t chosen = *base;
  if (best_match > 0) {
    // Out of balance: the least loaded candidate, whatever it holds.
    size_t least = best;
    double least_load = RequestLoad(workers[best]);
    for (const size_t i : c) {
      const double load = RequestLoad(workers[i]);
      if (load < least_load ||
          (load == least_load && Better(workers[i], workers[least], options_))) {
        least = i;
        least_load = load;
      }
    }
    if (RequestLoad(workers[best]) >
        options_.balance_factor * least_load + options_.balance_margin) {
      chosen = least;
    } else if (best != *base) {
      // Prefill time the match saves on each, about 4 bytes per token.
      const auto saved_ms = [&](const WorkerView& w, size_t chunks) {
        return static_cast<double>(chunks * PrefixIndex::kChunkBytes) / 4.0 *
               PrefillMsPerToken(w, options_);
      };
      const WorkerView& w = workers[best];
      const WorkerView& b = workers[*base];
      if (Wait(w, options_) - Wait(b, options_) <=
          saved_ms(w, best_match) - saved_ms(b, index_.Match(b.id, prefix))) {
        chosen = best;
      }
    }
  }
  index_.Record(workers[chosen].id, prefix);
  return chosen;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const std::string& name,
                                                   const PolicyOptions& options) {
  if (name == "p2c") return std::make_unique<PowerOfTwoChoices>(options);
  if (name == "least_in_flight") return std::make_unique<LeastInFlight>(options);
  if (name == "cache_aware") return std::make_unique<CacheAware>(options);
  return absl::InvalidArgumentError(
      absl::StrCat("policy.name: '", name, "' is not one of p2c, least_in_flight, cache_aware"));
}

}  // namespace llm::router
