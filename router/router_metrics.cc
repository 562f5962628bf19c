#include "router/router_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "common/metrics_http/build_info.h"
#include "common/status_macros.h"

namespace llm::router {

class RouterMetrics::ScrapeHook : public prometheus::Collectable {
 public:
  explicit ScrapeHook(const RouterMetrics* m) : m_(m) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    m_->RefreshGauges();
    return m_->registry_->Collect();
  }

 private:
  const RouterMetrics* m_;
};

const char* StatusCodeName(int code) {
  switch (static_cast<grpc::StatusCode>(code)) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

RouterMetrics::RouterMetrics(const PolicyOptions& policy_options)
    : policy_options_(policy_options), registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  auto& r = *registry_;
  RegisterBuildInfo(r);
  requests_ = &BuildCounter()
                   .Name("llm_router_requests_total")
                   .Help("Calls ended, by gRPC status code.")
                   .Register(r);
  retries_ = &BuildCounter()
                  .Name("llm_router_retries_total")
                  .Help(
                      "Calls moved to another worker after a worker failed before the first "
                      "message.")
                  .Register(r)
                  .Add({});
  picks_ = &BuildCounter()
                .Name("llm_router_picks_total")
                .Help("Workers chosen for calls, by worker.")
                .Register(r);
  ejections_ = &BuildCounter()
                    .Name("llm_router_ejections_total")
                    .Help("Workers put in back-off after consecutive failures, by worker.")
                    .Register(r);
  upstream_errors_ = &BuildCounter()
                          .Name("llm_router_upstream_errors_total")
                          .Help("Calls a worker ended with an error, by worker and code.")
                          .Register(r);
  relayed_ = &BuildCounter()
                  .Name("llm_router_relayed_messages_total")
                  .Help("Response messages relayed from workers to clients.")
                  .Register(r)
                  .Add({});
  for (double v = 0.0005; v < 70; v *= 2) first_message_buckets_.push_back(v);
  first_message_ = &BuildHistogram()
                        .Name("llm_router_time_to_first_message_seconds")
                        .Help("Time from a Generate call's arrival to its first relayed message.")
                        .Register(r);
  in_flight_ = &BuildGauge()
                    .Name("llm_router_requests_in_flight")
                    .Help("Calls in progress.")
                    .Register(r)
                    .Add({});
  http_open_ = &BuildGauge()
                    .Name("llm_router_http_connections")
                    .Help("Open connections of the OpenAI-compatible HTTP API.")
                    .Register(r)
                    .Add({});
  auto& ended = BuildCounter()
                    .Name("llm_router_http_connections_limited_total")
                    .Help(
                        "HTTP API connections closed by a timeout (read_timeout: a request "
                        "too slow to arrive; idle_timeout) or refused with 503 by a cap "
                        "(max_connections, max_connections_per_client).")
                    .Register(r);
  for (const char* reason :
       {"read_timeout", "idle_timeout", "max_connections", "max_connections_per_client"}) {
    http_limited_.push_back(&ended.Add({{"reason", reason}}));
  }
  workers_ = &BuildGauge()
                  .Name("llm_router_workers")
                  .Help(
                      "Known workers by state: ready, unknown (no recent load report), "
                      "saturated, draining, ejected, down.")
                  .Register(r);
  worker_in_flight_ = &BuildGauge()
                           .Name("llm_router_worker_in_flight")
                           .Help("This router's calls in progress per worker.")
                           .Register(r);
  for (const char* state : {"ready", "unknown", "saturated", "draining", "ejected", "down"}) {
    workers_->Add({{"state", state}});
  }
  hook_ = std::make_shared<ScrapeHook>(this);
}

absl::StatusOr<int> RouterMetrics::Serve(const std::string& listen) {
  LLM_ASSIGN_OR_RETURN(http_,
                       llm::MetricsHttpServer::Start(listen, "router.metrics_listen", hook_));
  return http_->port();
}

void RouterMetrics::SetSources(const WorkerPool* pool, const RelayServer* relay) {
  pool_.store(pool);
  relay_.store(relay);
}

std::string RouterMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(hook_->Collect());
}

