// llm-router: the relay (router/relay) on the public port; grpc.health.v1 and reflection on an
// in-process gRPC server that the relay forwards those calls to (and health alone on the
// plaintext router.health_listen port, for probes); discovery, the worker pool, /metrics, and a
// thread that reloads the TLS and token files when they change.
#ifndef LLM_ROUTER_ROUTER_SERVER_H_
#define LLM_ROUTER_ROUTER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/periodic_thread.h"
#include "common/tls/verified_tls_files.h"
#include "llm/v1/generation.grpc.pb.h"
#include "router/pool/discovery.h"
#include "router/pool/worker_addresses.h"
#include "router/pool/worker_pool.h"
#include "router/relay/relay_server.h"
#include "router/relay/security.h"
#include "router/router_config.h"
#include "router/router_metrics.h"

namespace llm::router {

class RouterServer {
 public:
  // `resolve` turns config.dns, and static workers named by host name, into addresses (tests
  // inject one; ResolveAll otherwise).
  explicit RouterServer(RouterConfig config, DnsDiscovery::Resolve resolve = ResolveAll);
  ~RouterServer();

  // Starts the pool, the servers and discovery. Errors name the key or the address.
  absl::Status Start();
  // Health NOT_SERVING and no new calls: the port is closed when this returns, and clients get
  // a GOAWAY. Calls in progress go on.
  void BeginDrain();
  // After BeginDrain: waits up to drain_grace_seconds for calls in progress, then stops (ending
  // what is left). True when nothing was left.
  bool FinishDrain();

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  const RouterMetrics& metrics() const { return metrics_; }
  int health_port() const { return health_port_; }
  int http_port() const { return http_port_; }  // 0: router.http_listen is empty
  WorkerPool& pool() { return *pool_; }
  // What the HTTP API's limits did (zeros before Start).
  HttpConnectionStats http_stats() const {
    return relay_ != nullptr ? relay_->http_stats() : HttpConnectionStats{};
  }

 private:
  // Start's parts: the worker pool (with the upstream TLS files' checked copies); the loopback
  // server for health and reflection and the router.health_listen one (returns the loopback
  // port); host names of discovery.workers resolved with a refresher each; the relay.
  absl::Status StartPool();
  absl::StatusOr<int> StartHealthServers();
  void ResolveStaticWorkers();
  absl::Status StartRelay(int internal_port);
  void SetServing(bool serving);
  void Stop();

  RouterConfig config_;
  DnsDiscovery::Resolve resolve_;
  RouterMetrics metrics_;
  std::unique_ptr<tls::VerifiedTlsFiles> upstream_tls_files_;  // outlives pool_'s channels
  std::unique_ptr<WorkerPool> pool_;
  // Registered on the internal server so health and reflection list the service; its calls
  // never reach it (the relay sends them to the workers).
  llm::v1::Generation::Service generation_placeholder_;
  std::unique_ptr<grpc::Server> internal_;
  std::unique_ptr<grpc::Server> health_;  // router.health_listen
  std::unique_ptr<RelaySecurity> security_;
  std::unique_ptr<PeriodicThread> reloader_;  // security_->Reload() every reload_seconds
  std::unique_ptr<RelayServer> relay_;
  std::unique_ptr<DnsDiscovery> discovery_;
  // Static workers named by host name: their addresses, and a resolver thread per name that
  // refreshes them every dns_refresh (the relay's loops never look a name up).
  WorkerAddresses worker_addresses_;
  std::vector<std::unique_ptr<DnsDiscovery>> name_refreshers_;
  int port_ = 0;
  int metrics_port_ = 0;
  int health_port_ = 0;
  int http_port_ = 0;
};

}  // namespace llm::router

#endif  // LLM_ROUTER_ROUTER_SERVER_H_
