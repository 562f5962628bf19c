// Drives an in-process loop::Worker for the benchmarks that measure a backend (llm-bench gpu,
// llm-bench prefill): records what the engine loop reports per step and per request, submits
// batches of synthetic requests, and measures time to first token and the decode stall a long
// prompt causes. Requests take the path a served request takes, minus gRPC.
#ifndef LLM_TOOLS_BENCH_WORKER_DRIVER_H_
#define LLM_TOOLS_BENCH_WORKER_DRIVER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/loop/worker.h"

namespace llm::bench {

using Clock = std::chrono::steady_clock;

// The p-quantile (0..1) of `v`, -1 when empty.
double Percentile(std::vector<double> v, double p);

// What the engine loop reports per step, with the time it was collected.
struct StepRecord {
  double step_s, gap_s;
  int32_t tokens, decodes, prompt_tokens;
  Clock::time_point at;
};

class Countdown;

class Recorder : public loop::StepObserver, public loop::RequestObserver {
 public:
  void OnStep(double step_s, double gap_s, int32_t tokens, int32_t decodes,
              int32_t prompt_tokens) override;
  void OnRequestFinished(const loop::RequestStats& s) override;
  void OnRequestCancelled() override {}
  // Blocks until a step has decoded at least `n` sequences since the last TakeSteps (true), or
  // until `requests` has none left in flight (false).
  bool WaitForDecodes(int32_t n, const Countdown& requests);
  // Take what was recorded so far.
  std::vector<StepRecord> TakeSteps();
  std::vector<loop::RequestStats> TakeRequests();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StepRecord> steps_;
  int32_t max_decodes_ = 0;
  std::vector<loop::RequestStats> requests_;
};

// Counts finished streams.
class Countdown {
 public:
  void Add(int n);
  void Done(const absl::Status& st);
  int pending() const;
  // Blocks until every added stream finished; the first error, if any.
  absl::Status Wait();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  absl::Status error_;
};

// Submits `n` requests of `prompt_tokens` random ids in [256, id_range) and `max_tokens` outputs
// (EOS ignored; greedy at temperature 0, else drawn with seeds seed, seed + 1, ...); `done`
// counts them down as they finish. When a Submit fails, waits for the ones already submitted,
// then returns its error.
absl::Status SubmitRequests(loop::Worker& worker, int n, int32_t prompt_tokens, int32_t max_tokens,
                            int32_t id_range, uint64_t seed, Countdown& done,
                            float temperature = 0.0f);
// Runs `n` such requests to completion.
absl::Status RunRequests(loop::Worker& worker, int n, int32_t prompt_tokens, int32_t max_tokens,
                         int32_t id_range, uint64_t seed, float temperature = 0.0f);

// Time to first token of one request on an idle worker, per prompt length (median of `runs`);
// lengths at or past `max_context` are reported as skipped. A JSON array.
absl::StatusOr<nlohmann::json> MeasureTtft(loop::Worker& worker, Recorder& recorder,
                                           const std::vector<int32_t>& prompts, int64_t runs,
                                           int32_t max_context, int32_t id_range);

// The stall: `decodes` requests decode while one request's `long_prompt`-token prompt prefills
// in chunks of the scheduler's max_prefill_tokens. Reports, over the steps in which every
// decoding request decodes, the device time of those that also carry the long prompt (each is
// one token of every decoding request; `prefill_steps` of them) and of those that decode only,
// the decoding requests' mean time per token from the prompt's first chunk to its last (paced
// steps without a chunk included), and the long prompt's TTFT under that load. `slowdown`: the
// worker's max_decode_slowdown (0: off), so that the decoders outlast a paced prefill.
absl::StatusOr<nlohmann::json> MeasureStall(loop::Worker& worker, Recorder& recorder,
                                            int32_t decodes, int32_t long_prompt,
                                            int32_t max_prefill_tokens, double slowdown,
                                            int32_t id_range);

// Speculative decoding's policy as the worker reports it (SchedulerStats::speculation_by_batch):
// the proposals per slot it settled on per group of batch sizes, {"1": 4, "8-15": 0, ...},
// groups still measuring left out; and its choice for steps of `decoding` slots, the number or
// "measuring".
nlohmann::json SpeculationByBatch(const engine::SchedulerStats& stats);
nlohmann::json SpeculationAt(const engine::SchedulerStats& stats, int32_t decoding);

}  // namespace llm::bench

#endif  // LLM_TOOLS_BENCH_WORKER_DRIVER_H_
