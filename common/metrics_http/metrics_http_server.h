// The HTTP server behind a process's Prometheus /metrics (prometheus-cpp's Exposer, which runs
// civetweb), shared by llm-worker and llm-router.
//
// civetweb's acceptor thread polls its listening socket in 2 s quanta and checks for a stop only
// between them, so destroying an Exposer took up to 2 s: every drained worker and router spent
// it after its last call had ended. The destructor here wakes the acceptor by connecting to the
// port, so a stop takes milliseconds.
#ifndef LLM_COMMON_METRICS_HTTP_METRICS_HTTP_SERVER_H_
#define LLM_COMMON_METRICS_HTTP_METRICS_HTTP_SERVER_H_

#include <prometheus/collectable.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace prometheus {
class Exposer;
}

namespace llm {

class MetricsHttpServer {
 public:
  // Serves `collectable` on GET /metrics at `listen` ("host:port"; port 0 picks one). It is held
  // weakly (as prometheus::Exposer holds it): the caller keeps it alive.
  // UNAVAILABLE naming `key` (the config key, "server.metrics_listen") when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, const std::string& key,
      std::shared_ptr<prometheus::Collectable> collectable);
  // Stops serving; returns once the server's threads have ended.
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer(std::unique_ptr<prometheus::Exposer> exposer, std::string wake_host, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string wake_host_;  // where a connection reaches the listening socket
  int port_;
};

}  // namespace llm

#endif  // LLM_COMMON_METRICS_HTTP_METRICS_HTTP_SERVER_H_
