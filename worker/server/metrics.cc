#include "worker/server/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/metrics_http/build_info.h"
#include "common/status_macros.h"

namespace llm::server {

// Refreshes the load gauges from the worker just before the registry is collected.
class WorkerMetrics::ScrapeHook : public prometheus::Collectable {
 public:
  explicit ScrapeHook(const WorkerMetrics* m) : m_(m) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    m_->RefreshGauges();
    return m_->registry_->Collect();
  }

 private:
  const WorkerMetrics* m_;
};

namespace {

prometheus::Histogram::BucketBoundaries Exponential(double start, double factor, int n) {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = start; n-- > 0; v *= factor) b.push_back(v);
  return b;
}

const char* ReasonLabel(sampling::FinishReason r) {
  switch (r) {
    case sampling::FinishReason::kStopToken:
    case sampling::FinishReason::kStopString:
      return "stop";
    case sampling::FinishReason::kLength:
      return "length";
    case sampling::FinishReason::kNone:
    case sampling::FinishReason::kError:
      break;
  }
  return "error";
}

// Registers metrics in one registry, every family with the same labels.
class Families {
 public:
  Families(prometheus::Registry& registry, const prometheus::Labels& labels)
      : r_(registry), labels_(labels) {}
  prometheus::Family<prometheus::Gauge>* GaugeFamily(const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Labels(labels_).Register(r_);
  }
  prometheus::Family<prometheus::Counter>* CounterFamily(const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels_).Register(r_);
  }
  prometheus::Gauge* Gauge(const char* name, const char* help) {
    return &GaugeFamily(name, help)->Add({});
  }
  prometheus::Counter* Counter(const char* name, const char* help) {
    return &CounterFamily(name, help)->Add({});
  }
  prometheus::Histogram* Histogram(const char* name, const char* help,
                                   const prometheus::Histogram::BucketBoundaries& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Labels(labels_).Register(r_).Add(
        {}, buckets);
  }

 private:
  prometheus::Registry& r_;
  const prometheus::Labels& labels_;
};

}  // namespace

WorkerMetrics::WorkerMetrics(const std::string& model_name)
    : registry_(std::make_shared<prometheus::Registry>()), labels_{{"model_name", model_name}} {
  RegisterBuildInfo(*registry_, labels_);
  RegisterLoadMetrics();
  RegisterRequestMetrics();
  RegisterSpeculationMetrics();
  hook_ = std::make_shared<ScrapeHook>(this);
}

void WorkerMetrics::RegisterLoadMetrics() {
  Families f(*registry_, labels_);
  waiting_ = f.Gauge("llm_num_requests_waiting",
                     "Requests accepted and waiting for a slot (including tokenizing).");
  running_ = f.Gauge("llm_num_requests_running", "Requests holding a slot.");
  kv_usage_ = f.Gauge("llm_kv_cache_usage_ratio",
                      "KV-cache blocks reserved by running requests over all blocks (0..1).");
  prefix_blocks_ =
      f.Gauge("llm_prefix_cache_blocks", "KV-cache blocks holding a reusable prompt prefix.");
  prefix_query_tokens_ = f.Counter("llm_prefix_cache_queries_total",
                                   "Prompt tokens looked up in the prefix cache at admission.");
  prefix_hit_tokens_ = f.Counter("llm_prefix_cache_hits_total",
                                 "Prompt tokens found in the prefix cache (not computed).");
  preemptions_ = f.Counter(
      "llm_num_preemptions_total",
      "Running requests preempted to free KV blocks (each resumes later with nothing lost).");
  paced_steps_ = f.Counter("llm_prefill_paced_steps_total",
                           "Engine steps in which a long prompt's next chunk waited so that "
                           "decoding streams slow at most engine.max_decode_slowdown times.");
  preempted_ = f.Gauge("llm_num_requests_preempted",
                       "Requests waiting to resume after a preemption (counted in "
                       "llm_num_requests_waiting too).");
  busy_ = f.Gauge("llm_engine_busy_ratio",
                  "Fraction of wall time the backend spent computing steps over the last second.");
  draining_ = f.Gauge("llm_worker_draining", "1 while the worker drains (takes no new requests).");
}

