// llm-worker's server: gRPC (Generation, WorkerLoad, health, reflection) and /metrics around a
// loop::Worker. Health (service "") stays NOT_SERVING until the model is loaded, and goes
// NOT_SERVING again when draining starts; service "liveness" is SERVING unless the engine
// watchdog finds an iteration older than engine.watchdog_seconds (a hung step). Both are also
// served on the plaintext server.health_listen port, for Kubernetes probes when server.listen
// is TLS.
#ifndef LLM_WORKER_SERVER_WORKER_SERVER_H_
#define LLM_WORKER_SERVER_WORKER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/periodic_thread.h"
#include "common/thread_pool.h"
#include "common/tls/verified_tls_files.h"
#include "worker/loop/worker.h"
#include "worker/server/device_monitor.h"
#include "worker/server/generation_service.h"
#include "worker/server/load_service.h"
#include "worker/server/metrics.h"
#include "worker/server/worker_config.h"

namespace llm::server {

class WorkerServer {
 public:
  explicit WorkerServer(WorkerConfig config);
  ~WorkerServer();

  // Opens the ports, loads the model and starts serving. Errors name the file or address.
  absl::Status Start();
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  int health_port() const { return health_port_; }

  // Health NOT_SERVING, new requests UNAVAILABLE, in-flight streams get up to the grace period,
  // then everything shuts down. Returns true when every stream finished in time.
  bool Drain();

 private:
  // Start's parts: the metrics, gRPC and health ports; the backend and the worker over it (its
  // start lines printed); the load reports, the watchdog and SERVING.
  absl::Status OpenPorts();
  absl::StatusOr<runner::RunnerInfo> LoadModel();
  void StartServing(const runner::RunnerInfo& info);
  // Loads the chat template (model.chat_template, else the tokenizer's) into the worker; a
  // model without one refuses chat requests saying so.
  absl::Status SetUpChat();
  void SetServing(bool serving);
  void SetHealth(const std::string& service, bool serving);
  // Every second: liveness follows the engine iteration's age (engine.watchdog_seconds).
  void WatchdogTick();

  WorkerConfig config_;
  WorkerMetrics metrics_;
  GenerationService generation_;
  std::unique_ptr<LoadService> load_;
  std::unique_ptr<ThreadPool> pool_;  // the CPU backend's; outlives the worker's runner
  std::unique_ptr<DeviceMonitor> device_monitor_;
  std::unique_ptr<loop::Worker> worker_;
  std::unique_ptr<tls::VerifiedTlsFiles> tls_files_;  // outlives server_, which reads them
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;  // server.health_listen
  int port_ = 0;
  int metrics_port_ = 0;
  int health_port_ = 0;
  bool live_ = true;  // the watchdog's last verdict (its thread only)
  std::unique_ptr<PeriodicThread> watchdog_;
};

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_WORKER_SERVER_H_
