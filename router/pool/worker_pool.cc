#include "router/pool/worker_pool.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/thread_name.h"
#include "common/tls/grpc_tls.h"
#include "llm/v1/worker_load.grpc.pb.h"

namespace llm::router {

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const tls::TlsFiles& tls_files) {
  grpc::ChannelArguments args;
  // A restarted worker is reconnected within a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A worker that vanished without closing its connections is found by keepalive pings (the
  // workers accept them every 10 s).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  auto credentials = tls::ChannelCredentials(tls_files, &args);
  return grpc::CreateCustomChannel(address, credentials, args);
}

WorkerLoadReport FromProto(const llm::v1::LoadReport& r) {
  WorkerLoadReport w;
  w.queued_requests = static_cast<int32_t>(r.queued_requests());
  w.queued_prompt_tokens = static_cast<int64_t>(r.queued_prompt_tokens());
  w.running_requests = static_cast<int32_t>(r.running_requests());
  w.free_slots = static_cast<int32_t>(r.free_slots());
  w.max_slots = static_cast<int32_t>(r.max_slots());
  w.step_time_ewma_ms = r.step_time_ewma_ms();
  w.prefill_ms_per_token = r.prefill_ms_per_token();
  // The device's busy ratio (CUDA events) when the worker reports one, else the engine's.
  w.busy_ratio =
      r.has_device() && r.device().busy_ratio() > 0 ? r.device().busy_ratio() : r.busy_ratio();
  w.draining = r.draining();
  w.model = r.model();
  w.served_names.assign(r.served_names().begin(), r.served_names().end());
  w.max_context_tokens = r.max_context_tokens();
  return w;
}

}  // namespace

WorkerHandle::WorkerHandle(std::string address, const PoolOptions& options, PoolObserver* observer)
    : address_(std::move(address)),
      options_(options),
      observer_(observer),
      channel_(MakeChannel(address_, options.upstream_tls)) {
  watcher_ = std::thread([this] {
    SetCurrentThreadName("watch-load");
    WatchLoop();
  });
}

WorkerHandle::~WorkerHandle() {
  StopWatching();
  if (watcher_.joinable()) watcher_.join();
}

void WorkerHandle::StopWatching() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  if (watch_context_ != nullptr) watch_context_->TryCancel();
  cv_.notify_all();
}

void WorkerHandle::WatchLoop() {
  auto stub = llm::v1::WorkerLoad::NewStub(channel_);
  std::chrono::milliseconds retry = options_.watch_retry_min;
  for (;;) {
    grpc::ClientContext context;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      watch_context_ = &context;
    }
    llm::v1::WatchLoadRequest request;
    request.set_min_interval_ms(static_cast<uint32_t>(options_.load_interval_ms));
    request.set_watcher(options_.router_id);
    auto reader = stub->WatchLoad(&context, request);
    llm::v1::LoadReport report;
    while (reader->Read(&report)) {
      const WorkerLoadReport w = FromProto(report);
      std::lock_guard<std::mutex> lock(mu_);
      if (!connected_) {
        // (Re)connected: a restarted worker starts with a clean record.
        consecutive_failures_ = 0;
        ejections_in_a_row_ = 0;
        ejected_until_ = Clock::time_point{};
      }
      report_ = w;
      has_report_ = true;
      report_time_ = Clock::now();
      picked_since_report_ = 0;
      connected_ = true;
      retry = options_.watch_retry_min;
    }
    (void)reader->Finish();
    std::unique_lock<std::mutex> lock(mu_);
    watch_context_ = nullptr;
    connected_ = false;
    if (stop_) return;
    cv_.wait_for(lock, retry, [&] { return stop_; });
    retry = std::min(retry * 2, options_.watch_retry_max);
  }
}

void WorkerHandle::OnPicked() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
  ++awaiting_first_token_;
  ++picked_since_report_;
}

void WorkerHandle::OnFirstToken() {
  std::lock_guard<std::mutex> lock(mu_);
  awaiting_first_token_ = std::max(0, awaiting_first_token_ - 1);
}

void WorkerHandle::OnStreamEnded(bool got_first_token) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ = std::max(0, in_flight_ - 1);
  if (!got_first_token) awaiting_first_token_ = std::max(0, awaiting_first_token_ - 1);
}

void WorkerHandle::OnSuccess() {
  std::lock_guard<std::mutex> lock(mu_);
  consecutive_failures_ = 0;
  ejections_in_a_row_ = 0;
}

void WorkerHandle::OnFailure() {
  bool ejected = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Failures of calls made before an ejection do not extend it: one crash fails every stream
    // the worker had at once.
    if (Clock::now() < ejected_until_) return;
    ++consecutive_failures_;
    if (consecutive_failures_ >= options_.eject_after_failures) {
      auto backoff = options_.eject_base * (1 << std::min(ejections_in_a_row_, 16));
      backoff = std::min<std::chrono::milliseconds>(backoff, options_.eject_max);
      ejected_until_ = Clock::now() + backoff;
      ++ejections_in_a_row_;
      consecutive_failures_ = 0;
      ejected = true;
    }
  }
  if (ejected && observer_ != nullptr) observer_->OnEject(address_);
}