void WorkerMetrics::RegisterRequestMetrics() {
  Families f(*registry_, labels_);
  ttft_ =
      f.Histogram("llm_time_to_first_token_seconds",
                  "Time from a request's arrival to its first token.", Exponential(0.001, 2, 17));
  tpot_ = f.Histogram("llm_time_per_output_token_seconds",
                      "Mean time per output token after the first, per request.",
                      Exponential(0.0001, 2, 16));
  e2e_ = f.Histogram("llm_e2e_request_latency_seconds",
                     "Time from a request's arrival to its last token.", Exponential(0.005, 2, 18));
  queue_ = f.Histogram("llm_request_queue_time_seconds", "Time a request waited for a slot.",
                       Exponential(0.0005, 2, 18));
  step_ = f.Histogram("llm_engine_step_duration_seconds", "Backend time of one engine step.",
                      Exponential(0.00002, 2, 18));
  gap_ = f.Histogram("llm_engine_step_gap_seconds",
                     "Backend idle time between the end of one step and the start of the next.",
                     Exponential(0.000001, 2, 22));
  prompt_tokens_ = f.Counter("llm_prompt_tokens_total", "Prompt tokens of finished requests.");
  generation_tokens_ =
      f.Counter("llm_generation_tokens_total", "Generated tokens of finished requests.");
  steps_ = f.Counter("llm_engine_steps_total", "Engine steps run.");
  cancelled_ = f.Counter("llm_requests_cancelled_total",
                         "Requests ended by a client cancel or an expired deadline.");
  finished_ = f.CounterFamily("llm_requests_finished_total",
                              "Requests that ended, by reason: stop, length or error.");
  rejected_ = f.CounterFamily("llm_requests_rejected_total",
                              "Requests refused before starting, by gRPC status code.");
  for (const char* reason : {"stop", "length", "error"}) finished_->Add({{"reason", reason}});
}

void WorkerMetrics::RegisterSpeculationMetrics() {
  Families f(*registry_, labels_);
  spec_drafts_ = f.Counter("llm_spec_decode_num_drafts_total",
                           "Decodes that verified proposed tokens (speculative decoding).");
  spec_draft_tokens_ =
      f.Counter("llm_spec_decode_num_draft_tokens_total", "Proposed tokens verified.");
  spec_accepted_tokens_ =
      f.Counter("llm_spec_decode_num_accepted_tokens_total", "Proposed tokens the model accepted.");
  prometheus::Histogram::BucketBoundaries lengths;
  for (int i = 1; i <= 17; ++i) lengths.push_back(i);
  spec_acceptance_length_ = f.Histogram(
      "llm_spec_decode_acceptance_length",
      "Tokens one verifying decode produced: accepted proposals plus the token sampled after "
      "them.",
      lengths);
  spec_policy_ = f.GaugeFamily("llm_spec_decode_policy_tokens",
                               "Proposals per slot the speculation policy settled on for steps of "
                               "`batch` decoding slots (0: speculation off at those batch sizes).");
}

void WorkerMetrics::OnVerified(int32_t draft_tokens, int32_t accepted_tokens) {
  spec_drafts_->Increment();
  spec_draft_tokens_->Increment(draft_tokens);
  spec_accepted_tokens_->Increment(accepted_tokens);
  spec_acceptance_length_->Observe(accepted_tokens + 1);
}

absl::StatusOr<int> WorkerMetrics::Serve(const std::string& listen) {
  LLM_ASSIGN_OR_RETURN(http_,
                       llm::MetricsHttpServer::Start(listen, "server.metrics_listen", hook_));
  return http_->port();
}

