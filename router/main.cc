// llm-router: relays llm.v1.Generation calls to the workers (see router/). Configuration:
// --config FILE and/or --key value flags (`llm-router --help`; --print-config prints every key
// with its default as YAML). SIGTERM or SIGINT drains.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "router/router_config.h"
#include "router/router_server.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (auto rc =
          llm::config::HandleInfoFlags(llm::router::RouterConfigSchema(), "llm-router", args, "")) {
    return *rc;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto config = llm::router::LoadRouterConfig(args);
  if (!config.ok()) {
    std::fprintf(stderr, "llm-router: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
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
  int sig = 0;
  sigwait(&signals, &sig);
  server.BeginDrain();  // the port is closed once this returns
  std::fprintf(stderr, "llm-router: %s: draining (grace %.0f s)\n", strsignal(sig),
               config->drain_grace_seconds);
  const bool clean = server.FinishDrain();
  std::fprintf(stderr, "llm-router: %s\n",
               clean ? "drained, exiting" : "grace period over; remaining calls cancelled");
  return 0;
}
