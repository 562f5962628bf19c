// The worker's Prometheus metrics (prometheus-cpp), served on /metrics by the HTTP exposer.
// Names keep vLLM's meanings with an `llm_` prefix (docs/operations table in README):
//   llm_num_requests_waiting / _running            gauges, read from the worker at scrape time
//   llm_kv_cache_usage_ratio                       gauge, used / total KV blocks
//   llm_time_to_first_token_seconds                histogram
//   llm_time_per_output_token_seconds              histogram (per request, after the first)
//   llm_e2e_request_latency_seconds                histogram
//   llm_request_queue_time_seconds                 histogram
//   llm_prompt_tokens_total / llm_generation_tokens_total   counters
//   llm_requests_finished_total{reason}            counter: stop, length, error
//   llm_requests_cancelled_total                   counter: client cancels and deadlines
//   llm_requests_rejected_total{code}              counter: refused before starting
//   llm_engine_step_duration_seconds               histogram of backend time per step
//   llm_engine_step_gap_seconds                    histogram of backend idle time between steps
//   llm_engine_busy_ratio                          gauge
//   llm_spec_decode_num_drafts_total               counter: decodes that verified proposals
//   llm_spec_decode_num_draft_tokens_total         counter: proposals verified
//   llm_spec_decode_num_accepted_tokens_total      counter: proposals accepted
//   llm_spec_decode_acceptance_length              histogram: tokens a verifying decode gave
//                                                  (accepted proposals + the one sampled)
//   llm_spec_decode_policy_tokens{batch}           gauge: proposals per slot the speculation
//                                                  policy settled on for steps of `batch`
//                                                  decoding slots ("1", "2-3", "4-7", ...;
//                                                  0: off there); absent while it measures
//   llm_device_utilization_ratio, llm_device_memory_used_bytes, llm_device_memory_total_bytes,
//   llm_device_power_watts, llm_device_temperature_celsius
//                                                  gauges from NVML (GPU workers with the driver)
#ifndef LLM_WORKER_SERVER_METRICS_H_
#define LLM_WORKER_SERVER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_http/metrics_http_server.h"
#include "worker/loop/engine_loop.h"
#include "worker/loop/stream.h"
#include "worker/loop/worker.h"
#include "worker/server/device_monitor.h"
#include "worker/server/generation_service.h"

namespace llm::server {

class WorkerMetrics : public loop::RequestObserver,
                      public loop::StepObserver,
                      public RequestCounters {
 public:
  // Every series carries the label model_name=`model_name` (model.name), as vLLM's do, so that
  // an autoscaler or a dashboard can select one model's workers.
  explicit WorkerMetrics(const std::string& model_name = "");

  // Serves /metrics on `listen` ("0.0.0.0:9090"; port 0 picks one). Returns the bound port.
  absl::StatusOr<int> Serve(const std::string& listen);
  // The worker whose load the gauges report at scrape time (null: zeros).
  void SetWorker(const loop::Worker* worker) { worker_.store(worker); }
  // The GPU counters to export (before the first scrape; once). Without a monitor, or with one
  // whose counters are unavailable, the llm_device_* gauges are absent.
  void SetDeviceMonitor(const DeviceMonitor* monitor);
  // The text a scrape would return (tests, and the server's own checks).
  std::string Render() const;

  void OnRequestFinished(const loop::RequestStats& stats) override;
  void OnRequestCancelled() override;
  void OnRequestRejected(absl::StatusCode code) override;
  void OnStep(double step_seconds, double gap_seconds, int32_t num_tokens, int32_t num_decodes,
              int32_t prompt_tokens) override;
  void OnVerified(int32_t draft_tokens, int32_t accepted_tokens) override;
  void OnRejected(grpc::StatusCode code) override;
  void OnCancelledBeforeArrival() override;

 private:
  class ScrapeHook;
  void RefreshGauges() const;
  // The load gauges and counters; the request histograms and counters; speculation's.
  void RegisterLoadMetrics();
  void RegisterRequestMetrics();
  void RegisterSpeculationMetrics();

  std::shared_ptr<prometheus::Registry> registry_;
  const prometheus::Labels labels_;  // on every family: model_name
  std::shared_ptr<ScrapeHook> hook_;
  std::unique_ptr<llm::MetricsHttpServer> http_;
  std::atomic<const loop::Worker*> worker_{nullptr};

  prometheus::Gauge* waiting_;
  prometheus::Gauge* running_;
  prometheus::Gauge* kv_usage_;
  prometheus::Gauge* prefix_blocks_;
  prometheus::Counter* prefix_query_tokens_;
  prometheus::Counter* prefix_hit_tokens_;
  mutable std::mutex prefix_mu_;           // scrapes may run at once
  mutable int64_t prefix_query_seen_ = 0;  // the scheduler's totals already added
  mutable int64_t prefix_hit_seen_ = 0;
  prometheus::Counter* preemptions_;
  mutable uint64_t preemptions_seen_ = 0;
  prometheus::Counter* paced_steps_;
  mutable uint64_t paced_steps_seen_ = 0;
  prometheus::Gauge* preempted_;
  prometheus::Gauge* busy_;
  std::atomic<const DeviceMonitor*> monitor_{nullptr};  // set after its gauges
  prometheus::Gauge* device_utilization_ = nullptr;
  prometheus::Gauge* device_memory_used_ = nullptr;
  prometheus::Gauge* device_memory_total_ = nullptr;
  prometheus::Gauge* device_power_ = nullptr;
  prometheus::Gauge* device_temperature_ = nullptr;
  prometheus::Gauge* draining_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* tpot_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* step_;
  prometheus::Histogram* gap_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* steps_;
  prometheus::Counter* cancelled_;
  prometheus::Counter* spec_drafts_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  prometheus::Histogram* spec_acceptance_length_;
  prometheus::Family<prometheus::Gauge>* spec_policy_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Counter>* rejected_;
};

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_METRICS_H_
