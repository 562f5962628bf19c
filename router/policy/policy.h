// Routing policy: which worker a new request goes to, from a snapshot of what the router knows
// about each worker. Pure logic (values in, a choice out): no clock, no network, no threads, so
// it is unit-tested with hand-made tables.
//
// A worker is a candidate when it is healthy (its WatchLoad stream is up), not ejected after
// consecutive failures, not draining, and not saturated. Its load report may be fresh or stale
// (older than the staleness bound, or none yet): a stale report counts as unknown load, never as
// idle, so a worker with unknown load is chosen only when no candidate has a fresh report.
#ifndef LLM_ROUTER_POLICY_POLICY_H_
#define LLM_ROUTER_POLICY_POLICY_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/policy/prefix_index.h"

namespace llm::router {

// What a worker last reported (llm.v1.LoadReport), as the policy needs it.
struct WorkerLoadReport {
  int32_t queued_requests = 0;
  int64_t queued_prompt_tokens = 0;
  int32_t running_requests = 0;
  int32_t free_slots = 0;
  int32_t max_slots = 0;
  double step_time_ewma_ms = 0.0;
  double prefill_ms_per_token = 0.0;  // measured by the worker; 0: not yet
  double busy_ratio = 0.0;
  bool draining = false;
  std::string model;  // the served model's name (the HTTP front's /v1/models and `model`)
  std::vector<std::string> served_names;  // its aliases
  uint32_t max_context_tokens = 0;        // prompt + max_tokens it accepts; 0: not reported

  // Whether a request naming `name` may come here.
  bool Serves(std::string_view name) const {
    return name == model ||
           std::find(served_names.begin(), served_names.end(), name) != served_names.end();
  }
};

struct WorkerView {
  std::string id;                   // the worker's address
  bool healthy = false;             // WatchLoad stream up (connected)
  bool ejected = false;             // in a back-off period after consecutive failures
  bool fresh = false;               // `report` is recent enough to trust
  WorkerLoadReport report;          // meaningful when fresh
  int32_t in_flight = 0;            // this router's open streams to the worker
  int32_t picked_since_report = 0;  // picks after the report was made (it cannot show them)
};

struct PolicyOptions {
  // A worker with at least this many requests waiting per slot (queued + picked since its
  // report, over max_slots) and no free slot is saturated.
  double saturation_queue_per_slot = 4.0;
  // Estimated decode steps a request holds its slot for (the wait for a slot to free up).
  double decode_steps_per_request = 256.0;
  // Prompt tokens a worker prefills per step, for a worker that has not reported its measured
  // cost of a prompt token yet (WorkerLoadReport::prefill_ms_per_token).
  double prefill_tokens_per_step = 512.0;
  // Step time assumed when a worker has not reported one yet.
  double default_step_ms = 1.0;
  // cache_aware: the longest match is passed over (for the least loaded candidate) when its
  // worker's load (RequestLoad) exceeds balance_factor times the least loaded candidate's plus
  // balance_margin, so a hot prefix spreads to other workers instead of crowding one.
  double balance_factor = 2.0;
  double balance_margin = 4.0;
};

// The estimated time (ms) before a new request on `w` starts being computed: the wait for a
// slot (requests ahead of it beyond the free slots, each holding a slot for
// decode_steps_per_request steps shared over max_slots) and the rest of the step in progress
// (busy_ratio of a step), in units of the worker's step time, plus the prefill of the prompts
// queued ahead (PrefillMsPerToken each). Needs a fresh report.
double EstimateWaitMs(const WorkerView& w, const PolicyOptions& options);

// What one prompt token costs on `w` (ms): its measured figure when reported, else its step time
// over prefill_tokens_per_step.
double PrefillMsPerToken(const WorkerView& w, const PolicyOptions& options);

// The requests `w` is working on or about to: running + queued + picked since its report (from a
// fresh report), and never fewer than this router's streams to it.
double RequestLoad(const WorkerView& w);

// True when `w` cannot take a request now: not healthy, ejected, draining, or saturated.
bool Excluded(const WorkerView& w, const PolicyOptions& options);
bool Saturated(const WorkerView& w, const PolicyOptions& options);

// The outcome of a pick: the index of the chosen worker in the snapshot, or an error:
// UNAVAILABLE when no worker is healthy (or none is known, or every healthy one was tried),
// RESOURCE_EXHAUSTED when every healthy worker is saturated or draining. Ejected workers are
// picked only when no other healthy worker is left to try (ejection steers traffic away; it
// never makes an outage).
using PickResult = absl::StatusOr<size_t>;

// A routing policy. Pick may be called from many threads at once.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // `random` is a uniformly distributed 64-bit number the caller draws per pick (so tests can
  // fix it). Workers whose index is in `exclude` (already tried for this request) are skipped.
  virtual PickResult Pick(const std::vector<WorkerView>& workers,
                          const std::vector<size_t>& exclude, uint64_t random) const = 0;
  // With the request's prompt prefix (PrefixIndex::Chain; empty when unknown). Policies that
  // ignore prefixes pick as Pick does.
  virtual PickResult PickFor(const std::vector<WorkerView>& workers,
                             const std::vector<size_t>& exclude, uint64_t random,
                             std::span<const uint64_t> prefix) const {
    (void)prefix;
    return Pick(workers, exclude, random);
  }
};