std::string WorkerHandle::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_.model;
}

WorkerView WorkerHandle::View(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerView v;
  v.id = address_;
  v.healthy = connected_;
  v.ejected = now < ejected_until_;
  v.fresh = has_report_ && now - report_time_ <= options_.stale_after;
  v.report = report_;
  v.in_flight = in_flight_;
  // Picks after the report that are still open: finished ones no longer load the worker.
  v.picked_since_report = std::min(picked_since_report_, in_flight_);
  return v;
}

WorkerPool::WorkerPool(const PoolOptions& options, std::unique_ptr<Policy> policy,
                       PoolObserver* observer)
    : options_(options), policy_(std::move(policy)), observer_(observer) {}

WorkerPool::~WorkerPool() {
  std::map<std::string, std::shared_ptr<WorkerHandle>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (auto& [address, w] : workers) w->StopWatching();
}

void WorkerPool::SetWorkers(const std::vector<std::string>& addresses) {
  std::vector<std::shared_ptr<WorkerHandle>> removed;
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (std::find(addresses.begin(), addresses.end(), it->first) == addresses.end()) {
        removed.push_back(std::move(it->second));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    for (const std::string& a : addresses) {
      if (workers_.count(a)) continue;
      workers_.emplace(a, std::make_shared<WorkerHandle>(a, options_, observer_));
      added.push_back(a);
    }
  }
  for (auto& w : removed) {
    w->StopWatching();
    if (observer_ != nullptr) observer_->OnWorkerRemoved(w->address());
  }
  if (observer_ != nullptr) {
    for (const auto& a : added) observer_->OnWorkerAdded(a);
  }
}

namespace {

// The names `views` report (with `aliases`, their served_names too), sorted, for errors.
std::string ServedNames(const std::vector<WorkerView>& views, bool aliases) {
  std::set<std::string> names;
  for (const WorkerView& v : views) {
    if (v.report.model.empty()) continue;
    names.insert(v.report.model);
    if (aliases) names.insert(v.report.served_names.begin(), v.report.served_names.end());
  }
  return absl::StrJoin(names, ", ");
}

// Excludes the workers that do not serve `model` (see Pick); an error when none can. Before any
// worker has reported its model, nothing is excluded (the health checks answer).
absl::Status ExcludeOtherModels(const std::vector<WorkerView>& views, std::string_view model,
                                std::vector<size_t>& exclude) {
  if (model.empty()) {
    const std::string* only = nullptr;
    for (const WorkerView& v : views) {
      if (v.report.model.empty()) continue;
      if (only == nullptr) only = &v.report.model;
      if (*only != v.report.model) {
        return absl::InvalidArgumentError(absl::StrCat("model: this router serves several models (",
                                                       ServedNames(views, /*aliases=*/false),
                                                       "); the request must name one"));
      }
    }
    return absl::OkStatus();
  }
  bool known = false, served = false;
  for (size_t i = 0; i < views.size(); ++i) {
    known = known || !views[i].report.model.empty();
    if (views[i].report.Serves(model)) {
      served = true;
    } else {
      exclude.push_back(i);
    }
  }
  if (served || !known) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("model: '", std::string(model),
                   "' is not served here (served: ", ServedNames(views, /*aliases=*/true), ")"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<WorkerHandle>> WorkerPool::Pick(
    const std::vector<const WorkerHandle*>& tried, std::span<const uint64_t> prefix,
    std::string_view model) {
  std::vector<std::shared_ptr<WorkerHandle>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles.reserve(workers_.size());
    for (const auto& [address, w] : workers_) handles.push_back(w);
  }
  const Clock::time_point now = Clock::now();
  std::vector<WorkerView> views;
  std::vector<size_t> exclude;
  views.reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    views.push_back(handles[i]->View(now));
    if (std::find(tried.begin(), tried.end(), handles[i].get()) != tried.end()) {
      exclude.push_back(i);
    }
  }
  if (absl::Status st = ExcludeOtherModels(views, model, exclude); !st.ok()) return st;
  uint64_t random;
  {
    std::lock_guard<std::mutex> lock(rng_mu_);
    random = rng_();
  }
  PickResult pick = policy_->PickFor(views, exclude, random, prefix);
  if (!pick.ok()) return pick.status();
  std::shared_ptr<WorkerHandle> chosen = handles[*pick];
  chosen->OnPicked();
  if (observer_ != nullptr) observer_->OnPick(chosen->address());
  return chosen;
}

std::vector<WorkerView> WorkerPool::Snapshot() const {
  std::vector<std::shared_ptr<WorkerHandle>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [address, w] : workers_) handles.push_back(w);
  }
  const Clock::time_point now = Clock::now();
  std::vector<WorkerView> views;
  for (const auto& h : handles) views.push_back(h->View(now));
  return views;
}

}  // namespace llm::router
