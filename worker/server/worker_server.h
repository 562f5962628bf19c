// llm-worker's server: gRPC (Generation, WorkerLoad, health, reflection) and /metrics around a
// loop::Worker on the CPU backend. Health stays NOT_SERVING until the model is loaded, and goes
// NOT_SERVING again when draining starts.
#ifndef LLM_WORKER_SERVER_WORKER_SERVER_H_
#define LLM_WORKER_SERVER_WORKER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/status.h"
#include "common/thread_pool.h"
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

  // Health NOT_SERVING, new requests UNAVAILABLE, in-flight streams get up to the grace period,
  // then everything shuts down. Returns true when every stream finished in time.
  bool Drain();

 private:
  void SetServing(bool serving);

  WorkerConfig config_;
  WorkerMetrics metrics_;
  GenerationService generation_;
  std::unique_ptr<LoadService> load_;
  std::unique_ptr<ThreadPool> pool_;  // the CPU backend's; outlives the worker's runner
  std::unique_ptr<DeviceMonitor> device_monitor_;
  std::unique_ptr<loop::Worker> worker_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int metrics_port_ = 0;
};

}  // namespace llm::server

#endif  // LLM_WORKER_SERVER_WORKER_SERVER_H_