void WorkerMetrics::RefreshGauges() const {
  const loop::Worker* w = worker_.load();
  if (w == nullptr) return;
  const loop::WorkerLoad load = w->Load();
  const auto& s = load.engine.scheduler;
  waiting_->Set(static_cast<double>(
      std::max<int64_t>(s.queued_requests, load.in_flight - s.running_requests)));
  running_->Set(s.running_requests);
  kv_usage_->Set(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total
                                       : 0.0);
  busy_->Set(load.engine.busy_ratio);
  prefix_blocks_->Set(s.kv_blocks_cached);
  std::lock_guard<std::mutex> lock(prefix_mu_);
  if (s.prefix_query_tokens > prefix_query_seen_) {
    prefix_query_tokens_->Increment(
        static_cast<double>(s.prefix_query_tokens - prefix_query_seen_));
    prefix_query_seen_ = s.prefix_query_tokens;
  }
  if (s.prefix_hit_tokens > prefix_hit_seen_) {
    prefix_hit_tokens_->Increment(static_cast<double>(s.prefix_hit_tokens - prefix_hit_seen_));
    prefix_hit_seen_ = s.prefix_hit_tokens;
  }
  if (s.preemptions > preemptions_seen_) {
    preemptions_->Increment(static_cast<double>(s.preemptions - preemptions_seen_));
    preemptions_seen_ = s.preemptions;
  }
  if (s.paced_steps > paced_steps_seen_) {
    paced_steps_->Increment(static_cast<double>(s.paced_steps - paced_steps_seen_));
    paced_steps_seen_ = s.paced_steps;
  }
  preempted_->Set(s.preempted_requests);
  for (int g = 0; g < engine::SpeculationPolicy::kGroups; ++g) {
    const int8_t k = s.speculation_by_batch[static_cast<size_t>(g)];
    if (k == engine::SpeculationPolicy::kMeasuring) continue;
    spec_policy_->Add({{"batch", engine::SpeculationPolicy::GroupLabel(g)}}).Set(k);
  }
  draining_->Set(load.draining ? 1 : 0);
  if (const DeviceMonitor* monitor = monitor_.load(); monitor != nullptr) {
    const DeviceSample d = monitor->Latest();
    device_utilization_->Set(d.utilization);
    device_memory_used_->Set(static_cast<double>(d.memory_used_bytes));
    device_memory_total_->Set(static_cast<double>(d.memory_total_bytes));
    device_power_->Set(d.power_watts);
    device_temperature_->Set(d.temperature_celsius);
  }
}

void WorkerMetrics::SetDeviceMonitor(const DeviceMonitor* monitor) {
  if (monitor == nullptr || !monitor->unavailable_reason().empty() || monitor_ != nullptr) return;
  Families f(*registry_, labels_);
  device_utilization_ =
      f.Gauge("llm_device_utilization_ratio", "The driver's GPU utilisation counter (NVML), 0..1.");
  device_memory_used_ =
      f.Gauge("llm_device_memory_used_bytes", "GPU memory in use on the device (NVML).");
  device_memory_total_ = f.Gauge("llm_device_memory_total_bytes", "GPU memory of the device.");
  device_power_ = f.Gauge("llm_device_power_watts", "GPU power draw (NVML).");
  device_temperature_ = f.Gauge("llm_device_temperature_celsius", "GPU temperature (NVML).");
  monitor_.store(monitor);
}

std::string WorkerMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(hook_->Collect());
}

void WorkerMetrics::OnRequestFinished(const loop::RequestStats& s) {
  finished_->Add({{"reason", ReasonLabel(s.reason)}}).Increment();
  prompt_tokens_->Increment(s.prompt_tokens);
  generation_tokens_->Increment(s.completion_tokens);
  if (s.ttft_seconds >= 0 && s.completion_tokens > 0) ttft_->Observe(s.ttft_seconds);
  if (s.tpot_seconds >= 0) tpot_->Observe(s.tpot_seconds);
  e2e_->Observe(s.e2e_seconds);
  if (s.queue_seconds >= 0) queue_->Observe(s.queue_seconds);
}

void WorkerMetrics::OnRequestCancelled() { cancelled_->Increment(); }

void WorkerMetrics::OnCancelledBeforeArrival() { cancelled_->Increment(); }

void WorkerMetrics::OnStep(double step_seconds, double gap_seconds, int32_t, int32_t, int32_t) {
  steps_->Increment();
  step_->Observe(step_seconds);
  if (gap_seconds >= 0) gap_->Observe(gap_seconds);
}

void WorkerMetrics::OnRequestRejected(absl::StatusCode code) {
  OnRejected(static_cast<grpc::StatusCode>(code));
}

void WorkerMetrics::OnRejected(grpc::StatusCode code) {
  // gRPC's status codes have the same numbers as absl's.
  rejected_->Add({{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}})
      .Increment();
}

}  // namespace llm::server