RouterMetrics::WorkerSeries& RouterMetrics::SeriesLocked(const std::string& worker) {
  auto it = series_.find(worker);
  if (it != series_.end()) return it->second;
  WorkerSeries s;
  s.picks = &picks_->Add({{"worker", worker}});
  s.ejections = &ejections_->Add({{"worker", worker}});
  s.in_flight = &worker_in_flight_->Add({{"worker", worker}});
  return series_.emplace(worker, s).first->second;
}

void RouterMetrics::OnWorkerAdded(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  SeriesLocked(worker);
}

void RouterMetrics::OnWorkerRemoved(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(worker);
  if (it == series_.end()) return;
  picks_->Remove(it->second.picks);
  ejections_->Remove(it->second.ejections);
  worker_in_flight_->Remove(it->second.in_flight);
  for (auto& [code, c] : it->second.errors) upstream_errors_->Remove(c);
  series_.erase(it);
}

void RouterMetrics::OnPick(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  SeriesLocked(worker).picks->Increment();
}

void RouterMetrics::OnEject(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  SeriesLocked(worker).ejections->Increment();
}

void RouterMetrics::OnUpstreamError(const std::string& worker, int code) {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerSeries& s = SeriesLocked(worker);
  auto it = s.errors.find(code);
  if (it == s.errors.end()) {
    it = s.errors
             .emplace(code,
                      &upstream_errors_->Add({{"worker", worker}, {"code", StatusCodeName(code)}}))
             .first;
  }
  it->second->Increment();
}

void RouterMetrics::OnCallDone(int code, int, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = request_codes_.find({code, model});
  if (it == request_codes_.end()) {
    it = request_codes_
             .emplace(std::make_pair(code, model),
                      &requests_->Add({{"code", StatusCodeName(code)}, {"model_name", model}}))
             .first;
  }
  it->second->Increment();
}

void RouterMetrics::OnRetry() { retries_->Increment(); }
void RouterMetrics::OnFirstMessage(double seconds, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = first_messages_.find(model);
  if (it == first_messages_.end()) {
    it = first_messages_
             .emplace(model, &first_message_->Add({{"model_name", model}}, first_message_buckets_))
             .first;
  }
  it->second->Observe(seconds);
}
void RouterMetrics::OnRelayed(int64_t messages) {
  relayed_->Increment(static_cast<double>(messages));
}

void RouterMetrics::RefreshGauges() const {
  if (const RelayServer* relay = relay_.load()) {
    in_flight_->Set(static_cast<double>(relay->in_flight()));
    const HttpConnectionStats h = relay->http_stats();
    http_open_->Set(static_cast<double>(h.open));
    std::lock_guard<std::mutex> lock(http_mu_);
    const uint64_t now[4] = {h.read_timeouts, h.idle_timeouts, h.refused, h.refused_per_client};
    for (size_t i = 0; i < 4; ++i) {
      if (now[i] > http_seen_[i]) {
        http_limited_[i]->Increment(static_cast<double>(now[i] - http_seen_[i]));
        http_seen_[i] = now[i];
      }
    }
  }
  const WorkerPool* pool = pool_.load();
  if (pool == nullptr) return;
  std::map<std::string, int> states = {{"ready", 0},    {"unknown", 0}, {"saturated", 0},
                                       {"draining", 0}, {"ejected", 0}, {"down", 0}};
  const std::vector<WorkerView> views = pool->Snapshot();
  for (const WorkerView& v : views) {
    const char* state = !v.healthy                      ? "down"
                        : v.ejected                     ? "ejected"
                        : !v.fresh                      ? "unknown"
                        : v.report.draining             ? "draining"
                        : Saturated(v, policy_options_) ? "saturated"
                                                        : "ready";
    ++states[state];
  }
  for (const auto& [state, n] : states) workers_->Add({{"state", state}}).Set(n);
  std::lock_guard<std::mutex> lock(mu_);
  for (const WorkerView& v : views) {
    auto it = series_.find(v.id);
    if (it != series_.end()) it->second.in_flight->Set(v.in_flight);
  }
}

}  // namespace llm::router
