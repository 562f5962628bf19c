// llm-worker: serves one model over gRPC (see worker/server). Configuration: --config FILE
// and/or --key value flags (`llm-worker --help` lists them; --print-config prints them as
// YAML with their defaults). SIGTERM, SIGINT or SIGHUP drains; a second one ends it at once.
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "common/shutdown_signals.h"
#include "common/tls/verified_tls_files.h"
#include "worker/server/worker_config.h"
#include "worker/server/worker_server.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (auto rc = llm::config::HandleInfoFlags(llm::server::WorkerConfigSchema(), "llm-worker", args,
                                             "/models/MODEL")) {
    return *rc;
  }
  llm::BlockShutdownSignals();  // taken by the thread below (shutdown_signals.h)

  auto config = llm::server::LoadWorkerConfig(args);
  if (!config.ok()) {
    std::fprintf(stderr, "llm-worker: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  // Signals are waited for from the start: a model can take minutes to load, and a pod deleted
  // (or a Ctrl-C) meanwhile must not wait for it (it waited out the whole load, then drained).
  // Before serving nothing is in flight, so the process just ends. The watcher outlives main's
  // scope, so what it shares has static storage.
  enum class Phase { kLoading, kServing, kFailed };
  static std::mutex mu;
  static Phase phase = Phase::kLoading;
  static std::promise<int> signalled;
  llm::WatchShutdownSignals(
      [](int sig) {
        std::lock_guard<std::mutex> lock(mu);
        if (phase == Phase::kLoading) {
          std::fprintf(stderr, "llm-worker: %s before serving: exiting\n", strsignal(sig));
          llm::tls::VerifiedTlsFiles::ExitRemovingCopies(0);
        }
        if (phase == Phase::kServing) signalled.set_value(sig);
      },
      [](int sig) {
        std::fprintf(stderr, "llm-worker: %s again: exiting now, open streams cut\n",
                     strsignal(sig));
        llm::tls::VerifiedTlsFiles::ExitRemovingCopies(1);
      });

  llm::server::WorkerServer server(*config);
  if (absl::Status st = server.Start(); !st.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      phase = Phase::kFailed;  // a signal now must not turn the failure into exit 0
    }
    std::fprintf(stderr, "llm-worker: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    phase = Phase::kServing;
  }
  if (server.health_port() != 0) {
    std::fprintf(stderr, "llm-worker: health (plaintext) on port %d\n", server.health_port());
  }
  // Tests and scripts read this line to find the ports.
  std::fprintf(stderr, "llm-worker: serving %s on port %d, metrics on port %d\n",
               config->model_name.c_str(), server.port(), server.metrics_port());
  const int sig = signalled.get_future().get();
  std::fprintf(stderr, "llm-worker: %s: draining (grace %.0f s)\n", strsignal(sig),
               config->drain_grace_seconds);
  const bool clean = server.Drain();
  std::fprintf(stderr, "llm-worker: %s\n",
               clean ? "drained, exiting" : "grace period over; remaining streams cancelled");
  return 0;
}
