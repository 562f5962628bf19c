// llm-router's Prometheus metrics (prometheus-cpp), on their own HTTP port:
//   llm_router_requests_total{code,model_name}    counter: calls ended, by gRPC status code and
//                                                 the model.name of the worker that served it
//   llm_router_retries_total                      counter: calls moved to another worker
//   llm_router_picks_total{worker}                counter: workers chosen
//   llm_router_ejections_total{worker}            counter: back-offs after repeated failures
//   llm_router_upstream_errors_total{worker,code} counter: calls a worker ended with an error
//   llm_router_relayed_messages_total             counter: response messages relayed
//   llm_router_time_to_first_message_seconds{model_name}  histogram: arrival to the first
//                                                 message
//   llm_router_requests_in_flight                 gauge
//   llm_router_workers{state}                     gauge: ready, unknown (stale report),
//                                                 saturated, draining, ejected, down
//   llm_router_worker_in_flight{worker}           gauge: this router's streams per worker
//   llm_router_http_connections                   gauge: open OpenAI-API connections
//   llm_router_http_connections_limited_total{reason}  counter: closed by a timeout or refused
//                                                 by a cap (router.http_*)
#ifndef LLM_ROUTER_ROUTER_METRICS_H_
#define LLM_ROUTER_ROUTER_METRICS_H_

#include <grpcpp/support/status.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics_http/metrics_http_server.h"
#include "router/pool/worker_pool.h"
#include "router/relay/relay_server.h"

namespace llm::router {

class RouterMetrics : public PoolObserver, public ProxyObserver {
 public:
  explicit RouterMetrics(const PolicyOptions& policy_options);

  // Serves /metrics on `listen` (port 0 picks one); returns the bound port.
  absl::StatusOr<int> Serve(const std::string& listen);
  // The pool and relay the gauges are read from at scrape time (null: zeros).
  void SetSources(const WorkerPool* pool, const RelayServer* relay);
  std::string Render() const;

  void OnPick(const std::string& worker) override;
  void OnEject(const std::string& worker) override;
  void OnWorkerAdded(const std::string& worker) override;
  void OnWorkerRemoved(const std::string& worker) override;
  void OnCallDone(int code, int attempts, const std::string& model) override;
  void OnRetry() override;
  void OnUpstreamError(const std::string& worker, int code) override;
  void OnFirstMessage(double seconds, const std::string& model) override;
  void OnRelayed(int64_t messages) override;

 private:
  class ScrapeHook;
  void RefreshGauges() const;

  const PolicyOptions policy_options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<llm::MetricsHttpServer> http_;
  std::shared_ptr<ScrapeHook> hook_;
  std::atomic<const WorkerPool*> pool_{nullptr};
  std::atomic<const RelayServer*> relay_{nullptr};

  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter* retries_;
  prometheus::Family<prometheus::Counter>* picks_;
  prometheus::Family<prometheus::Counter>* ejections_;
  prometheus::Family<prometheus::Counter>* upstream_errors_;
  prometheus::Counter* relayed_;
  prometheus::Family<prometheus::Histogram>* first_message_;
  prometheus::Histogram::BucketBoundaries first_message_buckets_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* http_open_;
  std::vector<prometheus::Counter*> http_limited_;  // by reason, as HttpConnectionStats
  mutable std::mutex http_mu_;                      // scrapes may run at once
  mutable uint64_t http_seen_[4] = {0, 0, 0, 0};    // the relay's totals already added
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Family<prometheus::Gauge>* worker_in_flight_;

  // Per-worker series, removed with the worker.
  struct WorkerSeries {
    prometheus::Counter* picks;
    prometheus::Counter* ejections;
    prometheus::Gauge* in_flight;
    std::map<int, prometheus::Counter*> errors;
  };
  mutable std::mutex mu_;
  std::map<std::string, WorkerSeries> series_;
  std::map<std::pair<int, std::string>, prometheus::Counter*> request_codes_;
  std::map<std::string, prometheus::Histogram*> first_messages_;  // by model
  WorkerSeries& SeriesLocked(const std::string& worker);
};

// "OK", "UNAVAILABLE", ... for a gRPC status code.
const char* StatusCodeName(int code);

}  // namespace llm::router

#endif  // LLM_ROUTER_ROUTER_METRICS_H_
