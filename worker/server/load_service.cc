#include "worker/server/load_service.h"

#include <algorithm>

namespace llm::server {

using loop::Clock;

class LoadService::Watcher : public grpc::ServerWriteReactor<llm::v1::LoadReport> {
 public:
  Watcher(LoadService* service, std::chrono::milliseconds interval)
      : service_(service), interval_(interval) {}

  // Queues `report` (replacing one not yet written) and writes it when the stream is free.
  void Offer(const llm::v1::LoadReport& report, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    last_offer_ = now;
    pending_ = report;
    has_pending_ = true;
    if (!writing_) WriteLocked();
  }
  // When this watcher may next get a report for a change, and when it must get one anyway.
  Clock::time_point next_allowed() const { return last_offer_ + interval_; }
  Clock::time_point heartbeat_due() const { return last_offer_ + std::chrono::seconds(1); }
  uint64_t last_version = ~0ull;

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
      return;
    }
    if (has_pending_) WriteLocked();
    if (stopping_ && !writing_) FinishLocked(grpc::Status::OK);
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    service_->Remove(this);
    delete this;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (!writing_) FinishLocked(grpc::Status::OK);
  }

 private:
  void WriteLocked() {
    current_ = pending_;
    current_.set_sequence(++sequence_);
    has_pending_ = false;
    writing_ = true;
    StartWrite(&current_);
  }
  void FinishLocked(const grpc::Status& status) {
    if (done_) return;
    done_ = true;
    Finish(status);
  }

  LoadService* service_;
  std::chrono::milliseconds interval_;
  Clock::time_point last_offer_{};
  std::mutex mu_;
  llm::v1::LoadReport pending_, current_;
  bool has_pending_ = false;
  bool writing_ = false;
  bool done_ = false;
  bool stopping_ = false;
  uint64_t sequence_ = 0;
};

LoadService::LoadService(int default_interval_ms) : default_interval_ms_(default_interval_ms) {}

LoadService::~LoadService() { Stop(); }

void LoadService::Start(loop::Worker* worker, LoadFacts facts) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    facts_ = std::move(facts);
  }
  worker_.store(worker);
  thread_ = std::thread([this] { Publish(); });
}

void LoadService::Stop() {
  std::vector<Watcher*> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    watchers.assign(watchers_.begin(), watchers_.end());
    for (Watcher* w : watchers) w->Stop();
  }
  cv_.notify_all();
  if (loop::Worker* worker = worker_.load()) worker->NotifyLoadWatchers();
  if (thread_.joinable()) thread_.join();
}

void LoadService::Remove(Watcher* w) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(w);
}

grpc::ServerWriteReactor<llm::v1::LoadReport>* LoadService::WatchLoad(
    grpc::CallbackServerContext* /*context*/, const llm::v1::WatchLoadRequest* request) {
  const int interval_ms =
      request->min_interval_ms() > 0
          ? static_cast<int>(std::min<uint32_t>(request->min_interval_ms(), 1000))
          : default_interval_ms_;
  auto* w = new Watcher(this, std::chrono::milliseconds(interval_ms));
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || worker_.load() == nullptr) {
    w->Stop();
    return w;
  }
  // The first report goes out at once.
  llm::v1::LoadReport report;
  loop::Worker* worker = worker_.load();
  ToLoadReport(worker->Load(), *worker, facts_, 0, report);
  w->last_version = worker->Load().engine.version;
  w->Offer(report, Clock::now());
  watchers_.insert(w);
  cv_.notify_all();
  return w;
}

void LoadService::Publish() {
  loop::Worker* worker = worker_.load();
  llm::v1::LoadReport report;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    const loop::WorkerLoad load = worker->Load();
    const uint64_t version = load.engine.version;
    ToLoadReport(load, *worker, facts_, 0, report);
    Clock::time_point wake = now + std::chrono::seconds(1);
    bool waits_for_change = false;  // some watcher would take a report on the next change
    for (Watcher* w : watchers_) {
      const bool changed = w->last_version != version;
      if ((changed && now >= w->next_allowed()) || now >= w->heartbeat_due()) {
        w->last_version = version;
        w->Offer(report, now);
      }
      wake = std::min(wake, w->heartbeat_due());
      if (w->last_version != version || now < w->next_allowed()) {
        wake = std::min(wake, w->next_allowed());
      } else {
        waits_for_change = true;
      }
    }
    if (waits_for_change) {
      lock.unlock();
      worker->WaitForLoadChange(version, wake);
      lock.lock();
    } else {
      cv_.wait_until(lock, wake, [&] { return stop_; });
    }
  }
}

}  // namespace llm::server