// Power of two choices: two distinct candidates drawn at random; the one with the lower
// estimated wait wins (a fresh report always beats an unknown one); ties go to the one with
// fewer of this router's streams in flight.
class PowerOfTwoChoices : public Policy {
 public:
  explicit PowerOfTwoChoices(PolicyOptions options = {}) : options_(options) {}
  std::string name() const override { return "p2c"; }
  PickResult Pick(const std::vector<WorkerView>& workers, const std::vector<size_t>& exclude,
                  uint64_t random) const override;

 private:
  PolicyOptions options_;
};

// The candidate with the fewest of this router's streams in flight (ties to the lower wait):
// a baseline, and a fallback when load reports are not trusted.
class LeastInFlight : public Policy {
 public:
  explicit LeastInFlight(PolicyOptions options = {}) : options_(options) {}
  std::string name() const override { return "least_in_flight"; }
  PickResult Pick(const std::vector<WorkerView>& workers, const std::vector<size_t>& exclude,
                  uint64_t random) const override;

 private:
  PolicyOptions options_;
};

// Cache-aware: the worker believed to hold the longest part of the request's prompt prefix
// (PrefixIndex, fed by this policy's own picks), unless its estimated wait exceeds the power of
// two choices' pick by more than the prefill time the hit would save (the matched bytes at
// about 4 bytes per token, at the worker's PrefillMsPerToken); or, when its load is out of
// balance (PolicyOptions::balance_factor), the least loaded candidate. With no match, the power
// of two choices' pick. A hot prefix therefore spills to other workers as its worker's queue or
// load grows (and, recorded there, is then shared between them), and a new prefix goes where
// p2c sends it.
class CacheAware : public Policy {
 public:
  explicit CacheAware(PolicyOptions options = {}) : options_(options), p2c_(options) {}
  std::string name() const override { return "cache_aware"; }
  PickResult Pick(const std::vector<WorkerView>& workers, const std::vector<size_t>& exclude,
                  uint64_t random) const override {
    return p2c_.Pick(workers, exclude, random);
  }
  PickResult PickFor(const std::vector<WorkerView>& workers, const std::vector<size_t>& exclude,
                     uint64_t random, std::span<const uint64_t> prefix) const override;
  const PrefixIndex& index() const { return index_; }

 private:
  PolicyOptions options_;
  PowerOfTwoChoices p2c_;
  mutable PrefixIndex index_;
};

// "p2c", "least_in_flight" or "cache_aware"; INVALID_ARGUMENT naming policy.name otherwise.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const std::string& name,
                                                   const PolicyOptions& options);

}  // namespace llm::router

#endif  // LLM_ROUTER_POLICY_POLICY_H_
