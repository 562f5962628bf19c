// The workers a router sends requests to: per worker, a gRPC channel carrying a WatchLoad stream
// that keeps its latest LoadReport (the calls themselves go through router/relay), and the router's
// own bookkeeping (streams in flight, picks since the last report, consecutive failures and
// ejection). Thread-safe: the proxy picks and reports outcomes from gRPC threads, discovery
// replaces the set from its own thread.
#ifndef LLM_ROUTER_POOL_WORKER_POOL_H_
#define LLM_ROUTER_POOL_WORKER_POOL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls/tls_files.h"
#include "router/policy/policy.h"

namespace llm::router {

using Clock = std::chrono::steady_clock;

struct PoolOptions {
  std::string router_id = "llm-router";  // sent as WatchLoadRequest.watcher
  int load_interval_ms = 10;             // WatchLoadRequest.min_interval_ms
  // A report older than this counts as unknown load.
  std::chrono::milliseconds stale_after{3000};
  // Consecutive failed requests that eject a worker, and the ejection's back-off (doubling per
  // ejection without a success in between, up to the maximum). Failures during an ejection do
  // not count; a worker whose load stream reconnects (a restart) starts with a clean record.
  int eject_after_failures = 3;
  std::chrono::milliseconds eject_base{1000};
  std::chrono::milliseconds eject_max{30000};
  // Reconnection back-off of a broken WatchLoad stream.
  std::chrono::milliseconds watch_retry_min{100};
  std::chrono::milliseconds watch_retry_max{2000};
  // TLS to the workers (the load watches; the relay has its own contexts from the same files).
  tls::TlsFiles upstream_tls;
};

// Events of the pool, for metrics (each may be called from any thread).
class PoolObserver {
 public:
  virtual ~PoolObserver() = default;
  virtual void OnPick(const std::string& worker) = 0;
  virtual void OnEject(const std::string& worker) = 0;
  virtual void OnWorkerAdded(const std::string& worker) = 0;
  virtual void OnWorkerRemoved(const std::string& worker) = 0;
};

class WorkerHandle {
 public:
  WorkerHandle(std::string address, const PoolOptions& options, PoolObserver* observer);
  // Stops the WatchLoad stream; calls in flight keep the channel alive through their handle.
  ~WorkerHandle();
  WorkerHandle(const WorkerHandle&) = delete;
  WorkerHandle& operator=(const WorkerHandle&) = delete;

  const std::string& address() const { return address_; }
  // The model.name of its last load report (empty before one).
  std::string model() const;

  // The router's bookkeeping, on every path of a request: picked (+1 in flight), first token
  // reached the client, stream ended (-1 in flight: finish, error, cancel, or a failed attempt
  // before a retry), and the outcome for ejection (client-caused ends report neither).
  void OnPicked();
  void OnFirstToken();
  void OnStreamEnded(bool got_first_token);
  void OnSuccess();
  void OnFailure();

  WorkerView View(Clock::time_point now) const;
  void StopWatching();

 private:
  void WatchLoop();

  const std::string address_;
  const PoolOptions options_;
  PoolObserver* observer_;
  std::shared_ptr<grpc::Channel> channel_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  grpc::ClientContext* watch_context_ = nullptr;  // the live WatchLoad call, for cancelling
  bool connected_ = false;                        // WatchLoad stream up (a report received)
  bool has_report_ = false;
  WorkerLoadReport report_;
  Clock::time_point report_time_{};
  int32_t in_flight_ = 0;
  int32_t awaiting_first_token_ = 0;
  int32_t picked_since_report_ = 0;
  int consecutive_failures_ = 0;
  int ejections_in_a_row_ = 0;
  Clock::time_point ejected_until_{};
  std::thread watcher_;
};

class WorkerPool {
 public:
  WorkerPool(const PoolOptions& options, std::unique_ptr<Policy> policy,
             PoolObserver* observer = nullptr);
  ~WorkerPool();

  // Makes `addresses` ("host:port") the pool: new ones are connected and watched, ones no
  // longer listed are dropped (their streams in flight finish through their handles).
  void SetWorkers(const std::vector<std::string>& addresses);

  // Picks a worker for a request; `tried` are the ones already tried for it (never picked
  // again). UNAVAILABLE when no worker is healthy, RESOURCE_EXHAUSTED when all are saturated.
  // `prefix`: the request's prompt prefix chain (PrefixIndex::Chain), for cache-aware policies.
  // `model`: only workers that report serving it (a name or alias) are candidates; NOT_FOUND
  // naming it and the served models when none does. Empty: the pool's only model;
  // INVALID_ARGUMENT when its workers serve several.
  absl::StatusOr<std::shared_ptr<WorkerHandle>> Pick(const std::vector<const WorkerHandle*>& tried,
                                                     std::span<const uint64_t> prefix = {},
                                                     std::string_view model = {});

  // The current view of every worker (metrics, tests).
  std::vector<WorkerView> Snapshot() const;

 private:
  const PoolOptions options_;
  const std::unique_ptr<Policy> policy_;
  PoolObserver* observer_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<WorkerHandle>> workers_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace llm::router

#endif  // LLM_ROUTER_POOL_WORKER_POOL_H_
