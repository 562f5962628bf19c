// llm-router: relays llm.v1.Generation calls to the workers (see router/). Configuration:
// --config FILE and/or --key value flags (`llm-router --help`; --print-config prints every key
// with its default as YAML). SIGTERM, SIGINT or SIGHUP drains; a second one ends it at once.
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "common/shutdown_signals.h"
#include "common/tls/verified_tls_files.h"
#include "router/router_config.h"
#include "router/router_server.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (auto rc =
          llm::config::HandleInfoFlags(llm::router::RouterConfigSchema(), "llm-router", args, "")) {
    return *rc;
  }
  llm::BlockShutdownSignals();  // taken by the thread below (shutdown_signals.h)

  auto config = llm::router::LoadRouterConfig(args);
  if (!config.ok()) {
    std::fprintf(stderr, "llm-router: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  // The watcher outlives main's scope, so what it shares has static storage.
  static std::promise<int> signalled;
  llm::WatchShutdownSignals(
      [](int sig) { signalled.set_value(sig); },
      [](int sig) {
        std::fprintf(stderr, "llm-router: %s again: exiting now, open calls cut\n", strsignal(sig));
        llm::tls::VerifiedTlsFiles::ExitRemovingCopies(1);
      });
  llm::router::RouterServer server(*config);
  if (absl::Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "llm-router: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  if (server.health_port() != 0) {
    std::fprintf(stderr, "llm-router: health (plaintext) on port %d\n", server.health_port());
  }
  // Tests and scripts read this line to find the ports.
  // (http on port 0: router.http_listen is empty.)
  std::fprintf(stderr, "llm-router: routing on port %d, metrics on port %d, http on port %d\n",
               server.port(), server.metrics_port(), server.http_port());
  const int sig = signalled.get_future().get();
  server.BeginDrain();  // the port is closed once this returns
  std::fprintf(stderr, "llm-router: %s: draining (grace %.0f s)\n", strsignal(sig),
               config->drain_grace_seconds);
  const bool clean = server.FinishDrain();
  std::fprintf(stderr, "llm-router: %s\n",
               clean ? "drained, exiting" : "grace period over; remaining calls cancelled");
  return 0;
}
